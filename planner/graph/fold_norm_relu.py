"""A BatchNorm's Relu and the gradient of its activation folded into the normalisation's own
loops (a CPU step pass): one op, one pass over the image less, forward and backward.

In a convolutional network nearly every BatchNorm is read by an activation alone (ResNet-50:
33 of its 53 by a Relu; mobilenet_v2: 35 of 52 by a ReLU6, torch's hardtanh), and that
activation's gradient by the BatchNormGrad alone. Apart, each is a full pass over an image the
normalisation's loops had in cache a moment before (ResNet-50 at width 0.25, 64 px, batch 4 on
a 2-core AVX-512 VM: 49 Relu 0.25 ms, 49 ReluGrad 0.39 ms a step, each a parallel region of its
own). The CPU runtime's BatchNorm loops write relu(y) instead (kernels/batch_norm.cpp), and its
BatchNormGrad loops apply the activation's gradient rule to dy as they read it, from the same
inputs (planner/ops/norm.py NORM_GRAD_FOLDS), so the step computes the same bits as with the
ops apart.

`fold_norm_relus` rewrites, in a graph after autodiff:
  - BatchNorm (training, float32) -> Relu, where BatchNorm's y is read by that Relu alone (as
    its input) and is no graph output: the BatchNorm takes `activation: relu` and writes the
    Relu's output under its name (in its own place in the node order); y and the Relu go;
  - ReluGrad(dy, r) or HardTanhGradA(dy, x, lo, hi) -> BatchNormGrad (training, float32), where
    the gradient's output is read by that BatchNormGrad alone (as its dy) and is no graph
    output, x an image of BatchNormGrad's shape, lo and hi scalars: the BatchNormGrad takes
    `activation: relu` (or `hardtanh`) and the gradient op's inputs after dy as its last ones, in
    its own place; the gradient op and its output go.
A HardTanh itself stays apart: its gradient reads its input, which a folded BatchNorm would no
longer write. Both folds need per-channel runs of at least two elements (an image, not
BatchNorm1d's (N, C)): the runtime's loops take those, and oneDNN's batch norm has no
NaN-keeping Relu (planner/ops/fused_activation.py). Mixed precision's low-type images are left
apart, as the convolutions' and GEMMs' folds leave them. The evaluation graph made from a folded
step keeps the BatchNorm's activation, in inference mode (planner/graph/evaluation.py).

Example:
    >>> from planner.graph.builder import GraphBuilder
    >>> from planner.graph.autodiff import make_training_graph
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
from planner.ops.norm import NORM_GRAD_FOLDS


def fold_norm_relus(graph: Graph) -> Graph:
    """`graph` with each foldable BatchNorm -> Relu and ReluGrad -> BatchNormGrad pair (module
    docstring) as one op, checked; `graph` itself where there is none."""
    forward = {bn.name: relu for bn in graph.nodes
               if (relu := _relu_after(graph, bn)) is not None}
    backward = {bn_grad.name: act_grad for act_grad in graph.nodes
                if (bn_grad := _norm_grad_after(graph, act_grad)) is not None}
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
                "attrs": {**n.attrs, "activation": "relu"},
                "outputs": (relu.outputs[0], *n.outputs[1:])}))
        elif n.name in backward:
            act_grad = backward[n.name]
            dy, *extra = act_grad.inputs
            nodes.append(n.model_copy(update={
                "attrs": {**n.attrs, "activation": GRAD_ACTIVATIONS[act_grad.op]},
                "inputs": (dy, *n.inputs[1:], *extra)}))
        else:
            nodes.append(n)
    return check_graph(graph.model_copy(update={
        "nodes": tuple(nodes), "tensors": tuple(t for t in graph.tensors if t.name not in gone)}))


def _relu_after(graph: Graph, bn: Node) -> Node | None:
    """The Relu reading training BatchNorm `bn`'s y alone, when the pair folds."""
    if bn.op != "BatchNorm" or not _foldable(graph, bn, bn.inputs[0]):
        return None
    return _sole_reader(graph, bn.outputs[0], "Relu")


# The gradient op of each activation BatchNormGrad takes folded (planner/ops/norm.py).
GRAD_ACTIVATIONS = {op: act for act, (op, _) in NORM_GRAD_FOLDS.items()}


def _norm_grad_after(graph: Graph, act_grad: Node) -> Node | None:
    """The training BatchNormGrad reading activation gradient `act_grad`'s output alone (as its
    dy), when the pair folds: float32 throughout, a HardTanh's bounds scalars."""
    if act_grad.op not in GRAD_ACTIVATIONS:
        return None
    bn_grad = _sole_reader(graph, act_grad.outputs[0], "BatchNormGrad")
    image = graph.tensor(act_grad.inputs[1])
    if bn_grad is None or not _foldable(graph, bn_grad, bn_grad.inputs[1]) \
            or image.shape != graph.tensor(bn_grad.inputs[1]).shape \
            or any(graph.tensor(t).dtype != "float32" for t in act_grad.inputs) \
            or any(graph.tensor(t).shape != () for t in act_grad.inputs[2:]):
        return None
    return bn_grad


def _foldable(graph: Graph, norm: Node, image: str) -> bool:
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
