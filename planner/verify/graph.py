"""Verify a plan against the graph it embeds, trusting nothing the plan says about that graph.

The embedded graph is validated again (names, shape rules, updates; planner.graph.validate),
and everything the plan derives from it is derived again here and compared:

    graph        the embedded graph passes check_graph; every tensor's size fits in 2^62 bytes
    op_types     a plan op named after a graph node runs that node's op type
    ordering     the plan's stated ordering (lanes and happens-before edges) implies every
                 pair the graph and the inserted ops need ordered: data, in-place, buffers an
                 inserted op writes or reads (planner.verify.order); the plan's deps are not
                 trusted
    bytes        a buffer holding a graph tensor has at least the tensor's bytes; offsets and
                 ends fit in 2^62
    writers      a buffer is written by the inserted op the memory section says writes it, else
                 by the node producing its tensor (none for inputs and persistent tensors); a
                 buffer holding a graph tensor under another name than the tensor's is a copy
                 an inserted op writes (a node writes its outputs' own buffers only)
    readers      every op reading a tensor is listed as a reader of one of its buffers, and
                 every inserted op as a reader of the buffers it reads
    collectives  (planner.verify.order.collective_problems) every two collectives are ordered
                 by the stated ordering, so every rank, running the same plan, issues them in
                 one order
    buckets      a collective's bucket is gradients: each member a gradient (role grad) a
                 node of the step writes, or a gradient sum's new value (AccumulateGrad's
                 output), none in two buckets nor reduced twice; and where the
                 graph reduces gradients, every gradient an update of a parameter reads is a
                 collective's output, so no rank steps on its own unreduced gradient
    sharding     ZeRO-3's gathered copies, shards and their updates (planner.verify.sharding)
    overflow     fp16-mixed's overflow flag every skip and scale update reads is reduced over
                 the ranks, and guards every parameter's next value (planner.verify.overflow)
    blocked      an image the graph keeps channel-blocked (Tensor.layout) is a CPU plan's, in
                 its one blocked layout, no output of the step, and read and written only at
                 operands the op's definition says its kernel takes so (OpDef.channel_blocked;
                 operands it takes alike all in one layout)
    folds        a folded LeakyRelu's slope is a positive normal float32 and its gradient's
                 slope is the forward's (planner.verify.folds)
    aliases      the buffer the graph's node writes an in-place update into aliases a buffer
                 of the tensor it updates (a recompute's copy goes to scratch)
                 (planner.verify.memory: an alias is one the graph says, update, view or
                 an output written over its input, whose old value no op reads later)

Shares no code with the scheduler or the memory planner.

Example:
    >>> from planner.pipeline import plan as make_plan
    >>> from planner.target import preset
    >>> from planner.zoo import build
    >>> plan = make_plan(build("mlp", batch=2, hidden=[4], in_features=3, classes=2),
    ...                  preset("xeon-8180")).model_dump(mode="json", by_alias=True)
    >>> verify_graph_data(plan)
    []
    >>> victim = plan["ops"][1]               # fc1/bias_add reads fc1: drop that edge
    >>> plan["happens_before"] = [e for e in plan["happens_before"]
    ...                           if e["after"] != victim["name"]]
    >>> victim["lane"] = 1                    # and the lane that ordered them
    >>> for problem in verify_graph_data(plan): print(problem)  # doctest: +NORMALIZE_WHITESPACE
    op 'fc1/bias_add' reads tensor 'fc1' written by op 'fc1', but nothing the executor enforces
    orders them: no lane or chain of happens-before edges leads from 'fc1' to 'fc1/bias_add'
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from pydantic import ValidationError

from planner.graph.validate import check_graph
from planner.ir.graph import Graph
from planner.ops.base import BY_POSITION, get_op
from planner.ops.collective import COLLECTIVE_OPS
from planner.verify.folds import fold_problems
from planner.verify.order import StatedOrder, collective_problems, ordering_problems
from planner.verify.overflow import overflow_flag_problems
from planner.verify.sharding import sharding_problems

# No size or offset may come near 2^63, where int64 sums in the executor would wrap.
MAX_BYTES = 2**62


def verify_graph_data(plan: dict[str, Any], hb: StatedOrder | None = None,
                      graphs: dict[int, Graph] | None = None) -> list[str]:
    """Every rule of the module docstring the plan (as JSON data) breaks; [] when it holds.
    `hb`: the plan's StatedOrder, when the caller has it; `graphs`: embedded_graph's."""
    graph, problems = embedded_graph(plan, graphs)
    if graph is None:
        return problems
    problems += op_types(graph, plan)
    hb = hb or StatedOrder(plan)
    problems += ordering_problems(graph, plan, hb)
    problems += collective_problems(graph, hb)
    problems += sharding_problems(graph, hb)
    for rule in (buffer_bytes, buffer_writers, buffer_readers, update_aliases, bucket_members,
                 overflow_flag_problems, blocked_images, fold_problems):
        problems += rule(graph, plan)
    return problems


def embedded_graph(plan: dict[str, Any], graphs: dict[int, Graph] | None = None
                   ) -> tuple[Graph | None, list[str]]:
    """The plan's graph, validated again; (None, [the reason]) when it is not a valid graph.
    `graphs`: records one check validated already, by the id of their data (still held by the
    plan being checked, so no id is reused); the one validated here is added."""
    raw = plan.get("graph")
    if not isinstance(raw, dict):
        return None, ["the plan embeds no graph"]
    try:
        record = graphs.get(id(raw)) if graphs is not None else None
        if record is None:
            record = Graph.model_validate(raw)
            if graphs is not None:
                graphs[id(raw)] = record
        graph = check_graph(record)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        return None, [f"embedded graph: field {where}: {first['msg']}"]
    except (ValueError, OverflowError, RecursionError) as e:
        return None, [f"embedded graph: {' '.join(str(e).split())}"]
    big = [t for t in graph.tensors if t.nbytes > MAX_BYTES]
    if big:
        return None, [f"embedded graph: tensor {big[0].name!r} holds {big[0].nbytes} bytes, "
                      f"more than 2^62"]
    return graph, []


def blocked_images(graph: Graph, plan: dict[str, Any]) -> list[str]:
    """Every image the graph keeps channel-blocked is read and written only by kernels that take
    it so (module docstring), from the ops' own definitions (OpDef.channel_blocked)."""
    blocked = {t.name: t.layout for t in graph.tensors if t.layout}
    if not blocked:
        return []
    if plan.get("backend") != "cpu" or len(set(blocked.values())) > 1:
        return [f"the graph keeps images in {', '.join(sorted(set(blocked.values())))}: a cpu "
                f"plan's images are plain or in one blocked layout"]
    returned = [t for t in graph.outputs if t in blocked]
    if returned:
        return [f"tensor {returned[0]!r} is an output of the step but kept blocked"]
    for n in graph.nodes:
        operands = {("in", k): t for k, t in enumerate(n.inputs)}
        operands |= {("out", k): t for k, t in enumerate(n.outputs)}
        if not any(t in blocked for t in operands.values()):
            continue
        rule = get_op(n.op).channel_blocked
        if rule == BY_POSITION:  # every operand alike but scalar bounds
            images = tuple(s for s, t in operands.items() if graph.tensor(t).size > 1)
            alike = [images] if len({graph.tensor(operands[s]).shape for s in images}) <= 1 \
                else []
        else:
            alike = list(get_op(n.op).blocked_groups(n.attrs, len(n.inputs), len(n.outputs)))
        taken = {slot for slots in alike for slot in slots}
        odd = [t for slot, t in operands.items() if t in blocked and slot not in taken]
        odd += [operands[slots[0]] for slots in alike
                if len({blocked.get(operands[s]) for s in slots}) > 1]
        if odd:
            return [f"op {n.name!r} ({n.op}) reads or writes tensor {odd[0]!r} in a layout its "
                    f"kernel does not take there (OpDef.channel_blocked)"]
    return []


