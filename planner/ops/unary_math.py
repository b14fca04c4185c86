"""Element-wise unary math beyond the activations: Exp, Log, Sqrt, Abs, Sign, Softplus, Elu,
Selu, Clip, and the gradient ops EluGrad, SeluGrad, ClipGrad.

Every op maps a tensor to one of the same shape and dtype. Exp, Log, Sqrt, Softplus, Elu and
Selu take float tensors; Abs, Sign and Clip any numeric one. Gradients are built from other ops
where that is exact (Exp: dy * y, Log: dy / x, Sqrt: 0.5 * dy / y, Abs: dy * sign(x),
Softplus: dy * sigmoid(x)); the piecewise ones get a gradient op taking [dy, x]:

    EluGrad   dx = dy              if x > 0 else dy * alpha * exp(x)
    SeluGrad  dx = gamma * dy      if x > 0 else dy * gamma * alpha * exp(x)
    ClipGrad  dx = dy              if min <= x <= max else 0     (as torch.clamp)

Sign has no gradient (its derivative is zero wherever it exists).

FLOPs per element, counting a transcendental function as one: Exp 1, Log 1, Sqrt 1, Abs 1,
Sign 1, Softplus 4 (abs, exp, log1p, max-add), Elu 3 (compare, expm1, multiply), Selu 4,
Clip 2; EluGrad 3, SeluGrad 4, ClipGrad 2.

Example:
    >>> import numpy as np
    >>> from planner.ops import get_op
    >>> get_op("Clip").reference([np.array([-2.0, 0.5, 3.0])], {"min": -1.0, "max": 1.0})[0]
    array([-1. ,  0.5,  1. ])
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from planner.ops.base import (
    Attr,
    Attrs,
    GradBuilder,
    Infer,
    OpDef,
    OpError,
    Pointwise,
    Reference,
    TensorType,
    elementwise_flops,
    register,
    require_float,
)

if TYPE_CHECKING:
    from planner.ir.graph import Node

# Selu's constants (Klambauer et al. 2017), as ONNX and PyTorch spell them.
SELU_ALPHA = 1.6732632423543772
SELU_GAMMA = 1.0507009873554805


def _unary_infer(op: str, float_only: bool) -> Infer:
    def infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
        if float_only:
            require_float(op, ins[0])
        elif ins[0].dtype == "bool":
            raise OpError(f"{op}: input must be numeric, got bool")
        if op == "Clip" and None not in (a["min"], a["max"]) and a["min"] > a["max"]:
            raise OpError(f"Clip: min {a['min']} is greater than max {a['max']}")
        return [ins[0]]

    return infer


def _grad_infer(op: str) -> Infer:
    def infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
        dy, x = ins
        require_float(op, dy, "input dy")
        if dy != x:
            raise OpError(f"{op}: dy is {dy.dtype} {list(dy.shape)} but x is {x.dtype} "
                          f"{list(x.shape)}; they must match")
        return [dy]

    return infer


def _c(value: float, like: np.ndarray) -> np.ndarray:
    """A constant in `like`'s dtype, so float64 inputs stay float64 and float32 stay float32."""
    return np.asarray(value, dtype=like.dtype)


