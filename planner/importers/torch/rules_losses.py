"""PyTorch's losses (torch.nn.functional) as planner ops: one family, one table.

Every loss takes torch's `reduction` (0 none, 1 mean, 2 sum: at::Reduction) the same way: the
per-element loss, then nothing, a ReduceMean or a ReduceSum over every axis. A loss with
reduction='none' is an ordinary tensor: the user's own arithmetic after it (a focal loss's
(1 - p)^gamma weighting, a mask, `.mean()`) makes the scalar that convert.py marks as the
graph's loss, and autodiff differentiates through both.

| ATen op                                | planner ops                                          |
| -------------------------------------- | ---------------------------------------------------- |
| cross_entropy_loss, class ids, mean,   | SoftmaxCrossEntropy (one fused op, as before)        |
|   no weight                            |                                                      |
| cross_entropy_loss, class ids, other   | LogSoftmax over the classes, NLLLoss (weight,        |
|                                        | ignore_index, label_smoothing, reduction)            |
| cross_entropy_loss, probabilities      | -sum_c w_c t'_c log_softmax(z)_c, t' = (1 - eps) t + |
|                                        | eps / C; mean over positions (as torch)              |
| nll_loss_nd                            | NLLLoss                                              |
| binary_cross_entropy_with_logits       | SigmoidBCE when plain; else (1 - t) z + lw           |
|                                        | softplus(-z), lw = 1 + (pos_weight - 1) t, times the |
|                                        | weight                                               |
| binary_cross_entropy                   | -w (t max(log p, -100) + (1 - t) max(log(1-p), -100))|
| mse_loss                               | MSE when mean; else (p - t)^2                        |
| l1_loss                                | |p - t|                                              |
| huber_loss (delta)                     | 0.5 m^2 + delta (a - m), a = |p - t|, m = min(a, δ)  |
| smooth_l1_loss (beta)                  | huber(beta) / beta; l1 when beta is 0                |
| kl_div                                 | t (log t - x) (0 where t = 0); log_target: e^t (t-x) |
| soft_margin_loss                       | softplus(-y x)                                       |
| margin_ranking_loss                    | clamp_min(-y (x1 - x2) + margin, 0)                  |
| hinge_embedding_loss                   | clamp_min(margin - x, 0) where y != 1, plus x where  |
|                                        | y != -1                                              |
| cosine_embedding_loss                  | 1 - cos where y == 1, relu(cos - margin) where y ==  |
|                                        | -1, cos = x1.x2 / sqrt((|x1|^2 + 1e-12)(|x2|^2 +     |
|                                        | 1e-12)) over dim 1                                   |
| log_sigmoid                            | -softplus(-x) (multilabel_soft_margin's building     |
|                                        | block)                                               |

Conditions on a target's value are Where's (a nonzero float condition is true): y != 1 is
y - 1, y == 1 the same condition with the branches swapped, so no comparison op is needed and
any target value (not only torch's documented 1 and -1) gives torch's result.

The Huber form with min() has Huber's value and derivative on both sides of delta without a
comparison op: a < delta gives 0.5 a^2, a >= delta gives delta (a - delta / 2).
"""

from __future__ import annotations

import math

import numpy as np

from planner.importers.kit import Const, Unsupported
from planner.importers.torch.context import NodeCtx, Value, rule

# at::Reduction
NONE, MEAN, SUM = 0, 1, 2
_REDUCTIONS = {NONE: "none", MEAN: "mean", SUM: "sum"}

# Kept whole by convert.decompose: each becomes the ops of its row above, not torch's
# decomposition (which compares, gathers and casts).
LOSS_PRESERVED = ("cross_entropy_loss.default", "mse_loss.default", "nll_loss_nd.default",
                  "binary_cross_entropy_with_logits.default", "binary_cross_entropy.default",
                  "l1_loss.default", "huber_loss.default", "smooth_l1_loss.default",
                  "kl_div.default", "soft_margin_loss.default", "margin_ranking_loss.default",
                  "hinge_embedding_loss.default", "cosine_embedding_loss.default",
                  "log_sigmoid.default")


def _reduction(n: NodeCtx, k: int) -> int:
    r = n.arg(k, "reduction", MEAN)
    if r not in _REDUCTIONS:
        raise n.fail(f"reduction {r!r} is not 0 (none), 1 (mean) or 2 (sum)")
    return r


