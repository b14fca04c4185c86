"""The evaluation graph of a training graph: its forward part in inference mode, derived from
the training graph itself (never from a second import), so it cannot disagree with what
trains. A training plan carries its schedule (Plan.evaluation), and the executor built from
that plan runs it with `evaluate` over the parameters it trains (docs/training.md).

    forward only    the nodes the step's forward outputs (logits, the loss, kept tensors)
                    need; no gradient, no update, no optimizer or step-count tensor
    BatchNorm       training=False: it reads its running statistics and writes y alone (no
                    new running statistics, no saved batch statistics)
    Dropout         the identity: its readers read its input (no mask, no `rng/step`)

Every tensor keeps its training-graph name, role, shape and dtype, so a parameter or state
tensor of the evaluation graph names the training tensor whose bytes it reads. The loss stays
(evaluation returns it beside the outputs), and with it the labels the loss reads.

Example:
    >>> from planner.graph.optimizer import Optimizer
    >>> from planner.frontend.prepare import prepare, GraphOptions
    >>> g = prepare("zoo:mlp?batch=2&hidden=4&in_features=3&classes=2",
    ...             GraphOptions(optimizer=Optimizer(kind="sgd")))
    >>> e = evaluation_graph(g)
    >>> e.kind, e.outputs, [n.op for n in e.nodes]
    ('inference', ('logits', 'loss'), ['MatMul', 'MatMul', 'SoftmaxCrossEntropy'])
"""

from __future__ import annotations

from planner.graph.validate import GraphError, check_graph
from planner.ir.graph import Graph, Node
from planner.ir.phases import node_phase
from planner.ops import get_op


def evaluation_graph(training: Graph) -> Graph:
    """The forward part of `training` in inference mode (module docstring), checked.
    GraphError for a graph that is not a training graph."""
    if training.kind != "training":
        raise GraphError(f"graph {training.name!r} is an {training.kind} graph: its evaluation "
                         f"graph is only made from a training graph")
    # The forward nodes whose inputs evaluation has (a node training runs after the backward
    # pass may read a gradient), in inference mode; Dropout is the identity: a reader of its
    # output reads its input.
    same: dict[str, str] = {}
    have = {t.name for t in training.tensors if t.name not in training.producer}
    forward: list[Node] = []
    for n in training.nodes:
        if node_phase(training, n) != "forward" or any(same.get(i, i) not in have
                                                       for i in n.inputs):
            continue
        if get_op(n.op).evaluation_identity:  # Dropout
            same[n.outputs[0]] = same.get(n.inputs[0], n.inputs[0])
            continue
        node = _inference_mode(n, same)
        have.update(node.outputs)
        forward.append(node)
    # The step's outputs evaluation computes (not a BatchNorm's new running statistics, kept
    # with --keep), and the nodes they need.
    statistics = {n.outputs[k] for n in training.nodes if n.attrs.get("training", True)
                  for k, _ in get_op(n.op).running_statistics if k < len(n.outputs)}
    outputs = tuple(dict.fromkeys(same.get(o, o) for o in training.outputs
                                  if o not in statistics and same.get(o, o) in have))
    needed = set(outputs)
    kept: list[Node] = []
    for n in reversed(forward):
        if needed.intersection(n.outputs):
            needed.update(n.inputs)
            kept.append(n)
    nodes = tuple(reversed(kept))
    used = set(outputs).union(*(set(n.inputs) | set(n.outputs) for n in nodes))
    # Plain images: the blocked ones were kept so between the training step's kernels
    # (planner.step.blocked), which inference mode changes (BatchNorm's).
    tensors = tuple(t.model_copy(update={"layout": None}) if t.layout else t
                    for t in training.tensors if t.name in used)
    return check_graph(Graph(name=training.name, kind="inference", tensors=tensors, nodes=nodes,
                             outputs=outputs, math=training.math,
                             loss=training.loss if training.loss in outputs else None))


def _inference_mode(node: Node, same: dict[str, str]) -> Node:
    update: dict = {"inputs": tuple(same.get(i, i) for i in node.inputs)}
    pairs = get_op(node.op).running_statistics  # BatchNorm's
    if pairs and node.attrs.get("training", True):
        update |= {"attrs": {**node.attrs, "training": False}, "outputs": node.outputs[:1]}
        # A later call of the same BatchNorm, which training chains through this one's new
        # running statistics, reads the running statistics themselves, as in eval().
        if all(k < len(node.outputs) for k, _ in pairs):
            same.update({node.outputs[k]: same.get(node.inputs[j], node.inputs[j])
                         for k, j in pairs})
    return node.model_copy(update=update)
