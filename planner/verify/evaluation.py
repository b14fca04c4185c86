"""The `evaluation` rule of `planner verify`: a training plan's evaluation schedule
(planner/evaluation.py), re-derived from the plan's embedded graph.

    derived    its graph is the forward part of the training plan's embedded graph in
               inference mode, exactly, re-derived here from the graph's roles (nothing of
               planner.graph.evaluation, the builder it checks, is imported): a forward node
               writes no gradient and not only next values; Dropout passes its input on;
               BatchNorm reads its running statistics and writes y alone; the outputs are the
               step's that such nodes compute, and the nodes and tensors they need
    plan       it is a sound plan by every rule of planner.verify (its own ops, lanes, edges,
               arena), of the training plan's backend and machine
    bound      every parameter and state tensor of its graph, and nothing else, is bound once,
               to the training plan's buffer of the same name and bytes, on the device
    arena      no bytes it owns lie below arena_offset, which no bound tensor passes

Example:
    >>> from planner.verify import verify_plan_data
    >>> evaluation_problems({"kind": "inference"}, verify_plan_data)
    []
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

from planner.ir.graph import Graph, Node
from planner.ops import get_op

Verify = Callable[..., list[str]]


def evaluation_problems(plan: dict[str, Any], verify: Verify,
                        graphs: dict[int, Graph] | None = None) -> list[str]:
    """Every rule of the module docstring the plan (as JSON data) breaks, each message
    starting "evaluation: "; [] when it holds or the plan has no evaluation. `verify`: every
    rule of a plan (planner.verify.verify_plan_data, which calls this: passed in, as this
    module is one of its rules); `graphs`: the graphs its check validated, by the id of their
    data (planner.verify.graph.embedded_graph), shared with `verify`."""
    evaluation = plan.get("evaluation")
    if evaluation is None:
        return []
    return [f"evaluation: {p}" for p in _problems(plan, evaluation, verify,
                                                  {} if graphs is None else graphs)]


def _validated(raw: Any, graphs: dict[int, Graph]) -> Graph:
    # Validated once per check: the training plan's graph by the graph rule, the evaluation's
    # here (then its own graph rule reads this record).
    if id(raw) not in graphs:
        graphs[id(raw)] = Graph.model_validate(raw)
    return graphs[id(raw)]


def _problems(plan: dict[str, Any], evaluation: dict[str, Any], verify: Verify,
              graphs: dict[int, Graph]) -> list[str]:
    if plan.get("kind") != "training":
        return ["only a training plan carries an evaluation schedule"]
    inner = evaluation["plan"]
    try:
        expected = _forward_in_inference_mode(_validated(plan["graph"], graphs))
    except ValidationError as e:  # one line: the first error's field and message
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        return [f"no evaluation graph can be made from the embedded graph: field {where}: "
                f"{first['msg']}"]
    except ValueError as e:
        return [f"no evaluation graph can be made from the embedded graph: "
                f"{' '.join(str(e).split())}"]
    if _validated(inner["graph"], graphs) != expected:
        return ["its graph is not the evaluation graph of the plan's embedded graph "
                "(planner.graph.evaluation); re-plan it"]
    problems = [f"{p}" for p in verify(inner, [n.name for n in expected.nodes], graphs)]
    # Its target names the streams its own ops use (a GPU plan's): the machine must agree.
    same = ("name", "core_of", "compute_capability", "gpu_memory_bytes")
    if inner.get("backend") != plan.get("backend") or any(
            inner["target"].get(k) != plan["target"].get(k) for k in same):
        problems.append("it is planned for another backend or target than the training plan")
    return problems + _binding_problems(plan, evaluation, expected)


def _forward_in_inference_mode(training: Graph) -> Graph:
    """The `derived` rule's graph (module docstring)."""
    tensor = training.tensor_map
    passed: dict[str, str] = {}        # a Dropout's output -> the tensor it passes on
    made: dict[str, Node] = {}         # a computable tensor -> its inference-mode producer
    statistics: dict[str, str] = {}    # a BatchNorm's new running statistic -> the old one
    known = {t.name for t in training.tensors if t.name not in training.producer}

    def at(t: str) -> str:
        return passed.get(t, t)

    for n in training.nodes:
        outs = [tensor[o] for o in n.outputs]
        if any(t.role == "grad" for t in outs) or all(t.updates is not None for t in outs):
            continue  # backward, or an update
        if not all(at(i) in known or at(i) in made for i in n.inputs):
            continue  # reads what only training computes
        op = get_op(n.op)
        if op.evaluation_identity:  # Dropout
            passed[n.outputs[0]] = at(n.inputs[0])
            continue
        inputs = tuple(at(i) for i in n.inputs)
        # Nodes are immutable: one whose inputs pass through no Dropout is kept as it is
        # (a copy of each was a fifth of this rule).
        infer = n if inputs == n.inputs else n.model_copy(update={"inputs": inputs})
        if op.running_statistics and n.attrs.get("training", True):  # BatchNorm
            infer = infer.model_copy(update={"attrs": {**n.attrs, "training": False},
                                             "outputs": n.outputs[:1]})
            # A later call of the same BatchNorm reads the running statistics themselves.
            if all(k < len(n.outputs) for k, _ in op.running_statistics):
                pairs = {n.outputs[k]: inputs[j] for k, j in op.running_statistics}
                statistics.update(pairs)
                passed.update(pairs)
        made.update({o: infer for o in infer.outputs})
    outputs = tuple(dict.fromkeys(at(o) for o in training.outputs if o not in statistics
                                  and (at(o) in made or at(o) in known)))
    wanted, stack = set(), [o for o in outputs if o in made]
    while stack:  # the producers the outputs need, back to the graph's sources
        node = made[stack.pop()]
        if node.name not in wanted:
            wanted.add(node.name)
            stack += [i for i in node.inputs if i in made]
    nodes = tuple({n.name: n for n in made.values() if n.name in wanted}.values())
    used = set(outputs).union(*(set(n.inputs) | set(n.outputs) for n in nodes))
    return Graph(name=training.name, kind="inference", math=training.math, outputs=outputs,
                 tensors=tuple(t.model_copy(update={"layout": None}) if t.layout else t
                               for t in training.tensors if t.name in used), nodes=nodes,
                 loss=training.loss if training.loss in outputs else None)