def _reduce(n: NodeCtx, per: str, reduction: int) -> str:
    """The per-element loss reduced as torch's `reduction`."""
    if reduction == NONE:
        return per
    op = "ReduceMean" if reduction == MEAN else "ReduceSum"
    return n.emit1(op, [per], {"axes": [], "keepdims": False})


def _label(n: NodeCtx, t: str | Const) -> None:
    """A graph input read as a loss's target gets role "label"."""
    if isinstance(t, str):
        n.imp.mark_label(t)


def _float(n: NodeCtx, t: str | Const, like: str | Const) -> str | Const:
    """The target in the prediction's float dtype (torch promotes an int target)."""
    if n.dtype(t) == n.dtype(like):
        return t
    if isinstance(t, Const):
        return Const.of(n.imp.fresh(f"{n.label}/target"), t.value().astype(n.dtype(like)),
                        origin="constant")
    return n.emit1("Cast", [t], {"to": n.dtype(like)})


def _weight_view(n: NodeCtx, w: str | Const, rank: int) -> str | Const:
    """Class weights (C,) shaped (1, C, 1, ...) to broadcast over (N, C, d1, ...)."""
    shape = (1, n.shape(w)[0], *(1,) * (rank - 2))
    return n.emit1("Reshape", [w], {"shape": list(shape)}) if rank > 2 else w


def _same_shape(n: NodeCtx, a: str | Const, b: str | Const) -> None:
    if n.shape(a) != n.shape(b):
        raise Unsupported(f"{n.op} (target shape {list(n.shape(b))} broadcast to input "
                          f"{list(n.shape(a))})")


def _broadcast(n: NodeCtx, *values: str | Const) -> None:
    """The element-wise losses written as torch writes them (margin_ranking_loss,
    hinge_embedding_loss) broadcast their inputs as torch's arithmetic does: a target of
    shape [N, 1] beside inputs [N, D] is per row; shapes that do not broadcast are refused."""
    shapes = [n.shape(v) for v in values]
    try:
        np.broadcast_shapes(*shapes)
    except ValueError:
        raise n.fail(f"shapes {[list(s) for s in shapes]} do not broadcast") from None


# ---- class ids or class probabilities -----------------------------------------------------

@rule("aten.cross_entropy_loss.default")
def cross_entropy(n: NodeCtx) -> Value:
    logits, target = n.tensor(0), n.tensor(1)
    weight, reduction = n.arg(2, "weight"), _reduction(n, 3)
    ignore, eps = int(n.arg(4, "ignore_index", -100)), float(n.arg(5, "label_smoothing", 0.0))
    if len(n.shape(logits)) == 1:  # unbatched: one position of C classes
        _label(n, target)
        logits, target = _batch_of_one(n, logits), _batch_of_one(n, target)
        return _unbatched(n, _cross_entropy(n, logits, target, weight, reduction, ignore, eps))
    return _cross_entropy(n, logits, target, weight, reduction, ignore, eps)


def _batch_of_one(n: NodeCtx, v: str | Const) -> str | Const:
    shape = (1, *n.shape(v))
    if isinstance(v, Const):
        return Const.of(n.imp.fresh(f"{n.label}/batch"), v.value().reshape(shape),
                        origin="constant")
    return n.emit1("Reshape", [v], {"shape": list(shape)})


def _unbatched(n: NodeCtx, loss: str) -> str:
    """The loss of a batch of one as torch's 0-d result (reduction none gives shape (1,))."""
    return n.emit1("Reshape", [loss], {"shape": []}) if n.shape(loss) != () else loss


def _cross_entropy(n: NodeCtx, logits: str | Const, target: str | Const, weight: object,
                   reduction: int, ignore: int, eps: float) -> str:
    _label(n, target)
    if n.dtype(target).startswith(("float", "bfloat")):
        return _cross_entropy_probabilities(n, logits, target, weight, reduction, eps)
    if n.dtype(target) not in ("int64", "int32"):
        raise Unsupported(f"{n.op} (targets of dtype {n.dtype(target)})")
    target = _labels64(n, target)
    if weight is None and reduction == MEAN:
        return _fused(n, logits, target, ignore, eps)
    logp = n.emit1("LogSoftmax", [logits], {"axis": 1})
    return _nll(n, logp, target, weight, reduction, ignore, eps)


