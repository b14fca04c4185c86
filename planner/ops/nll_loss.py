"""NLLLoss: the negative log-likelihood of class ids under log-probabilities, with every option
of PyTorch's F.nll_loss and F.cross_entropy's class-index form (which is NLLLoss of a
LogSoftmax: planner/importers/torch/rules_losses.py), and its gradient op.

    NLLLoss [x (N, C, d1, ...), labels (N, d1, ...) int64 (, weight (C,))]
        classes on `axis` (default 1); at each position n with label y (w = weight, or ones)
            l_n = -(1 - eps) w[y] x[n, y] - (eps / C) sum_c w[c] x[n, c]
        and l_n = 0 where y == ignore_index. reduction:
            "none"  the (N, d1, ...) tensor of l_n
            "sum"   sum_n l_n
            "mean"  sum_n l_n / sum_n w[y_n] over the positions not ignored (NaN when none)
        which is torch's nll_loss (eps = 0) and cross_entropy's label smoothing on log_softmax
        with class weights (torch normalises the smoothing term by the same weight sum).
    NLLLossGrad [dloss, x, labels (, weight)] (same attrs; dloss shaped as the loss)
        dx[n, k] = -g_n ((1 - eps) w[y] [k == y] + (eps / C) w[k]), 0 where ignored, with
        g_n = dloss[n] (none), dloss (sum) or dloss / sum_n w[y_n] (mean).

A label outside [0, C) that is not ignore_index is refused at step time (StepError on the CPU,
OpError here; the GPU poisons the loss with NaN, as SoftmaxCrossEntropy). The weight is a
constant of the loss (torch's is a buffer or a literal): it gets no gradient.

FLOPs: 2 per logit (the smoothing's weighted sum; 0 per logit without smoothing, counted as 2
for a simple bound) for either op.

Example:
    >>> import numpy as np
    >>> from planner.ops import get_op
    >>> nll = get_op("NLLLoss")
    >>> x, y = np.log(np.array([[0.5, 0.5], [0.25, 0.75]])), np.array([0, 1])
    >>> a = nll.normalize_attrs({"reduction": "none"})
    >>> np.round(nll.reference([x, y], a)[0], 4).tolist()
    [0.6931, 0.2877]
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
    norm_axis,
    register,
    require_float,
)

if TYPE_CHECKING:
    from planner.ir.graph import Node

REDUCTIONS = ("none", "mean", "sum")


def _check(op: str, ins: list[TensorType], a: Attrs) -> TensorType:
    """The loss's type; OpError naming the operand that does not fit."""
    x, labels = ins[0], ins[1]
    require_float(op, x, "input")
    if x.rank < 2:
        raise OpError(f"{op}: input must have shape (N, C) or (N, C, d1, ...), got "
                      f"{list(x.shape)}")
    axis = norm_axis(op, a["axis"], x.rank)
    if labels.dtype != "int64":
        raise OpError(f"{op}: labels must be int64 class ids, got {labels.dtype}")
    want = x.shape[:axis] + x.shape[axis + 1:]
    if labels.shape != want:
        raise OpError(f"{op}: labels must have shape {list(want)} to match input "
                      f"{list(x.shape)} with classes on axis {axis}, got {list(labels.shape)}")
    if len(ins) > 2 and (ins[2].dtype != x.dtype or ins[2].shape != (x.shape[axis],)):
        raise OpError(f"{op}: weight must be {x.dtype} [{x.shape[axis]}] (one per class), got "
                      f"{ins[2].dtype} {list(ins[2].shape)}")
    if a["reduction"] not in REDUCTIONS:
        raise OpError(f"{op}: reduction must be one of {list(REDUCTIONS)}, got "
                      f"{a['reduction']!r}")
    if not 0.0 <= a["label_smoothing"] <= 1.0:
        raise OpError(f"{op}: label_smoothing must be in [0, 1], got {a['label_smoothing']}")
    return TensorType(want if a["reduction"] == "none" else (), x.dtype)


def _infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    if len(ins) not in (2, 3):
        raise OpError(f"NLLLoss takes [input, labels] or [input, labels, weight], got "
                      f"{len(ins)} inputs")
    return [_check("NLLLoss", ins, a)]


def _grad_infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    if len(ins) not in (3, 4):
        raise OpError(f"NLLLossGrad takes [dloss, input, labels(, weight)], got {len(ins)} "
                      f"inputs")
    loss = _check("NLLLossGrad", ins[1:], a)
    if ins[0] != loss:
        raise OpError(f"NLLLossGrad: dloss must be {loss.dtype} {list(loss.shape)} (the "
                      f"loss's type), got {ins[0].dtype} {list(ins[0].shape)}")
    return [ins[1]]


