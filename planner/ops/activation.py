"""Activations and their gradients: Relu, LeakyRelu, Tanh, Sigmoid, Softmax, and *Grad ops.

Every op here maps a float tensor to one of the same shape and dtype. Gradient ops take the
incoming gradient dy and whichever forward value makes the derivative cheapest: the output y
(Relu, Tanh, Sigmoid, Softmax), or the input x for LeakyRelu, whose output does not tell
the sign of x when alpha < 0.

    ReluGrad       dx = 0 where y <= 0, else dy (a NaN y passes dy: PyTorch's threshold_backward)
    LeakyReluGrad  dx = dy * (x > 0 ? 1 : alpha)
    TanhGrad       dx = dy * (1 - y^2)
    SigmoidGrad    dx = dy * y * (1 - y)
    SoftmaxGrad    dx = y * (dy - sum(dy * y, axis))

FLOPs per element, counting a transcendental function as one: Relu 1, LeakyRelu 2, Tanh 1,
Sigmoid 4 (exp, add, divide, select), Softmax 5 (max, subtract, exp, sum, divide); ReluGrad 1,
LeakyReluGrad 2, TanhGrad 3, SigmoidGrad 3, SoftmaxGrad 4.

Example:
    >>> import numpy as np
    >>> from planner.ops import get_op
    >>> get_op("Relu").reference([np.array([-1.0, 2.0])], {})[0]
    array([0., 2.])
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from planner.dtypes import LOW_FLOATS
from planner.ops.base import (
    BY_POSITION,
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
    low_signatures,
    norm_axis,
    register,
    require_float,
    widening_scratch,
)

if TYPE_CHECKING:
    from planner.ir.graph import Node


def _float_unary(op: str) -> Infer:
    def infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
        require_float(op, ins[0])
        if op == "Softmax":
            norm_axis(op, a["axis"], ins[0].rank)
        return [ins[0]]

    return infer


def _grad_infer(op: str, second: str) -> Infer:
    """[dy, second] -> dx: both float, of one shape and dtype."""
    def infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
        dy, v = ins
        require_float(op, dy, "input dy")
        if dy != v:
            raise OpError(f"{op}: dy is {dy.dtype} {list(dy.shape)} but {second} is "
                          f"{v.dtype} {list(v.shape)}; they must match")
        if op == "SoftmaxGrad":
            norm_axis(op, a["axis"], dy.rank)
        return [dy]

    return infer


def _sigmoid(x: np.ndarray) -> np.ndarray:
    # exp of a non-positive number only, so large |x| neither overflows nor loses precision.
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e))


def _softmax(x: np.ndarray, axis: int) -> np.ndarray:
    # initial=-inf: an empty axis has no maximum (and its softmax no element), as torch's
    e = np.exp(x - np.max(x, axis=axis, keepdims=True, initial=-np.inf))
    return e / np.sum(e, axis=axis, keepdims=True)


def _rule(grad_op: str, second: str, attr_names: tuple[str, ...] = ()):
    """Gradient rule emitting `grad_op(dy, second)`, where second is "x" (the node's input)
    or "y" (its output), with the node's attrs named in attr_names."""
    def gradient(g: GradBuilder, node: Node, grads: list[str | None]) -> list[str | None]:
        dy = grads[0]
        if dy is None or not g.needs(node.inputs[0]):
            return [None]
        value = node.inputs[0] if second == "x" else node.outputs[0]
        attrs = {k: node.attrs[k] for k in attr_names}
        return [g.emit(grad_op, [dy, value], attrs)[0]]

    return gradient


def _define(name: str, reference: Reference, flops: int, grad_op: str, second: str,
            grad_reference: Reference, grad_flops: int, attrs: dict[str, Attr],
            doc: str, cost_class: str = "elementwise", pointwise=None,
            grad_pointwise=None, low: bool = False, scratch=None,
            by_position: bool = False) -> None:
    """Register a forward activation and its gradient op; `low`: their kernels also run in
    the low float types (planner.frontend.passes.precision.FOLLOW_OPS); `scratch`: both ops' rule
    (default: widening_scratch, the CPU runtime's float32 loop on widened copies);
    `by_position`: both kernels visit elements by position (OpDef.channel_blocked)."""
    blocked = BY_POSITION if by_position else None
    scratch = scratch or widening_scratch()
    unary, binary = "float32->float32", "float32,float32->float32"
    if low:
        unary, binary = (unary, *low_signatures(unary)), (binary, *low_signatures(binary))
    else:
        unary, binary = (unary,), (binary,)
    register(OpDef(
        name=name, arity=1, attrs=attrs, cost_class=cost_class,
        infer=_float_unary(name), scratch=scratch,
        flops=elementwise_flops(flops),
        reference=reference,
        gradient=_rule(grad_op, second, tuple(attrs)),
        doc=doc,
        pointwise=pointwise and Pointwise(pointwise, signatures=unary, params=_params(attrs)),
        channel_blocked=blocked,
    ))
    register(OpDef(
        name=grad_op, arity=2, attrs=attrs, cost_class=cost_class,
        infer=_grad_infer(grad_op, second), scratch=scratch,
        flops=elementwise_flops(grad_flops),
        reference=grad_reference,
        doc=f"Gradient of {name}: [dy, {second}] -> dx.",
        pointwise=grad_pointwise and Pointwise(
            grad_pointwise, signatures=binary, params=_params(attrs)),
        channel_blocked=blocked,
    ))


def _params(attrs: dict[str, Attr]) -> tuple[tuple[str, str, float], ...]:
    return tuple((k, "float32", a.default) for k, a in attrs.items())


def _leaky_relu(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    x = xs[0]
    return [np.where(x > 0, x, x * np.asarray(a["alpha"], dtype=x.dtype))]


def _leaky_relu_grad(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    dy, x = xs
    return [np.where(x > 0, dy, dy * np.asarray(a["alpha"], dtype=dy.dtype))]


def _softmax_ref(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    return [_softmax(xs[0], a["axis"])]


def _softmax_grad(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    dy, y = xs
    return [y * (dy - np.sum(dy * y, axis=a["axis"], keepdims=True))]


def _sigmoid_pw(m, xs, p):
    x = xs[0]
    e = m.exp(-m.abs(x))
    return [m.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))]


def relu_scratch(ins: list[TensorType], outs: list[TensorType], a: Attrs, threads: int) -> int:
    """Relu's and ReluGrad's scratch: none where every operand has the one low float type (the
    CPU runtime runs them on the bits: kernels/math.cpp), else widening_scratch's copies.

    >>> bf16 = TensorType((3, 5), "bfloat16")
    >>> relu_scratch([bf16], [bf16], {}, 2), relu_scratch([bf16], [TensorType((3, 5))], {}, 2)
    (0, 64)
    """
    dtypes = {t.dtype for t in (*ins, *outs)}
    if len(dtypes) == 1 and dtypes <= LOW_FLOATS:
        return 0
    return widening_scratch()(ins, outs, a, threads)


# Scalar formulas (generated kernels): np.maximum(x, 0) keeps NaN, so Relu is where(x < 0, 0, x).
def _relu_grad_pw(m, xs, p):
    """threshold_backward's not(y <= 0), spelled with isnan: TVM's simplifier, which writes
    the CUDA kernel, would rewrite the negation as y > 0, which is false for a NaN."""
    return [m.where(m.any(xs[1] > 0, m.isnan(xs[1])), xs[0], 0.0)]


_define("Relu", lambda xs, a: [np.maximum(xs[0], 0)], 1,
        "ReluGrad", "y", lambda xs, a: [np.where(xs[1] <= 0, 0, xs[0])], 1, {},
        "y = max(x, 0).",
        pointwise=lambda m, xs, p: [m.where(xs[0] < 0, 0.0, xs[0])],
        grad_pointwise=_relu_grad_pw, low=True,
        scratch=relu_scratch, by_position=True)
_define("LeakyRelu", _leaky_relu, 2,
        "LeakyReluGrad", "x", _leaky_relu_grad, 2, {"alpha": Attr("float", 0.01)},
        "y = x if x > 0 else alpha * x.",
        pointwise=lambda m, xs, p: [m.where(xs[0] > 0, xs[0], xs[0] * p["alpha"])],
        grad_pointwise=lambda m, xs, p: [m.where(xs[1] > 0, xs[0], xs[0] * p["alpha"])],
        by_position=True)
_define("Tanh", lambda xs, a: [np.tanh(xs[0])], 1,
        "TanhGrad", "y", lambda xs, a: [xs[0] * (1 - xs[1] * xs[1])], 3, {},
        "y = tanh(x).",
        pointwise=lambda m, xs, p: [m.tanh(xs[0])],
        grad_pointwise=lambda m, xs, p: [xs[0] * (1.0 - xs[1] * xs[1])], by_position=True)
_define("Sigmoid", lambda xs, a: [_sigmoid(xs[0])], 4,
        "SigmoidGrad", "y", lambda xs, a: [xs[0] * xs[1] * (1 - xs[1])], 3, {},
        "y = 1 / (1 + exp(-x)).",
        pointwise=_sigmoid_pw,
        grad_pointwise=lambda m, xs, p: [xs[0] * xs[1] * (1.0 - xs[1])], by_position=True)
_define("Softmax", _softmax_ref, 5,
        "SoftmaxGrad", "y", _softmax_grad, 4, {"axis": Attr("int", -1)},
        "y = exp(x) / sum(exp(x)) along axis.", cost_class="reduction")