def op_types(graph: Graph, plan: dict[str, Any]) -> list[str]:
    """A plan op named after a graph node runs that node's op type."""
    ops = {o["name"]: o for o in plan.get("ops", [])}
    return [f"op {n.name!r} runs {ops[n.name].get('op')!r}, but the graph's node is a {n.op}"
            for n in graph.nodes if n.name in ops and ops[n.name].get("op") != n.op]


def buffer_bytes(graph: Graph, plan: dict[str, Any]) -> list[str]:
    """A buffer holding a graph tensor has at least its bytes; no buffer ends past 2^62, nor
    does a pool size of the summary."""
    problems = []
    for b in plan.get("tensors") or []:
        end = b["offset"] + b["bytes"]
        if end > MAX_BYTES:
            problems.append(f"buffer {b['name']!r} ends at byte {end}, past 2^62")
        t = graph.tensor_map.get(b.get("tensor") or "")
        if t is not None and b["bytes"] < t.nbytes:
            problems.append(f"buffer {b['name']!r} has {b['bytes']} bytes, but tensor "
                            f"{t.name!r} needs {t.nbytes}")
    memory = (plan.get("summary") or {}).get("memory") or {}
    for key in ("arena_bytes", "host_bytes", "load_bytes"):
        if isinstance(memory.get(key), int) and memory[key] > MAX_BYTES:
            problems.append(f"summary memory {key} {memory[key]} is past 2^62")
    return problems


