"""Erf and Gelu, with GeluGrad: the error function and the Gaussian error linear unit.

    Erf                 y = erf(x)
    Gelu (none)         y = x * Phi(x) = 0.5 * x * (1 + erf(x / sqrt(2)))
    Gelu (tanh)         y = 0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 x^3)))
    GeluGrad [dy, x]    dx = dy * dGelu/dx, for either form:
        none:  Phi(x) + x * phi(x),  phi(x) = exp(-x^2 / 2) / sqrt(2 pi)
        tanh:  0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2 / pi) (1 + 3 * 0.044715 x^2),  t the tanh

`approximate` is "none" or "tanh", as torch.nn.functional.gelu and ONNX Gelu (opset 20) spell it.
Erf's gradient is built from other ops: dx = dy * 2 / sqrt(pi) * exp(-x^2).

numpy has no erf, so the reference maps Python's math.erf over the elements in float64 and rounds
to the input dtype (exact to the last bit of float32; slow, but the reference is an oracle).

FLOPs per element, counting a transcendental function as one: Erf 1, Gelu 5 (erf form: scale,
erf, add, two multiplies; tanh form: about as many), GeluGrad 9.

Example:
    >>> import numpy as np
    >>> from planner.ops import get_op
    >>> get_op("Gelu").reference([np.array([0.0, 1.0])], {"approximate": "none"})[0].round(4)
    array([0.    , 0.8413])
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from planner.ops.base import (
    Attr,
    Attrs,
    GradBuilder,
    OpDef,
    OpError,
    Pointwise,
    TensorType,
    elementwise_flops,
    register,
    require_float,
)

if TYPE_CHECKING:
    from planner.ir.graph import Node

APPROXIMATIONS = ("none", "tanh")
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_GELU_CUBIC = 0.044715

_erf64 = np.vectorize(math.erf, otypes=[np.float64])


def erf(x: np.ndarray) -> np.ndarray:
    """erf(x) element-wise in x's dtype (NaN stays NaN, erf(+-inf) = +-1)."""
    x = np.asarray(x)
    return _erf64(x.astype(np.float64)).astype(x.dtype, copy=False).reshape(x.shape)


def _gelu_parts(x: np.ndarray, approximate: str) -> tuple[np.ndarray, np.ndarray]:
    """(y, dy/dx) of Gelu at x, computed in float64."""
    x = x.astype(np.float64)
    if approximate == "tanh":
        t = np.tanh(_SQRT_2_OVER_PI * (x + _GELU_CUBIC * x ** 3))
        slope = (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * _SQRT_2_OVER_PI
                 * (1 + 3 * _GELU_CUBIC * x * x))
        return 0.5 * x * (1 + t), slope
    cdf = 0.5 * (1 + erf(x / math.sqrt(2.0)))
    pdf = np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)
    return x * cdf, cdf + x * pdf


def _check_approximate(op: str, a: Attrs) -> None:
    if a["approximate"] not in APPROXIMATIONS:
        raise OpError(f"{op}: approximate {a['approximate']!r} is not one of "
                      f"{list(APPROXIMATIONS)}")


def _gelu_infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    require_float("Gelu", ins[0])
    _check_approximate("Gelu", a)
    return [ins[0]]


def _gelu_grad_infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    dy, x = ins
    require_float("GeluGrad", dy, "input dy")
    _check_approximate("GeluGrad", a)
    if dy != x:
        raise OpError(f"GeluGrad: dy is {dy.dtype} {list(dy.shape)} but x is {x.dtype} "
                      f"{list(x.shape)}; they must match")
    return [dy]