def _positions(op: str, xs: list[np.ndarray], a: Attrs
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(x with classes last, the class weights, ids with ignored ones as 0, w[y] with 0 where
    ignored, the mask of counted positions); OpError on a label out of range."""
    x = np.moveaxis(xs[0], a["axis"], -1)
    labels, classes = xs[1], x.shape[-1]
    w = xs[2] if len(xs) > 2 else np.ones(classes, dtype=x.dtype)
    counted = labels != a["ignore_index"]
    bad = counted & ((labels < 0) | (labels >= classes))
    if bad.any():
        raise OpError(f"{op}: label {int(labels[bad][0])} out of range [0, {classes}) "
                      f"(ignore_index {a['ignore_index']})")
    ids = np.where(counted, labels, 0)
    return x, w, ids, np.where(counted, w[ids], 0).astype(x.dtype), counted


def _denominator(wy: np.ndarray) -> np.ndarray:
    return np.asarray(np.sum(wy, dtype=wy.dtype))


def _divide(x: np.ndarray, d: np.ndarray) -> np.ndarray:
    """x / d; the mean over no position (every label ignored) is NaN, as in PyTorch."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return x / d


def _reference(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    x, w, ids, wy, counted = _positions("NLLLoss", xs, a)
    eps = a["label_smoothing"]
    picked = np.take_along_axis(x, ids[..., None], axis=-1)[..., 0]
    per = -(1 - eps) * wy * picked
    if eps:
        per = per - np.sum(x * w, axis=-1) * (eps / x.shape[-1])
    # An ignored position is 0 whatever its values (inf or NaN included), as in torch.
    per = np.where(counted, per, 0).astype(x.dtype)
    if a["reduction"] == "none":
        return [per]
    total = np.asarray(np.sum(per, dtype=x.dtype))
    if a["reduction"] == "sum":
        return [total]
    return [np.asarray(_divide(total, _denominator(wy)), dtype=x.dtype)]


def _grad_reference(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    dloss = xs[0]
    x, w, ids, wy, counted = _positions("NLLLossGrad", xs[1:], a)
    eps = a["label_smoothing"]
    g = _divide(dloss, _denominator(wy)) if a["reduction"] == "mean" else dloss
    g = np.where(counted, np.broadcast_to(g, counted.shape), 0).astype(x.dtype)
    d = np.broadcast_to(-(eps / x.shape[-1]) * w, x.shape).copy()
    np.put_along_axis(d, ids[..., None],
                      np.take_along_axis(d, ids[..., None], axis=-1)
                      - (1 - eps) * wy[..., None], axis=-1)
    d = np.where(counted[..., None], d * g[..., None], 0)
    return [np.moveaxis(d.astype(x.dtype), -1, a["axis"])]


def _gradient(g: GradBuilder, node: Node, grads: list[str | None]) -> list[str | None]:
    dloss, x = grads[0], node.inputs[0]
    if dloss is None or not g.needs(x):
        return [None] * len(node.inputs)
    dx = g.emit("NLLLossGrad", [dloss, *node.inputs], dict(node.attrs))[0]
    return [dx, *[None] * (len(node.inputs) - 1)]


def _scratch_of(op: str):
    """The CUDA kernels' scratch (doubles; templates/cuda/runtime/kernels/nll_loss.cu): the
    forward's per-position terms and weights, the gradient's weight sum."""
    def scratch(ins: list[TensorType], outs: list[TensorType], a: Attrs) -> int:
        if op == "NLLLossGrad":
            return 8
        x = ins[0]
        return 16 * (x.size // max(1, x.shape[norm_axis(op, a["axis"], x.rank)]))
    return scratch


ATTRS = {"axis": Attr("int", 1), "ignore_index": Attr("int", -100),
         "label_smoothing": Attr("float", 0.0), "reduction": Attr("str", "mean")}

register(OpDef(
    name="NLLLoss",
    cost_class="scatter", arity=None, min_inputs=2, attrs=ATTRS,
    infer=_infer,
    flops=lambda ins, outs, a: 2 * ins[0].size,
    reference=_reference,
    gradient=_gradient,
    nondiff_inputs=(1, 2),
    gpu_scratch=_scratch_of("NLLLoss"),
    doc="Negative log-likelihood of int64 labels under log-probabilities (classes on `axis`), "
        "as F.nll_loss: class weights, ignore_index, label_smoothing, reduction "
        "none/sum/mean.",
))

register(OpDef(
    name="NLLLossGrad",
    cost_class="scatter", arity=None, min_inputs=3, attrs=ATTRS,
    infer=_grad_infer,
    flops=lambda ins, outs, a: 2 * ins[1].size,
    reference=_grad_reference,
    gpu_scratch=_scratch_of("NLLLossGrad"),
    doc="dx = -g ((1 - eps) w[y] onehot(y) + eps / C w), g the loss's weight of each "
        "position; 0 where ignored.",
))