def _labels64(n: NodeCtx, labels: str | Const) -> str | Const:
    if n.dtype(labels) == "int64":
        return labels
    if isinstance(labels, Const):
        return Const.of(n.imp.fresh(f"{n.label}/labels"), labels.value().astype("int64"),
                        origin="constant")
    return n.emit1("Cast", [labels], {"to": "int64"})


def _fused(n: NodeCtx, logits: str | Const, labels: str | Const, ignore: int,
           eps: float) -> str:
    """The mean cross-entropy without class weights: the fused SoftmaxCrossEntropy over rows
    of classes (axis 1 moved last when the logits have rank > 2)."""
    shape = n.shape(logits)
    if len(shape) > 2:
        rows, classes = shape[0] * math.prod(shape[2:]), shape[1]
        perm = [0, *range(2, len(shape)), 1]
        logits = n.emit1("Transpose", [logits], {"perm": perm})
        logits = n.emit1("Reshape", [logits], {"shape": [rows, classes]})
        labels = n.emit1("Reshape", [labels], {"shape": [rows]}) \
            if n.shape(labels) != (rows,) else labels
    attrs = {"ignore_index": ignore, "label_smoothing": eps} if ignore != -100 or eps else None
    return n.emit1("SoftmaxCrossEntropy", [logits, labels], attrs)


def _nll(n: NodeCtx, logp: str | Const, labels: str | Const, weight: object, reduction: int,
         ignore: int, eps: float) -> str:
    inputs = [logp, labels]
    if weight is not None:
        inputs.append(n.tensor(2, "weight"))
    return n.emit1("NLLLoss", inputs, {"axis": 1, "ignore_index": ignore,
                                       "label_smoothing": eps,
                                       "reduction": _REDUCTIONS[reduction]})


def _cross_entropy_probabilities(n: NodeCtx, logits: str | Const, target: str | Const,
                                 weight: object, reduction: int, eps: float) -> str:
    """torch's cross-entropy against class probabilities: the mean is over positions (the
    weights do not normalise it)."""
    _same_shape(n, logits, target)
    target = _float(n, target, logits)
    classes = n.shape(logits)[1]
    if eps:
        target = n.emit1("Add", [n.emit1("Scale", [target], {"factor": 1.0 - eps}),
                                 n.const(eps / classes, n.dtype(logits))])
    if weight is not None:
        w = _weight_view(n, n.tensor(2, "weight"), len(n.shape(logits)))
        target = n.emit1("Mul", [target, w])
    logp = n.emit1("LogSoftmax", [logits], {"axis": 1})
    picked = n.emit1("ReduceSum", [n.emit1("Mul", [logp, target])], {"axes": [1],
                                                                      "keepdims": False})
    return _reduce(n, n.emit1("Neg", [picked]), reduction)


@rule("aten.nll_loss_nd.default")
def nll_loss(n: NodeCtx) -> Value:
    logp, labels = n.tensor(0), n.tensor(1)
    weight, reduction, ignore = n.arg(2, "weight"), _reduction(n, 3), \
        int(n.arg(4, "ignore_index", -100))
    if n.dtype(labels) not in ("int64", "int32"):
        raise Unsupported(f"{n.op} (targets of dtype {n.dtype(labels)})")
    _label(n, labels)
    if len(n.shape(logp)) == 1:  # unbatched: one position of C classes
        loss = _nll(n, _batch_of_one(n, logp), _batch_of_one(n, _labels64(n, labels)), weight,
                    reduction, ignore, 0.0)
        return _unbatched(n, loss)
    return _nll(n, logp, _labels64(n, labels), weight, reduction, ignore, 0.0)


# ---- binary cross-entropy ------------------------------------------------------------------

@rule("aten.binary_cross_entropy_with_logits.default")
def bce_with_logits(n: NodeCtx) -> Value:
    z, t = n.tensor(0), n.tensor(1)
    weight, pos_weight, reduction = n.arg(2, "weight"), n.arg(3, "pos_weight"), _reduction(n, 4)
    _same_shape(n, z, t)
    _label(n, t)
    t = _float(n, t, z)
    if weight is None and pos_weight is None and reduction == MEAN:
        return n.emit1("SigmoidBCE", [z, t])
    one = n.const(1.0, n.dtype(z))
    softplus = n.emit1("Softplus", [n.emit1("Neg", [z])])  # -log sigmoid(z), never overflows
    if pos_weight is not None:
        pw = n.tensor(3, "pos_weight")
        lw = n.emit1("Add", [n.emit1("Mul", [n.emit1("Sub", [pw, one]), t]), one])
        softplus = n.emit1("Mul", [lw, softplus])
    per = n.emit1("Add", [n.emit1("Mul", [n.emit1("Sub", [one, t]), z]), softplus])
    if weight is not None:
        per = n.emit1("Mul", [per, n.tensor(2, "weight")])
    return _reduce(n, per, reduction)