def _softplus(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    # log(1 + exp(x)) = max(x, 0) + log1p(exp(-|x|)): no overflow for large |x|.
    x = xs[0]
    return [np.maximum(x, 0) + np.log1p(np.exp(-np.abs(x)))]


def _elu(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    x = xs[0]
    return [np.where(x > 0, x, _c(a["alpha"], x) * np.expm1(np.minimum(x, 0)))]


def _elu_grad(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    dy, x = xs
    return [np.where(x > 0, dy, dy * _c(a["alpha"], x) * np.exp(np.minimum(x, 0)))]


def _selu(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    x = xs[0]
    neg = _c(a["alpha"], x) * np.expm1(np.minimum(x, 0))
    return [_c(a["gamma"], x) * np.where(x > 0, x, neg)]


def _selu_grad(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    dy, x = xs
    slope = np.where(x > 0, _c(1.0, x), _c(a["alpha"], x) * np.exp(np.minimum(x, 0)))
    return [_c(a["gamma"], x) * dy * slope]


def _clip(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    x = xs[0]
    lo = None if a["min"] is None else _c(a["min"], x)
    hi = None if a["max"] is None else _c(a["max"], x)
    if lo is None and hi is None:
        return [x.copy()]
    return [np.clip(x, lo, hi)]


def _clip_grad(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    dy, x = xs
    keep = np.ones(x.shape, dtype=bool)
    if a["min"] is not None:
        keep &= x >= _c(a["min"], x)
    if a["max"] is not None:
        keep &= x <= _c(a["max"], x)
    return [np.where(keep, dy, _c(0.0, dy))]


# ---- gradient rules ---------------------------------------------------------------------------

def _wanted(g: GradBuilder, node: Node, grads: list[str | None]) -> str | None:
    dy = grads[0]
    return dy if dy is not None and g.needs(node.inputs[0]) else None


def _exp_grad(g: GradBuilder, node: Node, grads: list[str | None]) -> list[str | None]:
    dy = _wanted(g, node, grads)
    return [None if dy is None else g.emit("Mul", [dy, node.outputs[0]])[0]]


def _log_grad(g: GradBuilder, node: Node, grads: list[str | None]) -> list[str | None]:
    dy = _wanted(g, node, grads)
    return [None if dy is None else g.emit("Div", [dy, node.inputs[0]])[0]]


def _sqrt_grad(g: GradBuilder, node: Node, grads: list[str | None]) -> list[str | None]:
    dy = _wanted(g, node, grads)
    if dy is None:
        return [None]
    ratio = g.emit("Div", [dy, node.outputs[0]])[0]
    return [g.emit("Scale", [ratio], {"factor": 0.5})[0]]


def _abs_grad(g: GradBuilder, node: Node, grads: list[str | None]) -> list[str | None]:
    dy = _wanted(g, node, grads)
    if dy is None:
        return [None]
    return [g.emit("Mul", [dy, g.emit("Sign", [node.inputs[0]])[0]])[0]]


def _sign_grad(g: GradBuilder, node: Node, grads: list[str | None]) -> list[str | None]:
    return [None]


def _softplus_grad(g: GradBuilder, node: Node, grads: list[str | None]) -> list[str | None]:
    dy = _wanted(g, node, grads)
    if dy is None:
        return [None]
    return [g.emit("Mul", [dy, g.emit("Sigmoid", [node.inputs[0]])[0]])[0]]


def _grad_op_rule(grad_op: str):
    """Rule emitting grad_op(dy, x) with the node's attrs."""
    def gradient(g: GradBuilder, node: Node, grads: list[str | None]) -> list[str | None]:
        dy = _wanted(g, node, grads)
        if dy is None:
            return [None]
        return [g.emit(grad_op, [dy, node.inputs[0]], dict(node.attrs))[0]]

    return gradient


# ---- scalar formulas (generated kernels) ------------------------------------------------------
# np.minimum(x, 0) keeps NaN: where(x > 0, 0, x). An absent Clip bound arrives as NaN.

def _min0(m, x):
    return m.where(x > 0, 0.0, x)


def _elu_pw(m, xs, p):
    x = xs[0]
    return [m.where(x > 0, x, p["alpha"] * m.expm1(_min0(m, x)))]


def _elu_grad_pw(m, xs, p):
    dy, x = xs
    return [m.where(x > 0, dy, dy * p["alpha"] * m.exp(_min0(m, x)))]


def _selu_pw(m, xs, p):
    x = xs[0]
    return [p["gamma"] * m.where(x > 0, x, p["alpha"] * m.expm1(_min0(m, x)))]


def _selu_grad_pw(m, xs, p):
    dy, x = xs
    return [p["gamma"] * dy * m.where(x > 0, 1.0, p["alpha"] * m.exp(_min0(m, x)))]


def _clip_pw(m, xs, p):
    x, lo, hi = xs[0], p["min"], p["max"]
    return [m.where(x < lo, lo, m.where(x > hi, hi, x))]  # a NaN bound compares false


def _clip_grad_pw(m, xs, p):
    dy, x = xs
    lo, hi = p["min"], p["max"]
    keep = m.all(m.any(m.isnan(lo), x >= lo), m.any(m.isnan(hi), x <= hi))
    return [m.where(keep, dy, 0.0)]


def _pw(formula, params=()) -> Pointwise:
    return Pointwise(formula, params=params)


def _pw2(formula, params=()) -> Pointwise:
    return Pointwise(formula, signatures=("float32,float32->float32",), params=params)


_ELU_P = (("alpha", "float32", 1.0),)
_SELU_P = (("alpha", "float32", SELU_ALPHA), ("gamma", "float32", SELU_GAMMA))
_CLIP_P = (("min", "float32", math.nan), ("max", "float32", math.nan))


# ---- registration -----------------------------------------------------------------------------

def _unary(name: str, reference: Reference, flops: int, gradient, doc: str,
           attrs: dict[str, Attr] | None = None, float_only: bool = True,
           pointwise: Pointwise | None = None) -> None:
    register(OpDef(
        name=name, arity=1, attrs=attrs or {}, cost_class="elementwise",
        infer=_unary_infer(name, float_only),
        flops=elementwise_flops(flops),
        reference=reference,
        gradient=gradient,
        doc=doc,
        pointwise=pointwise,
    ))


def _grad_op(name: str, reference: Reference, flops: int, attrs: dict[str, Attr],
             doc: str, pointwise: Pointwise | None = None) -> None:
    register(OpDef(
        name=name, arity=2, attrs=attrs, cost_class="elementwise",
        infer=_grad_infer(name),
        flops=elementwise_flops(flops),
        reference=reference,
        doc=doc,
        pointwise=pointwise,
    ))


_ELU_ATTRS = {"alpha": Attr("float", 1.0)}
_SELU_ATTRS = {"alpha": Attr("float", SELU_ALPHA), "gamma": Attr("float", SELU_GAMMA)}
# min/max absent (None) means unbounded on that side; JSON has no infinities.
_CLIP_ATTRS = {"min": Attr("float", None), "max": Attr("float", None)}

_unary("Exp", lambda xs, a: [np.exp(xs[0])], 1, _exp_grad, "y = exp(x).",
       pointwise=_pw(lambda m, xs, p: [m.exp(xs[0])]))
_unary("Log", lambda xs, a: [np.log(xs[0])], 1, _log_grad, "y = log(x) (natural).",
       pointwise=_pw(lambda m, xs, p: [m.log(xs[0])]))
_unary("Sqrt", lambda xs, a: [np.sqrt(xs[0])], 1, _sqrt_grad, "y = sqrt(x).",
       pointwise=_pw(lambda m, xs, p: [m.sqrt(xs[0])]))
_unary("Abs", lambda xs, a: [np.abs(xs[0])], 1, _abs_grad, "y = |x|.", float_only=False,
       pointwise=_pw(lambda m, xs, p: [m.abs(xs[0])]))
_unary("Sign", lambda xs, a: [np.sign(xs[0])], 1, _sign_grad, "y = -1, 0 or 1 as x's sign.",
       float_only=False,
       pointwise=_pw(lambda m, xs, p: [m.where(xs[0] > 0, 1.0,
                                               m.where(xs[0] < 0, -1.0, xs[0]))]))
_unary("Softplus", _softplus, 4, _softplus_grad, "y = log(1 + exp(x)).",
       pointwise=_pw(lambda m, xs, p: [m.where(xs[0] > 0, xs[0], 0.0)
                                       + m.log1p(m.exp(-m.abs(xs[0])))]))
_unary("Elu", _elu, 3, _grad_op_rule("EluGrad"),
       "y = x if x > 0 else alpha * (exp(x) - 1).", _ELU_ATTRS, pointwise=_pw(_elu_pw, _ELU_P))
_unary("Selu", _selu, 4, _grad_op_rule("SeluGrad"),
       "y = gamma * (x if x > 0 else alpha * (exp(x) - 1)).", _SELU_ATTRS,
       pointwise=_pw(_selu_pw, _SELU_P))
_unary("Clip", _clip, 2, _grad_op_rule("ClipGrad"),
       "y = min(max(x, min), max); an absent bound is no bound (Relu6 is Clip(0, 6)).",
       _CLIP_ATTRS, float_only=False, pointwise=_pw(_clip_pw, _CLIP_P))

_grad_op("EluGrad", _elu_grad, 3, _ELU_ATTRS, "Gradient of Elu: [dy, x] -> dx.",
         pointwise=_pw2(_elu_grad_pw, _ELU_P))
_grad_op("SeluGrad", _selu_grad, 4, _SELU_ATTRS, "Gradient of Selu: [dy, x] -> dx.",
         pointwise=_pw2(_selu_grad_pw, _SELU_P))
_grad_op("ClipGrad", _clip_grad, 2, _CLIP_ATTRS, "Gradient of Clip: [dy, x] -> dx.",
         pointwise=_pw2(_clip_grad_pw, _CLIP_P))
