"""Losses, each the mean over its elements as a scalar (shape ()), and their gradient ops.

    SoftmaxCrossEntropy [logits (N, C, d1, ...), labels (N, d1, ...) int64]
        as PyTorch's F.cross_entropy(logits, labels, ignore_index=, label_smoothing=eps):
        classes on `axis` (default 1), per position n
            l_n = (1 - eps) (logsumexp(z_n) - z_n[labels_n]) + eps mean_c (logsumexp(z_n) - z_n[c])
        loss = sum of l_n over the positions whose label is not ignore_index (default -100),
        divided by their count (NaN when every label is ignored)
        SoftmaxCrossEntropyGrad [dloss, logits, labels] (same attrs)
            -> dloss * (softmax(z_n) - (1 - eps) onehot(labels_n) - eps / C) / count, 0 where
               ignored
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
    >>> sce, logits, labels = get_op("SoftmaxCrossEntropy"), np.zeros((2, 4)), np.array([0, 3])
    >>> float(sce.reference([logits, labels], sce.normalize_attrs({}))[0])  # log(4)
    1.3862943611198906
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from planner.ops.base import (
    Attr,
    Attrs,
    GradBuilder,
    OpDef,
    OpError,
    TensorType,
    elementwise_flops,
    norm_axis,
    register,
    require_float,
)

if TYPE_CHECKING:
    from planner.ir.graph import Node

# Ops whose scalar output is a training loss (a mean over the batch): what autodiff finds a
# graph's loss by and an importer marks a traced loss by.
LOSS_OPS: frozenset[str] = frozenset({"SoftmaxCrossEntropy", "SigmoidBCE", "MSE", "NLLLoss"})


def _check_dloss(op: str, dloss: TensorType, like: TensorType) -> None:
    if dloss.shape != () or dloss.dtype != like.dtype:
        raise OpError(f"{op}: dloss must be a {like.dtype} scalar (shape []), got "
                      f"{dloss.dtype} {list(dloss.shape)}")


def _mean(x: np.ndarray) -> np.ndarray:
    return np.asarray(np.mean(x, dtype=x.dtype))


# ---- SoftmaxCrossEntropy ----------------------------------------------------------------------

def _check_sce(op: str, logits: TensorType, labels: TensorType, a: Attrs) -> int:
    """The class axis of logits, normalised; OpError when the labels do not fit."""
    require_float(op, logits, "logits")
    if logits.rank < 2:
        raise OpError(f"{op}: logits must have shape (N, C) or (N, C, d1, ...), got "
                      f"{list(logits.shape)}")
    axis = norm_axis(op, a["axis"], logits.rank)
    if logits.shape[axis] < 1:  # no class for any label (the kernels read z[0])
        raise OpError(f"{op}: logits must have at least one class on axis {axis}, got "
                      f"{list(logits.shape)}")
    if labels.dtype != "int64":
        raise OpError(f"{op}: labels must be int64 class ids, got {labels.dtype}")
    want = logits.shape[:axis] + logits.shape[axis + 1:]
    if labels.shape != want:
        raise OpError(f"{op}: labels must have shape {list(want)} to match logits "
                      f"{list(logits.shape)} with classes on axis {axis}, got "
                      f"{list(labels.shape)}")
    if not 0.0 <= a["label_smoothing"] <= 1.0:
        raise OpError(f"{op}: label_smoothing must be in [0, 1], got {a['label_smoothing']}")
    return axis


def _sce_infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    _check_sce("SoftmaxCrossEntropy", *ins, a)
    return [TensorType((), ins[0].dtype)]


def _rows(op: str, logits: np.ndarray, labels: np.ndarray, a: Attrs
          ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(log-probabilities with classes last, labels with ignored ones as 0, the mask of
    counted labels, their count in logits' dtype); OpError on a label out of range."""
    z = np.moveaxis(logits, a["axis"], -1)
    classes = z.shape[-1]
    counted = labels != a["ignore_index"]
    bad = counted & ((labels < 0) | (labels >= classes))
    if bad.any():
        raise OpError(f"{op}: label {int(labels[bad][0])} out of range [0, {classes}) "
                      f"(ignore_index {a['ignore_index']})")
    z = z - np.max(z, axis=-1, keepdims=True)
    logp = z - np.log(np.sum(np.exp(z), axis=-1, keepdims=True))
    return logp, np.where(counted, labels, 0), counted, np.asarray(counted.sum(),
                                                                      dtype=logits.dtype)