@rule("aten.binary_cross_entropy.default")
def bce(n: NodeCtx) -> Value:
    p, t = n.tensor(0), n.tensor(1)
    weight, reduction = n.arg(2, "weight"), _reduction(n, 3)
    _same_shape(n, p, t)
    _label(n, t)
    t = _float(n, t, p)
    dtype = n.dtype(p)
    one, floor = n.const(1.0, dtype), n.const(-100.0, dtype)  # torch clamps each log at -100
    log_p = n.emit1("Max", [n.emit1("Log", [p]), floor])
    log_q = n.emit1("Max", [n.emit1("Log", [n.emit1("Sub", [one, p])]), floor])
    picked = n.emit1("Add", [n.emit1("Mul", [t, log_p]),
                             n.emit1("Mul", [n.emit1("Sub", [one, t]), log_q])])
    per = n.emit1("Neg", [picked])
    if weight is not None:
        per = n.emit1("Mul", [per, n.tensor(2, "weight")])
    return _reduce(n, per, reduction)


# ---- regression and margins: a per-element formula, then the reduction --------------------

def _difference(n: NodeCtx) -> str:
    p, t = n.tensor(0), n.tensor(1)
    _same_shape(n, p, t)
    _label(n, t)
    return n.emit1("Sub", [p, _float(n, t, p)])


def _huber(n: NodeCtx, d: str, delta: float) -> str:
    """0.5 m^2 + delta (a - m), a = |d|, m = min(a, delta): Huber's loss at delta."""
    a = n.emit1("Abs", [d])
    m = n.emit1("Min", [a, n.const(delta, n.dtype(d))])
    square = n.emit1("Scale", [n.emit1("Mul", [m, m])], {"factor": 0.5})
    return n.emit1("Add", [square, n.emit1("Scale", [n.emit1("Sub", [a, m])],
                                               {"factor": delta})])


@rule("aten.mse_loss.default")
def mse(n: NodeCtx) -> Value:
    reduction = _reduction(n, 2)
    if reduction == MEAN:
        p, t = n.tensor(0), n.tensor(1)
        _same_shape(n, p, t)
        _label(n, t)
        return n.emit1("MSE", [p, _float(n, t, p)])
    d = _difference(n)
    return _reduce(n, n.emit1("Mul", [d, d]), reduction)


@rule("aten.l1_loss.default")
def l1(n: NodeCtx) -> Value:
    return _reduce(n, n.emit1("Abs", [_difference(n)]), _reduction(n, 2))


@rule("aten.huber_loss.default")
def huber(n: NodeCtx) -> Value:
    delta = float(n.arg(3, "delta", 1.0))
    if not delta > 0:
        raise n.fail(f"huber_loss delta must be positive, got {delta}")
    return _reduce(n, _huber(n, _difference(n), delta), _reduction(n, 2))


@rule("aten.smooth_l1_loss.default")
def smooth_l1(n: NodeCtx) -> Value:
    beta = float(n.arg(3, "beta", 1.0))
    if beta < 0:
        raise n.fail(f"smooth_l1_loss beta must not be negative, got {beta}")
    d = _difference(n)
    per = n.emit1("Abs", [d]) if beta == 0 else \
        n.emit1("Scale", [_huber(n, d, beta)], {"factor": 1.0 / beta})
    return _reduce(n, per, _reduction(n, 2))


@rule("aten.kl_div.default")
def kl_div(n: NodeCtx) -> Value:
    x, t = n.tensor(0), n.tensor(1)
    reduction, log_target = _reduction(n, 2), bool(n.arg(3, "log_target", False))
    _same_shape(n, x, t)
    _label(n, t)
    t = _float(n, t, x)
    if log_target:
        per = n.emit1("Mul", [n.emit1("Exp", [t]), n.emit1("Sub", [t, x])])
    else:
        # torch's xlogy(t, t) - t x: t log t is 0 where t is 0 (the Where picks it; the NaN
        # of 0 * log 0 in the other branch is never read, and t gets no gradient).
        zero = n.const(0.0, n.dtype(x))
        xlogy = n.emit1("Where", [t, n.emit1("Mul", [t, n.emit1("Log", [t])]), zero])
        per = n.emit1("Sub", [xlogy, n.emit1("Mul", [t, x])])
    return _reduce(n, per, reduction)