def buffer_writers(graph: Graph, plan: dict[str, Any]) -> list[str]:
    """A buffer is written by the op the memory section declares writes it (an inserted op's
    output), else by the graph's node producing its tensor (none for inputs and persistent
    tensors): what the executor writes is what verify reasons about."""
    declared = {b: m["name"] for m in (plan.get("memory") or {}).get("ops", [])
                for b in m.get("outputs", ())}
    producer = {o: n.name for n in graph.nodes for o in n.outputs}
    problems = []
    for b in plan.get("tensors") or []:
        t = b.get("tensor") or ""
        if b["name"] not in declared and t not in graph.tensor_map:
            continue  # a scratch area or workspace: its op's own (planner.verify.memory)
        if b["name"] not in declared and b["name"] != t:
            problems.append(f"buffer {b['name']!r} holds tensor {t!r} under another name, but "
                            f"no inserted op writes it: the node producing {t!r} writes the "
                            f"buffer {t!r} only, so its readers would read bytes nothing wrote")
            continue
        want = declared.get(b["name"], producer.get(t, ""))
        if b.get("writer", "") != want:
            problems.append(f"buffer {b['name']!r} of tensor {t!r} names writer "
                            f"{b.get('writer', '')!r}, but the "
                            f"{'memory section' if b['name'] in declared else 'graph'}'s is "
                            f"{want or 'none'!r}")
    return problems


def buffer_readers(graph: Graph, plan: dict[str, Any]) -> list[str]:
    """Every op reading a tensor is listed as a reader of one of its buffers, and every
    inserted op as a reader of each buffer it reads (planner.verify.memory orders a buffer's
    listed accesses)."""
    buffers = plan.get("tensors") or []
    of_tensor: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for b in buffers:
        of_tensor[b.get("tensor") or ""].append(b)
    problems = []
    for t in graph.tensors:
        held = of_tensor.get(t.name, [])
        if not held:
            continue  # planner.verify.memory reports a tensor no buffer holds
        listed = {r for b in held for r in b.get("readers", ())}
        problems += [f"op {reader.name!r} reads tensor {t.name!r}, but no buffer of it lists "
                     f"that reader" for reader in graph.consumers.get(t.name, ())
                     if reader.name not in listed]
    inserted = (plan.get("memory") or {}).get("ops", [])
    readers = {b["name"]: set(b.get("readers", ())) for b in buffers} if inserted else {}
    for m in inserted:
        problems += [f"inserted op {m['name']!r} reads buffer {b!r}, which does not list it "
                     f"as a reader" for b in m.get("inputs", ())
                     if b in readers and m["name"] not in readers[b]]
    return problems


