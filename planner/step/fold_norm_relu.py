"""A BatchNorm's Relu and its gradient folded into the normalisation's own loops (a CPU step
pass): one op, one pass over the image, forward and backward.

In a convolutional network nearly every BatchNorm is read by a Relu alone (ResNet-50: 33 of its
53), and every such Relu's gradient by the BatchNormGrad alone. Apart, each is a full pass over
an activation that the normalisation's loops had in cache a moment before (ResNet-50 at width
0.25, 64 px, batch 4 on a 2-core AVX-512 VM: 49 Relu 0.25 ms, 49 ReluGrad 0.39 ms a step, each a
parallel region of its own). The CPU runtime's BatchNorm loops write relu(y) instead
(kernels/batch_norm.cpp), and its BatchNormGrad loops normalise x again as the forward did
(the saved statistics, scale and the BatchNorm's bias) and take dy where that Relu's output r
would be positive, 0 elsewhere: ReluGrad's rule on the same bits of r, so the step computes
the same bits as with the two ops apart, without reading r (one image of three in each of
the gradient's two passes).

A LeakyRelu (DCGAN's discriminator: BatchNorm -> LeakyRelu(0.2)) folds the same way, as
`activation: leaky_relu` with its `alpha`: LeakyRelu's rule as y is written, LeakyReluGrad's
(dy where the normalised x is positive, dy * alpha elsewhere) in the gradient's passes. Its
gradient reads the LeakyRelu's input, y itself, so the forward folds only where every such
gradient folds too (nothing reads y after). Only a slope whose float32 value is a positive
normal number folds (fused_activation.foldable_slope: the one rule of both LeakyRelu folds,
which planner/verify/folds.py checks again).

`fold_norm_relus` rewrites, in a graph after autodiff (Relu below standing for LeakyRelu too,
ReluGrad for LeakyReluGrad):
  - BatchNorm (training, float32) -> Relu, where BatchNorm's y is read by that Relu alone (as
    its input; a LeakyRelu's gradients beside it, each folding below) and is no graph output:
    the BatchNorm takes `activation: relu` and writes the Relu's output under its name (in its
    own place in the node order); y and the Relu go;
  - ReluGrad(dy, r) -> BatchNormGrad (training, float32), where the ReluGrad's output is read by
    that BatchNormGrad alone (as its dy) and is no graph output, and r is the Relu's output of
    that BatchNorm's y (a LeakyReluGrad's x: that y) (the BatchNorm whose saved mean the
    gradient reads): the BatchNormGrad
    takes `activation: relu` and the BatchNorm's bias as its sixth input, in its own place;
    the ReluGrad and its output go.
Both need per-channel runs of at least two elements (an image, not BatchNorm1d's (N, C)): the
runtime's loops take those, and oneDNN's batch norm has no NaN-keeping Relu
(planner/ops/fused_activation.py). Mixed precision's low-type images are left apart, as the
convolutions' and GEMMs' folds leave them. The evaluation graph made from a folded step keeps
the BatchNorm's activation, in inference mode (planner/graph/evaluation.py).

A ReLU6's gradient (HardTanhGradA of the HardTanh's input and bounds) stays apart: folded the
same way, its NaN-aware mask evaluated in each of BatchNormGrad's three passes took
mobilenet_v2's step 0.63 ms more than the 0.55 ms its own pass took
(bench/results/2026-11-27-norm-folds.md).

Example:
    >>> from planner.graph.builder import GraphBuilder
    >>> from planner.frontend.autodiff import make_training_graph
    >>> from planner.graph.optimizer import Optimizer
    >>> from planner.zoo.layers import batch_norm, conv2d, head, relu
    >>> b = GraphBuilder("layer")
    >>> h = relu(b, batch_norm(b, conv2d(b, b.input("x", (2, 3, 4, 4)), 8, 3, pad=1, name="c"),
    ...                         name="bn"), name="r")
    >>> g = make_training_graph(b.build(head(b, b.op("Flatten", [h], {"axis": 1}), 2, True)),
    ...                         Optimizer(kind="sgd"))
    >>> folded = fold_norm_relus(g)
    >>> [(n.op, n.attrs.get("activation")) for n in folded.nodes
    ...  if n.op.startswith(("BatchNorm", "Relu"))]
    [('BatchNorm', 'relu'), ('BatchNormGrad', 'relu')]
"""

from __future__ import annotations

import math

from planner.graph.validate import check_graph
from planner.ir.graph import Graph, Node
from planner.ops.fused_activation import foldable_slope, folded_attrs


