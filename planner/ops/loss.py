"""Losses, each the mean over its elements as a scalar (shape ()), and their gradient ops.

    SoftmaxCrossEntropy [logits (N, C), labels (N,) int64]
        loss = mean_n (logsumexp(logits[n]) - logits[n, labels[n]])
        SoftmaxCrossEntropyGrad [dloss, logits, labels] -> dloss * (softmax(logits) - onehot) / N
    SigmoidBCE [logits, targets] (same shape, float; targets in [0, 1])
        loss = mean(max(z, 0) - z * t + log1p(exp(-|z|)))     (never overflows)
        SigmoidBCEGrad [dloss, logits, targets] -> dloss * (sigmoid(z) - t) / size
    MSE [pred, target]
        loss = mean((pred - target)^2)
        MSEGrad [dloss, pred, target] -> dloss * 2 * (pred - target) / size

The gradient with respect to a float target is cheap and exact, so it is given too
(SigmoidBCE: -dloss * z / size; MSE: -dpred); labels are integers and get none.

FLOPs per element, counting a transcendental function as one: SoftmaxCrossEntropy 5 per logit
(max, subtract, exp, sum, pick/mean) and its Grad 6; SigmoidBCE 6 and its Grad 6; MSE 3 and its
Grad 3.

Example:
    >>> import numpy as np
    >>> from planner.ops import get_op
    >>> logits, labels = np.zeros((2, 4)), np.array([0, 3])
    >>> float(get_op("SoftmaxCrossEntropy").reference([logits, labels], {})[0])  # log(4)
    1.3862943611198906
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from planner.ops.base import (
    Attrs,
    GradBuilder,
    OpDef,
    OpError,
    TensorType,
    elementwise_flops,
    register,
    require_float,
)

if TYPE_CHECKING:
    from planner.graph.ir import Node


def _check_dloss(op: str, dloss: TensorType, like: TensorType) -> None:
    if dloss.shape != () or dloss.dtype != like.dtype:
        raise OpError(f"{op}: dloss must be a {like.dtype} scalar (shape []), got "
                      f"{dloss.dtype} {list(dloss.shape)}")


def _mean(x: np.ndarray) -> np.ndarray:
    return np.asarray(np.mean(x, dtype=x.dtype))


# ---- SoftmaxCrossEntropy ----------------------------------------------------------------------

def _check_sce(op: str, logits: TensorType, labels: TensorType) -> None:
    require_float(op, logits, "logits")
    if logits.rank != 2:
        raise OpError(f"{op}: logits must have shape (N, C), got {list(logits.shape)}")
    if logits.shape[1] < 1:  # no class for any label (the kernels read z[0])
        raise OpError(f"{op}: logits must have at least one class, got {list(logits.shape)}")
    if labels.dtype != "int64":
        raise OpError(f"{op}: labels must be int64 class ids, got {labels.dtype}")
    if labels.shape != logits.shape[:1]:
        raise OpError(f"{op}: labels must have shape [{logits.shape[0]}] to match logits "
                      f"{list(logits.shape)}, got {list(labels.shape)}")


def _sce_infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    _check_sce("SoftmaxCrossEntropy", *ins)
    return [TensorType((), ins[0].dtype)]


def _checked_labels(op: str, labels: np.ndarray, classes: int) -> np.ndarray:
    bad = (labels < 0) | (labels >= classes)
    if bad.any():
        raise OpError(f"{op}: label {int(labels[bad][0])} out of range [0, {classes})")
    return labels


def _shifted(logits: np.ndarray) -> np.ndarray:
    return logits - np.max(logits, axis=1, keepdims=True)


def _sce_reference(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    logits, labels = xs
    labels = _checked_labels("SoftmaxCrossEntropy", labels, logits.shape[1])
    z = _shifted(logits)
    per_row = np.log(np.sum(np.exp(z), axis=1)) - z[np.arange(len(z)), labels]
    return [_mean(per_row)]


def _sce_grad_infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    dloss, logits, labels = ins
    _check_sce("SoftmaxCrossEntropyGrad", logits, labels)
    _check_dloss("SoftmaxCrossEntropyGrad", dloss, logits)
    return [logits]


def _sce_grad_reference(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    dloss, logits, labels = xs
    labels = _checked_labels("SoftmaxCrossEntropyGrad", labels, logits.shape[1])
    e = np.exp(_shifted(logits))
    p = e / np.sum(e, axis=1, keepdims=True)
    p[np.arange(len(p)), labels] -= 1
    return [p * (dloss / np.asarray(len(p), dtype=logits.dtype))]


def _sce_grad(g: GradBuilder, node: Node, grads: list[str | None]) -> list[str | None]:
    logits, labels = node.inputs
    dloss = grads[0]
    if dloss is None or not g.needs(logits):
        return [None, None]
    return [g.emit("SoftmaxCrossEntropyGrad", [dloss, logits, labels])[0], None]


def _pair_partials(ins: list[TensorType], outs: list[TensorType], a: Attrs) -> int:
    """The CUDA kernel's per-block partial sums (doubles): one per block of at least 32
    threads, at most 1024 (templates/cuda/runtime/kernels/loss.cu)."""
    return 8 * max(1, min(-(-ins[0].size // 32), 1024))


register(OpDef(
    name="SoftmaxCrossEntropy",
    # the CUDA kernel's per-row loss terms, summed in a fixed order (doubles)
    gpu_scratch=lambda ins, outs, a: 8 * ins[0].shape[0],
    cost_class="scatter", arity=2,
    infer=_sce_infer,
    flops=lambda ins, outs, a: 5 * ins[0].size,
    reference=_sce_reference,
    gradient=_sce_grad,
    nondiff_inputs=(1,),
    doc="Mean softmax cross-entropy of logits (N, C) against int64 labels (N,).",
))

register(OpDef(
    name="SoftmaxCrossEntropyGrad",
    cost_class="scatter", arity=3,
    infer=_sce_grad_infer,
    flops=lambda ins, outs, a: 6 * ins[1].size,
    reference=_sce_grad_reference,
    doc="dlogits = dloss * (softmax(logits) - onehot(labels)) / N.",
))


# ---- SigmoidBCE and MSE: a prediction and a float target of one shape -------------------------

def _check_pair(op: str, x: TensorType, t: TensorType, names: tuple[str, str]) -> None:
    require_float(op, x, names[0])
    if x != t:
        raise OpError(f"{op}: {names[1]} is {t.dtype} {list(t.shape)} but {names[0]} is "
                      f"{x.dtype} {list(x.shape)}; they must match")


def _pair_loss_infer(op: str, names: tuple[str, str]):
    def infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
        _check_pair(op, ins[0], ins[1], names)
        return [TensorType((), ins[0].dtype)]

    return infer


def _pair_grad_infer(op: str, names: tuple[str, str]):
    def infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
        dloss, x, t = ins
        _check_pair(op, x, t, names)
        _check_dloss(op, dloss, x)
        return [x]

    return infer


def _per_element(dloss: np.ndarray, x: np.ndarray) -> np.ndarray:
    """dloss / size in x's dtype: the weight of one element in the mean."""
    return dloss / np.asarray(max(x.size, 1), dtype=x.dtype)


