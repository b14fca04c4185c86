"""A residual block's sum folded into the BatchNorm before it (a CPU step pass): the normalised
branch is never written out and read back.

A bottleneck or basic block ends in act(bn(conv(...)) + shortcut): ResNet-50 has 16, ResNet-18
8. Apart, the BatchNorm writes its y and the Add reads it back beside the shortcut to write the
sum, two passes over an image that no other op reads (ResNet-50 at width 0.25, 64 px, batch 32
on a 2-core AVX-512 VM: 16 Adds 0.6-0.7 ms of a 23 ms step). Folded, the CPU runtime's BatchNorm
loops (kernels/batch_norm.cpp) add the shortcut to each normalised element as they write it and
apply the Add's activation: the same float32 additions (they commute), so the step computes the
bits of the ops apart.

`fold_norm_sums` rewrites, in a graph after autodiff (and after planner.step.fold_sum_relu
gave the Add its Relu), BatchNorm -> Add(y, s) where:
  - the BatchNorm is a training one the runtime's loops take with no activation of its own
    (planner.step.fold_norm_relu.loops_take), and five inputs;
  - its y is read by that Add alone, as one of its two inputs, and is no graph output;
  - the Add is float32 with its other input s of its output's shape (no broadcast);
  - nothing between the two reads the BatchNorm's other outputs (its statistics).
The BatchNorm takes s as its sixth input and the Add's activation and writes the Add's output
under its name, in the Add's place in the node order (where s exists); y and the Add go. The
gradient is untouched: the Add's is the identity to both inputs, and BatchNormGrad reads x and
the saved statistics, not y. Where both of the Add's inputs are such BatchNorms' (a
downsampling block's two branches), the first folds. The evaluation graph made from a folded
step keeps the sum in the BatchNorm, in inference mode (planner/graph/evaluation.py).

Example (the block's sum after its Relu is folded by planner.step.fold_sum_relu):
    >>> from planner.graph.builder import GraphBuilder
    >>> from planner.frontend.autodiff import make_training_graph
    >>> from planner.step.fold_sum_relu import fold_sum_relus
    >>> from planner.graph.optimizer import Optimizer
    >>> from planner.zoo.layers import batch_norm, conv2d, head, relu
    >>> b = GraphBuilder("block")
    >>> x = relu(b, conv2d(b, b.input("x", (2, 8, 4, 4)), 8, 3, pad=1, name="c0"), name="r0")
    >>> y = batch_norm(b, conv2d(b, x, 8, 3, pad=1, name="c1"), name="bn")
    >>> y = relu(b, b.op("Add", [y, x], name="add"), name="r1")
    >>> g = make_training_graph(b.build(head(b, b.op("Flatten", [y], {"axis": 1}), 2, True)),
    ...                         Optimizer(kind="sgd"))
    >>> folded = fold_norm_sums(fold_sum_relus(g))
    >>> [(n.op, len(n.inputs), n.attrs.get("activation")) for n in folded.nodes
    ...  if n.op in ("BatchNorm", "Add")]
    [('BatchNorm', 6, 'relu')]
"""

from __future__ import annotations

from planner.graph.validate import check_graph
from planner.ir.graph import Graph, Node
from planner.step.fold_norm_relu import loops_take


def fold_norm_sums(graph: Graph) -> Graph:
    """`graph` with each foldable BatchNorm -> Add pair (module docstring) as one BatchNorm,
    checked; `graph` itself where there is none."""
    position = {n.name: k for k, n in enumerate(graph.nodes)}
    pairs: dict[str, tuple[Node, str]] = {}  # the Add's name -> (its BatchNorm, the shortcut)
    for add in graph.nodes:
        if (found := _norm_before(graph, add, position)) is not None:
            pairs[add.name] = found
    if not pairs:
        return graph
    norms = {bn.name for bn, _ in pairs.values()}
    gone = {bn.outputs[0] for bn, _ in pairs.values()}
    nodes = []
    for n in graph.nodes:
        if n.name in norms:
            continue
        if n.name in pairs:  # the Add: the BatchNorm lands in its place
            bn, shortcut = pairs[n.name]
            nodes.append(bn.model_copy(update={
                "attrs": {**bn.attrs, "activation": n.attrs.get("activation") or "none"},
                "inputs": (*bn.inputs, shortcut), "outputs": (n.outputs[0], *bn.outputs[1:])}))
        else:
            nodes.append(n)
    return check_graph(graph.model_copy(update={
        "nodes": tuple(nodes), "tensors": tuple(t for t in graph.tensors if t.name not in gone)}))


def _norm_before(graph: Graph, add: Node, position: dict[str, int]) -> tuple[Node, str] | None:
    """(the BatchNorm, the shortcut) that Add `add` folds into, when the pair folds."""
    if add.op != "Add" or len(add.inputs) != 2 or add.inputs[0] == add.inputs[1]:
        return None
    out = graph.tensor(add.outputs[0])
    if any(graph.tensor(t).dtype != "float32" or graph.tensor(t).shape != out.shape
           for t in add.inputs):
        return None
    for k, y in enumerate(add.inputs):
        bn = graph.producer.get(y)
        if bn is None or bn.op != "BatchNorm" or len(bn.inputs) != 5 \
                or not loops_take(graph, bn, bn.inputs[0]) \
                or y in graph.outputs or len(graph.consumers[y]) != 1:
            continue
        between = graph.nodes[position[bn.name] + 1:position[add.name]]
        if any(set(n.inputs) & set(bn.outputs[1:]) for n in between):
            continue
        return bn, add.inputs[1 - k]
    return None
