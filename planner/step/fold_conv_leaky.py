"""A convolution's LeakyRelu folded into it as oneDNN's post-op (a CPU step pass): no pass over
the layer's output, and one tensor fewer kept for the backward.

A GAN's discriminator opens with Conv2D -> LeakyRelu(0.2) and no BatchNorm between them
(DCGAN's: a 64-channel 32x32 map per image, both halves of the batch): apart, the LeakyRelu is
a full pass over the largest activation of the network, and its gradient reads the
convolution's output, kept through the forward for it alone. The CPU runtime's Conv2D applies
a folded `activation: leaky_relu` with its `alpha` as oneDNN's eltwise post-op, on the sum
plus bias as it is written (templates/cpu/runtime/kernels/conv.cpp), with the LeakyRelu
kernel's own rule (v > 0 ? v : v * alpha): the same bits.

The gradient stays LeakyReluGrad's, reading the LeakyRelu's output y instead of its input x:
with a positive slope y > 0 exactly where x > 0 (a NaN stays NaN, -0 and an underflowed
product stay <= 0), so the mask, and every bit, is the same. A slope of 0 or below, or one
whose float32 value is not a positive normal number, is left apart (the mask would flip, and
oneDNN's post-op takes a slope of 0 as max(v, 0), which loses a NaN, and flushes a subnormal
to 0; fused_activation.foldable_slope, the rule planner/verify/folds.py checks again).

`fold_conv_leakies` rewrites, in a graph after autodiff, every float32 Conv2D without an
activation whose output x is no graph output and is read by one LeakyRelu of positive slope
(as its input) and otherwise only by LeakyReluGrads of the same slope as their x: the Conv2D
takes `activation: leaky_relu` and `alpha` and writes the LeakyRelu's output y under its name
(in its own place in the node order); each LeakyReluGrad reads y for x; x and the LeakyRelu go.
The evaluation graph made from a folded step keeps the Conv2D's activation
(planner/graph/evaluation.py). GPU steps leave it apart: cuDNN's convolution has no such
epilogue in the CUDA runtime (its Conv2D refuses one).

Example:
    >>> from planner.graph.builder import GraphBuilder
    >>> from planner.frontend.autodiff import make_training_graph
    >>> from planner.graph.optimizer import Optimizer
    >>> from planner.zoo.layers import conv2d, head
    >>> b = GraphBuilder("layer")
    >>> h = b.op("LeakyRelu", [conv2d(b, b.input("x", (2, 3, 4, 4)), 8, 3, pad=1, name="c")],
    ...          {"alpha": 0.2}, name="lrelu")
    >>> g = make_training_graph(b.build(head(b, b.op("Flatten", [h], {"axis": 1}), 2, True)),
    ...                         Optimizer(kind="sgd"))
    >>> folded = fold_conv_leakies(g)
    >>> [(n.op, n.attrs.get("activation"), n.inputs[1:]) for n in folded.nodes
    ...  if n.op in ("Conv2D", "LeakyRelu", "LeakyReluGrad")]
    [('Conv2D', 'leaky_relu', ('c/weight',)), ('LeakyReluGrad', None, ('lrelu',))]
"""

from __future__ import annotations

from planner.graph.validate import check_graph
from planner.ir.graph import Graph, Node
from planner.ops.fused_activation import foldable_slope, folded_attrs


def fold_conv_leakies(graph: Graph) -> Graph:
    """`graph` with each foldable Conv2D -> LeakyRelu pair (module docstring) as one op,
    checked; `graph` itself where there is none."""
    leaky_after = {conv.name: act for conv in graph.nodes
                   if (act := _leaky_after(graph, conv)) is not None}
    if not leaky_after:
        return graph
    gone = {act.name for act in leaky_after.values()}
    # pre-activation tensor -> the LeakyRelu's output its gradients read instead
    read_for = {act.inputs[0]: act.outputs[0] for act in leaky_after.values()}
    nodes = []
    for n in graph.nodes:
        if n.name in gone:
            continue
        if n.name in leaky_after:
            act = leaky_after[n.name]
            n = n.model_copy(update={
                "attrs": {**n.attrs, **folded_attrs(act.op, act.attrs)},
                "outputs": act.outputs})
        elif n.op == "LeakyReluGrad" and n.inputs[1] in read_for:
            n = n.model_copy(update={"inputs": (n.inputs[0], read_for[n.inputs[1]])})
        nodes.append(n)
    return check_graph(graph.model_copy(update={
        "nodes": tuple(nodes),
        "tensors": tuple(t for t in graph.tensors if t.name not in read_for)}))


def _slope(node: Node) -> float:
    return folded_attrs(node.op, node.attrs)["alpha"]


def _leaky_after(graph: Graph, conv: Node) -> Node | None:
    """The LeakyRelu reading float32 Conv2D `conv`'s output, when the pair folds (module
    docstring)."""
    if conv.op != "Conv2D" or (conv.attrs.get("activation") or "none") != "none":
        return None
    x = conv.outputs[0]
    if x in graph.outputs or any(graph.tensor(t).dtype != "float32"
                                 for t in (*conv.inputs, *conv.outputs)):
        return None
    readers = graph.consumers[x]
    acts = [r for r in readers if r.op == "LeakyRelu"]
    if len(acts) != 1 or acts[0].inputs != (x,) or not foldable_slope(_slope(acts[0])):
        return None
    (act,) = acts
    if graph.tensor(act.outputs[0]).dtype != "float32":
        return None
    grads_fold = all(r.op == "LeakyReluGrad" and r.inputs[1] == x and r.inputs[0] != x
                     and _slope(r) == _slope(act) for r in readers if r is not act)
    return act if grads_fold else None