@rule("aten.soft_margin_loss.default")
def soft_margin(n: NodeCtx) -> Value:
    x, y = n.tensor(0), n.tensor(1)
    _same_shape(n, x, y)
    _label(n, y)
    margin = n.emit1("Neg", [n.emit1("Mul", [x, _float(n, y, x)])])
    return _reduce(n, n.emit1("Softplus", [margin]), _reduction(n, 2))


def _clamp_min0(n: NodeCtx, v: Value) -> Value:
    """torch's margin losses' `.clamp_min_(0)`: clamp's gradient, which passes at the margin
    (planner/ops/kinks.py), where Relu's is 0."""
    return n.emit1("Clip", [v], {"min": 0.0, "max": None})


@rule("aten.margin_ranking_loss.default")
def margin_ranking(n: NodeCtx) -> Value:
    x1, x2, y = n.tensor(0), n.tensor(1), n.tensor(2)
    margin, reduction = float(n.arg(3, "margin", 0.0)), _reduction(n, 4)
    _broadcast(n, x1, x2, y)
    _label(n, y)
    gap = n.emit1("Mul", [_float(n, y, x1), n.emit1("Sub", [x1, x2])])
    per = _clamp_min0(n, n.emit1("Sub", [n.const(margin, n.dtype(x1)), gap]))
    return _reduce(n, per, reduction)


@rule("aten.log_sigmoid.default")
def log_sigmoid(n: NodeCtx) -> Value:
    return n.emit1("Neg", [n.emit1("Softplus", [n.emit1("Neg", [n.tensor(0)])])])


@rule("aten.hinge_embedding_loss.default")
def hinge_embedding(n: NodeCtx) -> Value:
    x, y = n.tensor(0), n.tensor(1)
    margin, reduction = float(n.arg(2, "margin", 1.0)), _reduction(n, 3)
    _broadcast(n, x, y)
    _label(n, y)
    y = _float(n, y, x)
    dtype = n.dtype(x)
    one, zero = n.const(1.0, dtype), n.const(0.0, dtype)
    hinge = _clamp_min0(n, n.emit1("Sub", [n.const(margin, dtype), x]))
    not_one = n.emit1("Sub", [y, one])        # nonzero where y != 1
    not_minus_one = n.emit1("Add", [y, one])  # nonzero where y != -1
    per = n.emit1("Add", [n.emit1("Where", [not_one, hinge, zero]),
                          n.emit1("Where", [not_minus_one, x, zero])])
    return _reduce(n, per, reduction)


@rule("aten.cosine_embedding_loss.default")
def cosine_embedding(n: NodeCtx) -> Value:
    x1, x2, y = n.tensor(0), n.tensor(1), n.tensor(2)
    margin, reduction = float(n.arg(3, "margin", 0.0)), _reduction(n, 4)
    _same_shape(n, x1, x2)
    if len(n.shape(x1)) != 2 or n.shape(y) != n.shape(x1)[:1]:
        raise Unsupported(f"{n.op} (inputs other than (N, D) with targets (N,))")
    _label(n, y)
    y = _float(n, y, x1)
    dtype = n.dtype(x1)
    one, zero = n.const(1.0, dtype), n.const(0.0, dtype)

    def dot(a: str | Const, b: str | Const) -> str:
        return n.emit1("ReduceSum", [n.emit1("Mul", [a, b])], {"axes": [1], "keepdims": False})

    tiny = n.const(1e-12, dtype)  # torch's EPSILON in each squared magnitude
    magnitudes = n.emit1("Mul", [n.emit1("Add", [dot(x1, x1), tiny]),
                                 n.emit1("Add", [dot(x2, x2), tiny])])
    cos = n.emit1("Div", [dot(x1, x2), n.emit1("Sqrt", [magnitudes])])
    similar = n.emit1("Sub", [one, cos])
    apart = _clamp_min0(n, n.emit1("Sub", [cos, n.const(margin, dtype)]))
    per = n.emit1("Add", [n.emit1("Where", [n.emit1("Sub", [y, one]), zero, similar]),
                          n.emit1("Where", [n.emit1("Add", [y, one]), zero, apart])])
    return _reduce(n, per, reduction)