def _binding_problems(plan: dict[str, Any], evaluation: dict[str, Any],
                      graph: Graph) -> list[str]:
    problems = []
    training = {t["name"]: t for t in plan.get("tensors", [])}
    own = {t["name"]: t for t in evaluation["plan"].get("tensors", [])}
    persistent = {t.name for t in graph.by_role("param", "state")}
    seen: set[str] = set()
    for b in evaluation.get("bound", []):
        name, to = b["tensor"], b["training"]
        if name not in persistent:
            problems.append(f"tensor {name!r} is bound but is no parameter or state tensor")
        elif name in seen:
            problems.append(f"tensor {name!r} is bound twice")
        elif to != name:
            problems.append(f"tensor {name!r} is bound to the training plan's {to!r}, not to "
                            f"its tensor of the same name")
        elif to not in training or name not in own:
            problems.append(f"tensor {name!r} is bound, but a plan has no buffer of that name")
        elif (training[to]["bytes"], training[to]["placement"]) != (own[name]["bytes"], "device"):
            problems.append(f"tensor {name!r} is bound to a training buffer of other bytes or "
                            f"placement")
        seen.add(name)
    problems += [f"{kind} tensor {name!r} is not bound to the training plan's"
                 for name in sorted(persistent - seen)
                 for kind in [graph.tensor(name).role]]
    start = evaluation.get("arena_offset", 0)
    for t in own.values():
        if t["name"] in seen and t["offset"] + t["bytes"] > start > 0:
            problems.append(f"bound tensor {t['name']!r} ends past arena_offset {start}")
        if t["name"] not in seen and t["placement"] == "device" and t["offset"] < start:
            problems.append(f"buffer {t['name']!r} lies below arena_offset {start}, in bytes "
                            f"the executor does not allocate")
    return problems