def _gelu(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    x = xs[0]
    return [_gelu_parts(x, a["approximate"])[0].astype(x.dtype)]


def _gelu_grad(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    dy, x = xs
    return [(dy * _gelu_parts(x, a["approximate"])[1]).astype(dy.dtype)]


def _gelu_gradient(g: GradBuilder, node: Node, grads: list[str | None]) -> list[str | None]:
    dy = grads[0]
    if dy is None or not g.needs(node.inputs[0]):
        return [None]
    return [g.emit("GeluGrad", [dy, node.inputs[0]],
                   {"approximate": node.attrs.get("approximate", "none")})[0]]


def _erf_infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    require_float("Erf", ins[0])
    return [ins[0]]


def _erf_gradient(g: GradBuilder, node: Node, grads: list[str | None]) -> list[str | None]:
    dy = grads[0]
    x = node.inputs[0]
    if dy is None or not g.needs(x):
        return [None]
    square = g.emit("Mul", [x, x])[0]
    bell = g.emit("Exp", [g.emit("Neg", [square])[0]])[0]
    slope = g.emit("Scale", [bell], {"factor": 2.0 / math.sqrt(math.pi)})[0]
    return [g.emit("Mul", [dy, slope])[0]]


_APPROXIMATE = {"approximate": Attr("str", "none")}


# ---- scalar formulas (generated kernels), in float32 without cancellation: Phi(x) as
# erfc(-x / sqrt 2) / 2 (1 + erf underflows for x << 0), and the tanh form's 1 + t as
# 2 sigmoid(2u), 1 - t^2 as 4 sigmoid(2u) sigmoid(-2u). Non-finite x gives the reference's
# answer: +inf -> +inf, -inf -> NaN (-inf * 0); GeluGrad NaN at both (inf * 0).

def _gelu_pw(m, xs, p):
    x = xs[0]
    if p["approximate"] == "tanh":
        u = _SQRT_2_OVER_PI * (x + _GELU_CUBIC * x * x * x)
        return [x / (1.0 + m.exp(-2.0 * u))]
    return [0.5 * x * m.erfc(x * -math.sqrt(0.5))]


def _gelu_grad_pw(m, xs, p):
    dy, x = xs
    if p["approximate"] == "tanh":
        u = _SQRT_2_OVER_PI * (x + _GELU_CUBIC * x * x * x)
        s_pos = 1.0 / (1.0 + m.exp(-2.0 * u))
        s_neg = 1.0 / (1.0 + m.exp(2.0 * u))
        slope = s_pos + 2.0 * x * s_pos * s_neg * _SQRT_2_OVER_PI * (1.0 + 3 * _GELU_CUBIC * x * x)
        return [dy * slope]
    cdf = 0.5 * m.erfc(x * -math.sqrt(0.5))
    pdf = m.exp(-0.5 * x * x) * (1.0 / math.sqrt(2 * math.pi))
    return [dy * (cdf + x * pdf)]


_GELU_FORMS = (("approximate", APPROXIMATIONS),)

register(OpDef(
    name="Erf", arity=1, cost_class="elementwise",
    infer=_erf_infer,
    flops=elementwise_flops(1),
    reference=lambda xs, a: [erf(xs[0])],
    gradient=_erf_gradient,
    pointwise=Pointwise(lambda m, xs, p: [m.erf(xs[0])]),
    doc="y = erf(x).",
))

register(OpDef(
    name="Gelu", arity=1, attrs=_APPROXIMATE, cost_class="elementwise",
    infer=_gelu_infer,
    flops=elementwise_flops(5),
    reference=_gelu,
    gradient=_gelu_gradient,
    pointwise=Pointwise(_gelu_pw, structural=_GELU_FORMS),
    doc="y = x * Phi(x) (approximate='none') or its tanh approximation (approximate='tanh').",
))

register(OpDef(
    name="GeluGrad", arity=2, attrs=_APPROXIMATE, cost_class="elementwise",
    infer=_gelu_grad_infer,
    flops=elementwise_flops(9),
    reference=_gelu_grad,
    pointwise=Pointwise(_gelu_grad_pw, signatures=("float32,float32->float32",),
                        structural=_GELU_FORMS),
    doc="Gradient of Gelu: [dy, x] -> dx.",
))
