"""Training-step ops: parameter updates (SGD, ApplyMomentum, ApplyAdam), the step counter
(Increment) and the loss seed of the backward pass (Fill).

An update op reads a persistent tensor and writes its next value; autodiff marks that output with
`updates=<persistent tensor>` (planner/graph/ir.py), so executors write it over the old bytes.
The formulas are PyTorch's (torch.optim.SGD with and without momentum, torch.optim.Adam), each
computed in the parameter's dtype:

    SGD             g = grad + wd * p;  p' = p - lr * g
    ApplyMomentum   g = grad + wd * p;  v' = m * v + g;  p' = p - lr * (g + m * v' if nesterov
                    else v')      (v starts at zero, so the first step gives v' = g, as PyTorch)
    ApplyAdam       g = grad + wd * p;  m' = b1 * m + (1 - b1) * g;  v' = b2 * v + (1 - b2) * g^2
                    p' = p - lr / (1 - b1^t) * m' / (sqrt(v') / sqrt(1 - b2^t) + eps)

where t is the step count *after* this step's Increment (1 on the first step).

Example:
    >>> import numpy as np
    >>> from planner.ops import get_op
    >>> get_op("SGD").reference([np.array([1.0, 2.0]), np.array([0.5, 0.5])],
    ...                         {"lr": 0.1, "weight_decay": 0.0})[0]
    array([0.95, 1.95])
"""

from __future__ import annotations

import numpy as np

from planner.dtypes import DTYPE_BYTES
from planner.ops.base import (
    Attr,
    Attrs,
    OpDef,
    OpError,
    Pointwise,
    TensorType,
    register,
    require_float,
)


def _check_like(op: str, param: TensorType, other: TensorType, what: str) -> None:
    if (other.shape, other.dtype) != (param.shape, param.dtype):
        raise OpError(f"{op}: {what} has shape {list(other.shape)} ({other.dtype}) but the param "
                      f"has shape {list(param.shape)} ({param.dtype})")


def _infer_update(op: str, slots: tuple[str, ...], n_out: int):
    """Shape rule of an update: param, grad and every slot alike; `n_out` outputs like param."""

    def infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
        param = ins[0]
        require_float(op, param, "param")
        for t, what in zip(ins[1:], ("grad", *slots), strict=False):
            _check_like(op, param, t, what)
        return [param] * n_out

    return infer


def _decayed(p: np.ndarray, g: np.ndarray, weight_decay: float) -> np.ndarray:
    """PyTorch's coupled weight decay (L2): g + wd * p."""
    return g + p.dtype.type(weight_decay) * p if weight_decay else g


# Scalar formulas (generated kernels): weight decay only where it is non-zero, as the reference
# (0 * inf would be NaN); nesterov arrives as 0 or 1.

def _decayed_pw(m, p, g, wd):
    return m.where(wd != 0, g + wd * p, g)


def _sgd_pw(m, xs, a):
    p, g = xs
    return [p - a["lr"] * _decayed_pw(m, p, g, a["weight_decay"])]


def _momentum_pw(m, xs, a):
    p, g, v = xs
    mom = a["momentum"]
    g = _decayed_pw(m, p, g, a["weight_decay"])
    v_next = mom * v + g
    step = m.where(a["nesterov"] != 0, g + mom * v_next, v_next)
    return [p - a["lr"] * step, v_next]


def _adam_pw(m, xs, a):
    p, g, mo, v, t = xs
    b1, b2 = a["beta1"], a["beta2"]
    g = _decayed_pw(m, p, g, a["weight_decay"])
    m_next = b1 * mo + (1.0 - b1) * g
    v_next = b2 * v + (1.0 - b2) * g * g
    step_size = a["lr"] / (1.0 - m.pow(b1, t))
    denom = m.sqrt(v_next) / m.sqrt(1.0 - m.pow(b2, t)) + a["epsilon"]
    return [p - step_size * (m_next / denom), m_next, v_next]


# ---- SGD --------------------------------------------------------------------------------------

