"""A residual sum's Relu and the Relu's gradient folded into the sums (a CPU step pass): one
pass over the image where there were two, forward and backward.

A residual block ends in relu(branch + shortcut): ResNet-50 has 16, ResNet-18 8. Apart, the Add
writes the sum and the Relu reads it back and writes it again; in the backward pass the block
output's gradient is the AddN of what its two readers sent back, which the ReluGrad reads
back beside the Relu's output r to write the sum's gradient. Each is a full pass over an
activation the op before had in cache a moment ago (ResNet-50 at width 0.25, 64 px, batch 32
on a 2-core AVX-512 VM: 16 Relu 1.25 ms, 16 ReluGrad 0.83 ms of a 45 ms step). Folded, the
CPU runtime's sum loops (kernels/binary.cpp) apply the rule as each element is written:
Relu's (fused_relu.h relu_value) to the Add's sum, ReluGrad's (r <= 0 ? 0 : sum) to the AddN's,
so the step computes the bits of the ops apart.

`fold_sum_relus` rewrites, in a graph after autodiff:
  - Add(a, b) -> Relu, where a and b have the Add's output shape (no broadcast), the sum is
    read by that Relu alone (as its input) and is no graph output: the Add takes
    `activation: relu` and writes the Relu's output, in the Relu's place in the node order;
  - AddN(x1, ..., xn) -> ReluGrad(sum, r), where the sum is read by that ReluGrad alone (as
    its dy) and is no graph output: the AddN takes `activation: relu` and r as its last
    input, and writes the ReluGrad's output, in the ReluGrad's place.
Float32 throughout (mixed precision's low-type images are left apart, as the other folds
leave them). A pair that does not fold stays as it was. The evaluation graph made from a folded
step keeps the Add's activation (planner/graph/evaluation.py: it is the forward's own op).

Example (c0's Relu is the convolution's own; r1's gradient reads the head's alone, no AddN):
    >>> from planner.graph.builder import GraphBuilder
    >>> from planner.frontend.autodiff import make_training_graph
    >>> from planner.graph.optimizer import Optimizer
    >>> from planner.zoo.layers import conv2d, head, relu
    >>> b = GraphBuilder("block")
    >>> x = relu(b, conv2d(b, b.input("x", (2, 4, 4, 4)), 4, 3, pad=1, name="c0"), name="r0")
    >>> y = conv2d(b, x, 4, 3, pad=1, name="c1")
    >>> y = relu(b, b.op("Add", [y, x], name="add"), name="r1")
    >>> g = make_training_graph(b.build(head(b, b.op("Flatten", [y], {"axis": 1}), 2, True)),
    ...                         Optimizer(kind="sgd"))
    >>> folded = fold_sum_relus(g)
    >>> [(n.op, n.attrs.get("activation")) for n in folded.nodes
    ...  if n.op in ("Add", "AddN", "Relu", "ReluGrad")]
    [('Add', 'relu'), ('ReluGrad', None), ('AddN', 'relu')]
"""

from __future__ import annotations

from planner.graph.validate import check_graph
from planner.ir.graph import Graph, Node


def fold_sum_relus(graph: Graph) -> Graph:
    """`graph` with each foldable Add -> Relu and AddN -> ReluGrad pair (module docstring) as
    one op, checked; `graph` itself where there is none."""
    pairs = {after.name: sum_node for sum_node in graph.nodes
             if (after := _relu_after(graph, sum_node)) is not None}
    if not pairs:
        return graph
    folded = {n.name for n in pairs.values()}
    gone = {n.outputs[0] for n in pairs.values()}
    nodes = []
    for n in graph.nodes:
        if n.name in folded:
            continue
        if n.name in pairs:  # the Relu or ReluGrad: the sum lands in its place
            head = pairs[n.name]
            extra = (n.inputs[1],) if n.op == "ReluGrad" else ()
            nodes.append(head.model_copy(update={
                "attrs": {**head.attrs, "activation": "relu"},
                "inputs": (*head.inputs, *extra), "outputs": n.outputs}))
        else:
            nodes.append(n)
    return check_graph(graph.model_copy(update={
        "nodes": tuple(nodes), "tensors": tuple(t for t in graph.tensors if t.name not in gone)}))


def _relu_after(graph: Graph, node: Node) -> Node | None:
    """The Relu (after an Add) or ReluGrad (after an AddN) that sum `node` folds with."""
    if node.op not in ("Add", "AddN") or (node.attrs.get("activation") or "none") != "none" \
            or len(node.outputs) != 1:
        return None
    y = graph.tensor(node.outputs[0])
    if any(graph.tensor(t).dtype != "float32" or graph.tensor(t).shape != y.shape
           for t in (*node.inputs, *node.outputs)):
        return None
    readers = graph.consumers[y.name]
    if y.name in graph.outputs or len(readers) != 1:
        return None
    (reader,) = readers
    wanted = "Relu" if node.op == "Add" else "ReluGrad"
    if reader.op != wanted or reader.inputs[0] != y.name or y.name in reader.inputs[1:] \
            or any(graph.tensor(t).dtype != "float32" for t in (*reader.inputs, *reader.outputs)):
        return None
    return reader