def _bce_reference(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    z, t = xs
    return [_mean(np.maximum(z, 0) - z * t + np.log1p(np.exp(-np.abs(z))))]


def _bce_grad_reference(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    dloss, z, t = xs
    e = np.exp(-np.abs(z))
    sigmoid = np.where(z >= 0, 1 / (1 + e), e / (1 + e))
    return [(sigmoid - t) * _per_element(dloss, z)]


def _bce_grad(g: GradBuilder, node: Node, grads: list[str | None]) -> list[str | None]:
    z, t = node.inputs
    dloss = grads[0]
    if dloss is None:
        return [None, None]
    dz = g.emit("SigmoidBCEGrad", [dloss, z, t])[0] if g.needs(z) else None
    dt = None
    if g.needs(t):
        size = max(g.type(z).size, 1)
        dt = g.emit("Scale", [g.emit("Mul", [z, dloss])[0]], {"factor": -1.0 / size})[0]
    return [dz, dt]


def _mse_reference(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    d = xs[0] - xs[1]
    return [_mean(d * d)]


def _mse_grad_reference(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    dloss, pred, target = xs
    return [(pred - target) * (2 * _per_element(dloss, pred))]


def _mse_grad(g: GradBuilder, node: Node, grads: list[str | None]) -> list[str | None]:
    pred, target = node.inputs
    dloss = grads[0]
    if dloss is None or not (g.needs(pred) or g.needs(target)):
        return [None, None]
    dpred = g.emit("MSEGrad", [dloss, pred, target])[0]
    dtarget = g.emit("Neg", [dpred])[0] if g.needs(target) else None
    return [dpred if g.needs(pred) else None, dtarget]


_BCE = ("logits", "targets")
_MSE = ("pred", "target")

register(OpDef(
    name="SigmoidBCE",
    gpu_scratch=_pair_partials,
    cost_class="scatter", arity=2,
    infer=_pair_loss_infer("SigmoidBCE", _BCE),
    flops=lambda ins, outs, a: 6 * ins[0].size,
    reference=_bce_reference,
    gradient=_bce_grad,
    doc="Mean binary cross-entropy of sigmoid(logits) against float targets.",
))

register(OpDef(
    name="SigmoidBCEGrad",
    cost_class="scatter", arity=3,
    infer=_pair_grad_infer("SigmoidBCEGrad", _BCE),
    flops=elementwise_flops(6),
    reference=_bce_grad_reference,
    doc="dlogits = dloss * (sigmoid(logits) - targets) / size.",
))

register(OpDef(
    name="MSE",
    gpu_scratch=_pair_partials,
    cost_class="scatter", arity=2,
    infer=_pair_loss_infer("MSE", _MSE),
    flops=lambda ins, outs, a: 3 * ins[0].size,
    reference=_mse_reference,
    gradient=_mse_grad,
    doc="Mean squared difference of pred and target.",
))

register(OpDef(
    name="MSEGrad",
    cost_class="scatter", arity=3,
    infer=_pair_grad_infer("MSEGrad", _MSE),
    flops=elementwise_flops(3),
    reference=_mse_grad_reference,
    doc="dpred = dloss * 2 * (pred - target) / size.",
))