def update_aliases(graph: Graph, plan: dict[str, Any]) -> list[str]:
    """The buffer the graph's node writes an in-place update into aliases a buffer of the
    tensor it updates (a recompute's copy goes to scratch). planner.verify.memory checks that
    every alias is one the graph says."""
    buffers = plan.get("tensors") or []
    names = {b["name"]: b for b in buffers}
    producer = {o: n.name for n in graph.nodes for o in n.outputs}
    problems = []
    for b in buffers:
        t = graph.tensor_map.get(b.get("tensor") or "")
        if t is None or not t.updates or b.get("writer") != producer.get(t.name):
            continue
        base = names.get(b.get("alias_of") or "")
        if base is None or base.get("tensor") != t.updates:
            problems.append(f"buffer {b['name']!r} holds {t.name!r}, the next value of "
                            f"{t.updates!r}, but does not alias a buffer of it")
    return problems


# The collectives that reduce gradients (a ShardedUpdate reads a ReduceScatter's shard).
REDUCING = ("AllReduce", "ReduceScatter")
# The collectives whose gradient outputs are made of their reduced inputs alone.
_UNSCALE_CLIP = ("ShardedClipGradNorm", "ShardedUnscaleGrads")


def bucket_members(graph: Graph, plan: dict[str, Any]) -> list[str]:
    """A reducing collective's bucket is gradients of the step, each reduced once; where the
    graph reduces gradients, every gradient read by the node writing a parameter's next value
    comes out of a collective (module docstring, `buckets`). Re-derived from the graph's
    gradient tensors: which buckets the plan's layout makes is planner.verify.memory's."""
    reducing = [n for n in graph.nodes if n.op in REDUCING]
    if not reducing:
        return []
    producer = {o: n for n in graph.nodes for o in n.outputs}
    reduced = {o for n in reducing for o in n.outputs}
    # A gradient made of reduced ones alone (unscaled, clipped: the shards' clip too) is
    # reduced too.
    derived = set(reduced)
    for n in graph.nodes:
        grads = [t for t in n.inputs if graph.tensor_map[t].role == "grad"]
        if (n.op not in COLLECTIVE_OPS or n.op in _UNSCALE_CLIP) and grads \
                and all(t in derived for t in grads):
            derived.update(n.outputs)
    problems = []
    bucket_of: dict[str, str] = {}
    for n in reducing:
        for t in n.inputs:
            role = graph.tensor_map[t].role
            # with accumulation, a gradient sum's new value (once per optimizer step)
            summed = t in producer and producer[t].op == "AccumulateGrad"
            if (role != "grad" and not summed) or t not in producer or t in reduced:
                problems.append(f"collective {n.name!r} reduces tensor {t!r}, which is not a "
                                f"gradient the step writes (role {role}"
                                f"{', already reduced' if t in reduced else ''})")
            elif bucket_of.setdefault(t, n.name) != n.name:
                problems.append(f"gradient {t!r} is reduced by collectives {bucket_of[t]!r} and "
                                f"{n.name!r}")
    for n in graph.nodes:
        updates = {graph.tensor_map[o].updates for o in n.outputs}
        if n.op in COLLECTIVE_OPS or not any(
                u and graph.tensor_map[u].role == "param" for u in updates):
            continue
        problems += [f"op {n.name!r} updates a parameter with gradient {t!r}, which no "
                     f"collective reduces: each rank would step on its own gradient"
                     for t in dict.fromkeys(n.inputs)
                     if graph.tensor_map[t].role == "grad" and t not in derived]
    return problems