def _per_count(x: np.ndarray, count: np.ndarray) -> np.ndarray:
    """x / count; the mean of no labels (all ignored) is NaN, as in PyTorch."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return x / count


def _sce_reference(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    logits, labels = xs
    logp, ids, counted, count = _rows("SoftmaxCrossEntropy", logits, labels, a)
    eps = a["label_smoothing"]
    nll = -np.take_along_axis(logp, ids[..., None], axis=-1)[..., 0]
    per = (1 - eps) * nll - eps * np.mean(logp, axis=-1) if eps else nll
    total = np.sum(np.where(counted, per, 0), dtype=logits.dtype)
    return [np.asarray(_per_count(total, count), dtype=logits.dtype)]


def _sce_grad_infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    dloss, logits, labels = ins
    _check_sce("SoftmaxCrossEntropyGrad", logits, labels, a)
    _check_dloss("SoftmaxCrossEntropyGrad", dloss, logits)
    return [logits]


def _sce_grad_reference(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    dloss, logits, labels = xs
    logp, ids, counted, count = _rows("SoftmaxCrossEntropyGrad", logits, labels, a)
    eps = a["label_smoothing"]
    d = np.exp(logp) - eps / logp.shape[-1]
    np.put_along_axis(d, ids[..., None],
                      np.take_along_axis(d, ids[..., None], axis=-1) - (1 - eps), axis=-1)
    d = np.where(counted[..., None], d, 0) * _per_count(dloss, count)
    return [np.moveaxis(d.astype(logits.dtype), -1, a["axis"])]


def _sce_grad(g: GradBuilder, node: Node, grads: list[str | None]) -> list[str | None]:
    logits, labels = node.inputs
    dloss = grads[0]
    if dloss is None or not g.needs(logits):
        return [None, None]
    return [g.emit("SoftmaxCrossEntropyGrad", [dloss, logits, labels], dict(node.attrs))[0],
            None]


def _pair_partials(ins: list[TensorType], outs: list[TensorType], a: Attrs) -> int:
    """The CUDA kernel's per-block partial sums (doubles): one per block of at least 32
    threads, at most 1024 (templates/cuda/runtime/kernels/loss.cu)."""
    return 8 * max(1, min(-(-ins[0].size // 32), 1024))


_SCE_ATTRS = {"axis": Attr("int", 1), "ignore_index": Attr("int", -100),
              "label_smoothing": Attr("float", 0.0)}

register(OpDef(
    name="SoftmaxCrossEntropy",
    # the CUDA kernel's count of labels not ignored and per-row loss terms, summed in a fixed
    # order (doubles; templates/cuda/runtime/kernels/loss.cu)
    gpu_scratch=lambda ins, outs, a: 8 * (1 + ins[0].size // max(1, ins[0].shape[a["axis"]])),
    cost_class="scatter", arity=2, attrs=_SCE_ATTRS,
    infer=_sce_infer,
    flops=lambda ins, outs, a: 5 * ins[0].size,
    reference=_sce_reference,
    gradient=_sce_grad,
    nondiff_inputs=(1,),
    doc="Mean softmax cross-entropy of logits (classes on `axis`) against int64 labels, as "
        "F.cross_entropy: labels equal to ignore_index skipped, label_smoothing.",
))

register(OpDef(
    name="SoftmaxCrossEntropyGrad",
    gpu_scratch=lambda ins, outs, a: 8,  # the CUDA kernel's count of labels not ignored
    cost_class="scatter", arity=3, attrs=_SCE_ATTRS,
    infer=_sce_grad_infer,
    flops=lambda ins, outs, a: 6 * ins[1].size,
    reference=_sce_grad_reference,
    doc="dlogits = dloss * (softmax(logits) - (1 - eps) onehot(labels) - eps / C) / count, "
        "0 on ignored labels.",
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
