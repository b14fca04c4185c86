"""Broadcasting binary math beyond Add/Sub/Mul/Div: Pow, Max, Min with MaxGrad, MinGrad; and
PRelu with PReluGrad.

Pow, Max and Min broadcast as numpy does; both inputs have one dtype, which the output keeps
(Pow takes floats only). Gradients, as PyTorch's:

    Pow   da = dy * b * a^(b - 1);   db = dy * y * log(a)   (NaN where a < 0, as log; torch
          instead gives 0 for a == 0, b >= 0 there, and for b == 0 in da)
    Max   MaxGrad [dy, a, b] -> [da, db] in the output's shape: dy goes to the larger input,
          half to each on a tie (torch.maximum's rule; a NaN compares neither way, so both
          inputs get dy), then summed down to each input's shape
    Min   MinGrad likewise, dy going to the smaller input

PRelu [x, slope]: y = x if x >= 0 else slope * x, where slope broadcasts to x's shape (ONNX's
unidirectional broadcasting: slope (C, 1, 1) for x (N, C, H, W), or a single slope (1,)).
PReluGrad [dy, x, slope] -> [dx, dslope]; dslope sums dy * x over the elements where x < 0 back
down to slope's shape.

FLOPs per output element: Pow 1, Max 1, Min 1, MaxGrad/MinGrad 3 (two compares, a halving),
PRelu 2 (compare, multiply), PReluGrad 4.

Example:
    >>> import numpy as np
    >>> from planner.ops import get_op
    >>> x, slope = np.array([[-2.0, 3.0]]), np.array([0.5])
    >>> get_op("PRelu").reference([x, slope], {})[0]
    array([[-1.,  3.]])
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from planner.ops.base import (
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
from planner.ops.elementwise import F32_BINARY, binary_infer, broadcast_shapes
from planner.ops.reduce import sum_to_shape

if TYPE_CHECKING:
    from planner.ir.graph import Node


def _binary(name: str, fn: Callable[[np.ndarray, np.ndarray], np.ndarray], gradient,
            doc: str, float_only: bool = False, formula=None) -> None:
    register(OpDef(
        name=name, arity=2, cost_class="elementwise",
        infer=binary_infer(name, float_only),
        flops=elementwise_flops(1),
        reference=lambda xs, a: [fn(xs[0], xs[1])],
        gradient=gradient,
        doc=doc,
        pointwise=Pointwise(formula, signatures=(F32_BINARY,), broadcast=True),
    ))


def _pow_gradient(g: GradBuilder, node: Node, grads: list[str | None]) -> list[str | None]:
    a, b = node.inputs
    dy = grads[0]
    da = db = None
    if dy is not None and g.needs(a):
        one = g.emit("Fill", [], {"shape": [], "value": 1.0, "dtype": g.type(b).dtype})[0]
        power = g.emit("Pow", [a, g.emit("Sub", [b, one])[0]])[0]
        slope = g.emit("Mul", [b, power])[0]
        da = sum_to_shape(g, g.emit("Mul", [dy, slope])[0], g.type(a).shape)
    if dy is not None and g.needs(b):
        slope = g.emit("Mul", [node.outputs[0], g.emit("Log", [a])[0]])[0]
        db = sum_to_shape(g, g.emit("Mul", [dy, slope])[0], g.type(b).shape)
    return [da, db]


def _extremum_gradient(grad_op: str):
    def gradient(g: GradBuilder, node: Node, grads: list[str | None]) -> list[str | None]:
        a, b = node.inputs
        dy = grads[0]
        if dy is None or not (g.needs(a) or g.needs(b)):
            return [None, None]
        da, db = g.emit(grad_op, [dy, a, b])
        return [sum_to_shape(g, da, g.type(a).shape) if g.needs(a) else None,
                sum_to_shape(g, db, g.type(b).shape) if g.needs(b) else None]

    return gradient


_binary("Pow", np.power, _pow_gradient, "y = a ** b, numpy broadcasting (float only).",
        float_only=True, formula=lambda m, xs, p: [m.pow(xs[0], xs[1])])
_binary("Max", np.maximum, _extremum_gradient("MaxGrad"),
        "y = max(a, b) element-wise, numpy broadcasting (NaN propagates).",
        formula=lambda m, xs, p: [m.where(m.any(m.isnan(xs[0]), xs[0] > xs[1]), xs[0], xs[1])])
_binary("Min", np.minimum, _extremum_gradient("MinGrad"),
        "y = min(a, b) element-wise, numpy broadcasting (NaN propagates).",
        formula=lambda m, xs, p: [m.where(m.any(m.isnan(xs[0]), xs[0] < xs[1]), xs[0], xs[1])])


def _extremum_grad_infer(op: str):
    def infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
        dy, x, y = ins
        out = binary_infer(op, True)([x, y], a)[0]
        if dy != out:
            raise OpError(f"{op}: dy is {dy.dtype} {list(dy.shape)} but the inputs broadcast to "
                          f"{out.dtype} {list(out.shape)}")
        return [dy, dy]

    return infer


def _extremum_grad(larger: bool):
    """[dy, a, b] -> [da, db] in dy's shape, torch.maximum's (minimum's) rule."""
    def reference(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
        dy, x, y = xs
        zero = np.zeros((), dtype=dy.dtype)
        shared = np.where(x == y, dy / dy.dtype.type(2), dy)
        x_loses, y_loses = (x < y, x > y) if larger else (x > y, x < y)
        return [np.where(x_loses, zero, shared), np.where(y_loses, zero, shared)]

    return reference


def _extremum_grad_pw(larger: bool):
    def formula(m, xs, p):
        dy, x, y = xs
        shared = m.where(x == y, dy / 2.0, dy)
        x_loses, y_loses = (x < y, x > y) if larger else (x > y, x < y)
        return [m.where(x_loses, 0.0, shared), m.where(y_loses, 0.0, shared)]

    return formula


for _name, _larger in (("MaxGrad", True), ("MinGrad", False)):
    register(OpDef(
        name=_name, arity=3, cost_class="elementwise",
        infer=_extremum_grad_infer(_name),
        flops=elementwise_flops(3),
        reference=_extremum_grad(_larger),
        pointwise=Pointwise(_extremum_grad_pw(_larger), broadcast=True,
                            signatures=("float32,float32,float32->float32,float32",)),
        doc=f"Gradient of {_name[:3]}: [dy, a, b] -> [da, db] in dy's (the output's) shape.",
    ))


# ---- PRelu ------------------------------------------------------------------------------------

def _check_slope(op: str, x: TensorType, slope: TensorType) -> None:
    require_float(op, x)
    if slope.dtype != x.dtype:
        raise OpError(f"{op}: slope is {slope.dtype} but x is {x.dtype}")
    try:
        fits = broadcast_shapes(op, x.shape, slope.shape) == x.shape
    except OpError:
        fits = False
    if not fits:
        raise OpError(f"{op}: slope shape {list(slope.shape)} does not broadcast to x's shape "
                      f"{list(x.shape)} (slope (C, 1, 1) applies per channel)")


def _prelu_infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    x, slope = ins
    _check_slope("PRelu", x, slope)
    return [x]


def _prelu_grad_infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    dy, x, slope = ins
    _check_slope("PReluGrad", x, slope)
    if dy != x:
        raise OpError(f"PReluGrad: dy is {dy.dtype} {list(dy.shape)} but x is {x.dtype} "
                      f"{list(x.shape)}; they must match")
    return [x, slope]


def _prelu(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    x, slope = xs
    return [np.where(x < 0, slope * x, x)]


def _sum_to(value: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Sum a value broadcast from `shape` back down to `shape`."""
    lead = value.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(lead + k for k, d in enumerate(shape)
                                      if d == 1 and value.shape[lead + k] != 1)
    return np.sum(value, axis=axes, keepdims=True).reshape(shape)


def _prelu_grad(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    dy, x, slope = xs
    neg = x < 0
    dx = np.where(neg, slope * dy, dy)
    dslope = _sum_to(np.where(neg, dy * x, np.zeros((), dtype=x.dtype)), slope.shape)
    return [dx, dslope.astype(slope.dtype, copy=False)]


def _prelu_gradient(g: GradBuilder, node: Node, grads: list[str | None]) -> list[str | None]:
    x, slope = node.inputs
    dy = grads[0]
    if dy is None or not (g.needs(x) or g.needs(slope)):
        return [None, None]
    dx, dslope = g.emit("PReluGrad", [dy, x, slope])
    return [dx if g.needs(x) else None, dslope if g.needs(slope) else None]


register(OpDef(
    name="PRelu", arity=2, cost_class="elementwise",
    infer=_prelu_infer,
    flops=elementwise_flops(2),
    reference=_prelu,
    gradient=_prelu_gradient,
    pointwise=Pointwise(lambda m, xs, p: [m.where(xs[0] < 0, xs[1] * xs[0], xs[0])],
                        signatures=(F32_BINARY,), broadcast=True),
    doc="y = x if x >= 0 else slope * x; slope broadcasts to x (e.g. (C, 1, 1) per channel).",
))

register(OpDef(
    name="PReluGrad", arity=3, cost_class="reduction",
    # the kernel sums dslope in double
    scratch=lambda ins, outs, a, threads: 8 * ins[2].size + 64,
    # the CUDA kernel's per-element contributions dy * x (floats), then summed to slope's shape
    gpu_scratch=lambda ins, outs, a: 4 * ins[1].size,
    infer=_prelu_grad_infer,
    flops=lambda ins, outs, a: 4 * outs[0].size,
    reference=_prelu_grad,
    # per element of x: dx and dy * x where x < 0, which the kernel sums to slope's shape
    pointwise=Pointwise(
        lambda m, xs, p: [m.where(xs[1] < 0, xs[2] * xs[0], xs[0]),
                          m.where(xs[1] < 0, xs[0] * xs[1], 0.0)],
        signatures=("float32,float32,float32->float32,float32",), broadcast=True,
        reduce_to=((1, 2),)),
    doc="Gradient of PRelu: [dy, x, slope] -> [dx, dslope].",
))