def fold_norm_relus(graph: Graph) -> Graph:
    """`graph` with each foldable BatchNorm -> Relu and ReluGrad -> BatchNormGrad pair (module
    docstring) as one op, checked; `graph` itself where there is none."""
    forward = {bn.name: relu for bn in graph.nodes
               if (relu := _relu_after(graph, bn)) is not None}
    backward = {bn_grad.name: relu_grad for relu_grad in graph.nodes
                if (bn_grad := _norm_grad_after(graph, relu_grad)) is not None}
    if not forward and not backward:
        return graph
    folded = {n.name for n in (*forward.values(), *backward.values())}
    gone = {n.inputs[0] for n in forward.values()} | {n.outputs[0] for n in backward.values()}
    nodes = []
    for n in graph.nodes:
        if n.name in folded:
            continue
        if n.name in forward:
            relu = forward[n.name]
            nodes.append(n.model_copy(update={
                "attrs": {**n.attrs, **folded_attrs(relu.op, relu.attrs)},
                "outputs": (relu.outputs[0], *n.outputs[1:])}))
        elif n.name in backward:
            relu_grad = backward[n.name]
            bias = graph.producer[n.inputs[3]].inputs[2]
            nodes.append(n.model_copy(update={
                "attrs": {**n.attrs, **folded_attrs(relu_grad.op, relu_grad.attrs)},
                "inputs": (relu_grad.inputs[0], *n.inputs[1:], bias)}))
        else:
            nodes.append(n)
    return check_graph(graph.model_copy(update={
        "nodes": tuple(nodes), "tensors": tuple(t for t in graph.tensors if t.name not in gone)}))


def _relu_after(graph: Graph, bn: Node) -> Node | None:
    """The Relu or LeakyRelu reading training BatchNorm `bn`'s y, when the pair folds: a Relu
    reading it alone; a LeakyRelu beside its gradients (LeakyReluGrad reads the LeakyRelu's
    input, y itself), each of which folds into this BatchNorm's gradient, so that nothing reads
    y once the folds are made."""
    y = bn.outputs[0] if bn.op == "BatchNorm" else None
    if y is None or not loops_take(graph, bn, bn.inputs[0]) or y in graph.outputs:
        return None
    readers = graph.consumers[y]
    acts = [r for r in readers if r.op in ("Relu", "LeakyRelu")]
    if len(acts) != 1 or acts[0].inputs != (y,) \
            or any(graph.tensor(t).dtype != "float32" for t in acts[0].outputs):
        return None
    (act,) = acts
    rest = [r for r in readers if r is not act]
    if act.op == "LeakyRelu" and not foldable_slope(folded_attrs(act.op, act.attrs)["alpha"]):
        return None
    if act.op == "Relu":
        return None if rest else act
    return act if all(r.op == "LeakyReluGrad" and _norm_grad_after(graph, r) is not None
                      for r in rest) else None


def _norm_grad_after(graph: Graph, relu_grad: Node) -> Node | None:
    """The training BatchNormGrad reading ReluGrad's or LeakyReluGrad `relu_grad`'s output
    alone (as its dy), when the pair folds."""
    if relu_grad.op not in ("ReluGrad", "LeakyReluGrad"):
        return None
    if relu_grad.op == "LeakyReluGrad" \
            and not foldable_slope(folded_attrs(relu_grad.op, relu_grad.attrs)["alpha"]):
        return None  # one rule for both folds: a positive normal float32 slope
    bn_grad = _sole_reader(graph, relu_grad.outputs[0], "BatchNormGrad")
    if bn_grad is None or not loops_take(graph, bn_grad, bn_grad.inputs[1]) \
            or any(graph.tensor(t).dtype != "float32" for t in relu_grad.inputs):
        return None
    # The mask is evaluated again from the BatchNorm's own y: r must be the Relu of that y, or
    # the LeakyReluGrad's x that y itself.
    bn = graph.producer.get(bn_grad.inputs[3])
    if bn is None or bn.op != "BatchNorm" or bn.outputs[3] != bn_grad.inputs[3] \
            or (bn.attrs.get("activation") or "none") != "none":
        return None
    if relu_grad.op == "LeakyReluGrad":
        return bn_grad if relu_grad.inputs[1] == bn.outputs[0] else None
    relu = graph.producer.get(relu_grad.inputs[1])
    return bn_grad if relu is not None and relu.op == "Relu" \
        and relu.inputs[0] == bn.outputs[0] else None


def loops_take(graph: Graph, norm: Node, image: str) -> bool:
    """Whether BatchNorm or BatchNormGrad `norm` over `image` takes a folded Relu: training,
    float32 throughout, no activation yet, runs of two or more elements per channel."""
    x = graph.tensor(image)
    return (norm.attrs.get("training", True)
            and (norm.attrs.get("activation") or "none") == "none"
            and len(x.shape) >= 3 and math.prod(x.shape[2:]) >= 2
            and all(graph.tensor(t).dtype == "float32" for t in (*norm.inputs, *norm.outputs)))


def _sole_reader(graph: Graph, tensor: str, op: str) -> Node | None:
    """The one `op` node reading `tensor`, as its first input alone, when nothing else reads it
    and it is no graph output."""
    readers = graph.consumers[tensor]
    if tensor in graph.outputs or len(readers) != 1:
        return None
    reader = readers[0]
    return reader if reader.op == op and reader.inputs[0] == tensor \
        and tensor not in reader.inputs[1:] else None