def _sgd(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    p, g = xs
    lr = p.dtype.type(a["lr"])
    return [p - lr * _decayed(p, g, a["weight_decay"])]


register(OpDef(
    name="SGD", arity=2,
    attrs={"lr": Attr("float", required=True), "weight_decay": Attr("float", 0.0)},
    infer=_infer_update("SGD", (), 1),
    # per element: multiply-add for the step, one more for weight decay
    flops=lambda ins, outs, a: ins[0].size * (2 + (2 if a["weight_decay"] else 0)),
    reference=_sgd,
    pointwise=Pointwise(_sgd_pw, signatures=("float32,float32->float32",),
                        params=(("lr", "float32", 0.0), ("weight_decay", "float32", 0.0))),
    doc="SGD [param, grad] -> param_next = param - lr * (grad + weight_decay * param).",
))


# ---- Momentum ---------------------------------------------------------------------------------

def _momentum(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    p, g, v = xs
    lr, m = p.dtype.type(a["lr"]), p.dtype.type(a["momentum"])
    g = _decayed(p, g, a["weight_decay"])
    v_next = m * v + g
    step = g + m * v_next if a["nesterov"] else v_next
    return [p - lr * step, v_next]


register(OpDef(
    name="ApplyMomentum", arity=3,
    attrs={"lr": Attr("float", required=True), "momentum": Attr("float", 0.9),
           "weight_decay": Attr("float", 0.0), "nesterov": Attr("bool", False)},
    infer=_infer_update("ApplyMomentum", ("velocity",), 2),
    # per element: velocity and param multiply-adds, plus weight decay and Nesterov's look-ahead
    flops=lambda ins, outs, a: ins[0].size * (4 + (2 if a["weight_decay"] else 0)
                                              + (2 if a["nesterov"] else 0)),
    reference=_momentum,
    pointwise=Pointwise(_momentum_pw, signatures=("float32,float32,float32->float32,float32",),
                        params=(("lr", "float32", 0.0), ("momentum", "float32", 0.9),
                                ("weight_decay", "float32", 0.0), ("nesterov", "float32", 0.0))),
    doc="ApplyMomentum [param, grad, velocity] -> [param_next, velocity_next], PyTorch's "
        "v = momentum * v + g; param -= lr * v (or g + momentum * v with nesterov).",
))


# ---- Adam -------------------------------------------------------------------------------------

def _infer_adam(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    outs = _infer_update("ApplyAdam", ("m", "v"), 3)(ins[:4], a)
    step = ins[4]
    if step.shape != ():
        raise OpError(f"ApplyAdam: step must be a scalar, got shape {list(step.shape)}")
    require_float("ApplyAdam", step, "step")
    return outs


def _adam(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    p, g, m, v, step = xs
    f = p.dtype.type
    lr, b1, b2, eps = f(a["lr"]), f(a["beta1"]), f(a["beta2"]), f(a["epsilon"])
    t = f(step)
    g = _decayed(p, g, a["weight_decay"])
    m_next = b1 * m + (f(1) - b1) * g
    v_next = b2 * v + (f(1) - b2) * g * g
    step_size = lr / (f(1) - b1 ** t)
    denom = np.sqrt(v_next) / np.sqrt(f(1) - b2 ** t) + eps
    return [p - step_size * (m_next / denom), m_next, v_next]


register(OpDef(
    name="ApplyAdam", arity=5,
    attrs={"lr": Attr("float", required=True), "beta1": Attr("float", 0.9),
           "beta2": Attr("float", 0.999), "epsilon": Attr("float", 1e-8),
           "weight_decay": Attr("float", 0.0)},
    infer=_infer_adam,
    # per element: 3 for m, 4 for v, sqrt, scale and epsilon (3), divide and update (3);
    # plus 2 for weight decay
    flops=lambda ins, outs, a: ins[0].size * (13 + (2 if a["weight_decay"] else 0)),
    reference=_adam,
    pointwise=Pointwise(
        _adam_pw, signatures=("float32,float32,float32,float32,float32->float32,float32,float32",),
        params=(("lr", "float32", 0.0), ("beta1", "float32", 0.9), ("beta2", "float32", 0.999),
                ("epsilon", "float32", 1e-8), ("weight_decay", "float32", 0.0)),
        scalar_inputs=(4,)),
    doc="ApplyAdam [param, grad, m, v, step] -> [param_next, m_next, v_next], torch.optim.Adam "
        "with bias correction by the step count t (already incremented for this step).",
))


# ---- step counter and loss seed -----------------------------------------------------------------

def _infer_increment(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    if ins[0].dtype == "int64":
        if a["by"] != int(a["by"]):
            raise OpError(f"Increment: an int64 counter needs a whole `by`, got {a['by']}")
    else:
        require_float("Increment", ins[0])
    return [ins[0]]


register(OpDef(
    name="Increment",
    recompute="never", arity=1,
    attrs={"by": Attr("float", 1.0)},
    infer=_infer_increment,
    flops=lambda ins, outs, a: outs[0].size,
    reference=lambda xs, a: [xs[0] + xs[0].dtype.type(a["by"])],
    pointwise=Pointwise(lambda m, xs, p: [xs[0] + m.cast(p["by"], m.out_dtypes[0])],
                        signatures=("float32->float32", "int64->int64"),
                        params=(("by", "float64", 1.0),)),
    doc="Increment [x] -> x + by; a step count (Adam's float32 one, the int64 dropout step), "
        "updated in place.",
))


def _infer_fill(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    if a["dtype"] not in DTYPE_BYTES:
        raise OpError(f"Fill: unknown dtype {a['dtype']!r}; expected one of "
                      f"{sorted(DTYPE_BYTES)}")
    if any(d < 0 for d in a["shape"]):
        raise OpError(f"Fill: shape {a['shape']} has a negative dimension")
    return [TensorType(tuple(a["shape"]), a["dtype"])]


register(OpDef(
    name="Fill",
    recompute="never", arity=0,
    attrs={"shape": Attr("ints", required=True), "value": Attr("float", required=True),
           "dtype": Attr("str", "float32")},
    infer=_infer_fill,
    flops=lambda ins, outs, a: 0,
    reference=lambda xs, a: [np.full(tuple(a["shape"]), a["value"], dtype=a["dtype"])],
    pointwise=Pointwise(lambda m, xs, p: [m.cast(p["value"], m.out_dtypes[0])],
                        signatures=("->float32", "->int64"), params=(("value", "float64", 0.0),)),
    doc="Fill [] -> a tensor of `shape` holding `value`; seeds the backward pass with "
        "d loss / d loss = 1.",
))
