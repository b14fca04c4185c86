"""Element-wise ops: broadcasting Add, Sub, Mul, Div; AddN; Neg, Scale; Expand.

Binary ops broadcast as numpy does (shapes aligned on the right, a dimension of 1 stretches);
both inputs have the same dtype, which the output keeps. Their gradients flow to each input
through `sum_to_shape`, which sums away the broadcast axes.

A residual sum's Relu folds into the sum (planner/step/fold_sum_relu.py, CPU steps): Add with
`activation: relu` is relu(a + b) over two float32 inputs of the output's shape; AddN with
`activation: relu` reads the folded ReluGrad's r as its last input and gives ReluGrad's rule
over the sum of the others, r > 0 ? x1 + ... + xn : 0.

FLOPs: one per output element for every binary op, Neg and Scale; n-1 per element for AddN;
a folded Relu or ReluGrad one more; none for Expand (a copy).

Example:
    >>> from planner.ops import TensorType, get_op
    >>> get_op("Add").infer([TensorType((4, 1, 3)), TensorType((5, 1))], {})[0].shape
    (4, 5, 3)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from planner.ops.base import (
    BY_POSITION,
    Attr,
    Attrs,
    GradBuilder,
    OpDef,
    OpError,
    Pointwise,
    TensorType,
    elementwise_flops,
    get_op,
    low_signatures,
    register,
    require_float,
    same_as_input,
    zero_flops,
)
from planner.ops.fused_activation import (
    ACTIVATION_ATTR,
    activation,
    activation_flops,
    activation_grad,
    apply_activation,
    check_activation,
)
from planner.ops.reduce import sum_to_shape

if TYPE_CHECKING:
    from planner.ir.graph import Node


def broadcast_shapes(op: str, a: Sequence[int], b: Sequence[int]) -> tuple[int, ...]:
    """numpy's broadcast of two shapes; OpError naming both shapes when they do not fit.

    >>> broadcast_shapes("Mul", (2, 1, 3), (4, 1))
    (2, 4, 3)
    """
    rank = max(len(a), len(b))
    pa = (1,) * (rank - len(a)) + tuple(a)
    pb = (1,) * (rank - len(b)) + tuple(b)
    out = []
    for k, (da, db) in enumerate(zip(pa, pb, strict=True)):
        if da != db and 1 not in (da, db):
            raise OpError(f"{op}: shapes {list(a)} and {list(b)} do not broadcast "
                          f"(dimension {k - rank}: {da} vs {db})")
        out.append(db if da == 1 else da)
    return tuple(out)


def binary_infer(op: str, float_only: bool) -> Callable[[list[TensorType], Attrs],
                                                           list[TensorType]]:
    def infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
        x, y = ins
        if x.dtype != y.dtype:
            raise OpError(f"{op}: input dtypes differ: {x.dtype} (shape {list(x.shape)}) and "
                          f"{y.dtype} (shape {list(y.shape)})")
        if float_only:
            require_float(op, x)
        elif x.dtype == "bool":
            raise OpError(f"{op}: inputs must be numeric, got bool")
        return [TensorType(broadcast_shapes(op, x.shape, y.shape), x.dtype)]

    return infer


def _wants(g: GradBuilder, dy: str | None, x: str) -> bool:
    return dy is not None and g.needs(x)


def _sum_to(g: GradBuilder, grad: str, x: str) -> str:
    """`grad`, a value of the broadcast output's shape, summed down to input x's shape."""
    return sum_to_shape(g, grad, g.type(x).shape)


def _add_grad(g: GradBuilder, node: Node, grads: list[str | None]) -> list[str | None]:
    a, b = node.inputs
    dy = grads[0]
    if dy is not None and (g.needs(a) or g.needs(b)):
        dy = activation_grad(g, "Add", node.name, node.attrs, dy, node.outputs[0])
    return [_sum_to(g, dy, a) if _wants(g, dy, a) else None,
            _sum_to(g, dy, b) if _wants(g, dy, b) else None]


def _sub_grad(g: GradBuilder, node: Node, grads: list[str | None]) -> list[str | None]:
    a, b = node.inputs
    dy = grads[0]
    return [_sum_to(g, dy, a) if _wants(g, dy, a) else None,
            _sum_to(g, g.emit("Neg", [dy])[0], b) if _wants(g, dy, b) else None]


def _mul_grad(g: GradBuilder, node: Node, grads: list[str | None]) -> list[str | None]:
    a, b = node.inputs
    dy = grads[0]
    return [_sum_to(g, g.emit("Mul", [dy, b])[0], a) if _wants(g, dy, a) else None,
            _sum_to(g, g.emit("Mul", [dy, a])[0], b) if _wants(g, dy, b) else None]


def _div_grad(g: GradBuilder, node: Node, grads: list[str | None]) -> list[str | None]:
    # y = a / b: da = dy / b, db = -dy * a / b^2 = -(dy / b) * y; dy / b is shared.
    a, b = node.inputs
    dy = grads[0]
    if not (_wants(g, dy, a) or _wants(g, dy, b)):
        return [None, None]
    dy_over_b = g.emit("Div", [dy, b])[0]
    db = None
    if _wants(g, dy, b):
        db = _sum_to(g, g.emit("Neg", [g.emit("Mul", [dy_over_b, node.outputs[0]])[0]])[0], b)
    return [_sum_to(g, dy_over_b, a) if _wants(g, dy, a) else None, db]


F32_BINARY = "float32,float32->float32"
I64_BINARY = "int64,int64->int64"


def _binary(name: str, fn: Callable[[np.ndarray, np.ndarray], np.ndarray], gradient,
            doc: str, float_only: bool = False, pointwise: Pointwise | None = None,
            by_position: bool = False) -> OpDef:
    return register(OpDef(
        name=name, arity=2, cost_class="elementwise",
        infer=binary_infer(name, float_only),
        flops=elementwise_flops(1),
        reference=lambda xs, a: [fn(xs[0], xs[1])],
        gradient=gradient,
        doc=doc,
        pointwise=pointwise,
        channel_blocked=BY_POSITION if by_position else None,
    ))


def _add_infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    (y,) = binary_infer("Add", False)(ins, a)
    check_activation("Add", a, y)
    if activation(a) != "none" and any(t.shape != y.shape for t in ins):
        raise OpError(f"Add: a folded Relu needs both inputs of the output's shape "
                      f"{list(y.shape)}, got {list(ins[0].shape)} and {list(ins[1].shape)}")
    return [y]


def _arith(formula, int64: bool = True, low: bool = False) -> Pointwise:
    return Pointwise(formula, broadcast=True,
                     signatures=((F32_BINARY, I64_BINARY) if int64 else (F32_BINARY,))
                     + (low_signatures(F32_BINARY) if low else ()))


# Add runs in the low types (residual adds; BiasAdd is Add's kernel): precision.FOLLOW_OPS.
# Its folded Relu (module docstring) is the CPU runtime's alone: the generated kernels of
# `pointwise` refuse it.
register(OpDef(
    name="Add", arity=2, cost_class="elementwise",
    attrs=dict(ACTIVATION_ATTR),
    infer=_add_infer,
    flops=lambda ins, outs, a: outs[0].size + activation_flops(outs[0], a),
    reference=lambda xs, a: [apply_activation(np.add(xs[0], xs[1]), a)],
    gradient=_add_grad,
    doc="y = a + b, numpy broadcasting; activation none | relu (a folded Relu: y = relu(a + "
        "b), float32 inputs of y's shape).",
    pointwise=_arith(lambda m, xs, p: [xs[0] + xs[1]], low=True),
    channel_blocked=BY_POSITION,
))
_binary("Sub", np.subtract, _sub_grad, "y = a - b, numpy broadcasting.",
        pointwise=_arith(lambda m, xs, p: [xs[0] - xs[1]]), by_position=True)
_binary("Mul", np.multiply, _mul_grad, "y = a * b, numpy broadcasting.",
        pointwise=_arith(lambda m, xs, p: [xs[0] * xs[1]]), by_position=True)
_binary("Div", np.divide, _div_grad, "y = a / b, numpy broadcasting (float only).",
        float_only=True, pointwise=_arith(lambda m, xs, p: [xs[0] / xs[1]], int64=False))


# ---- AddN -------------------------------------------------------------------------------------

def _addn_infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    first = ins[0]
    for k, t in enumerate(ins[1:], start=1):
        if t != first:
            raise OpError(f"AddN: input {k} is {t.dtype} {list(t.shape)}, input 0 is "
                          f"{first.dtype} {list(first.shape)}; all inputs must match")
    check_activation("AddN", a, first)
    if activation(a) != "none" and len(ins) < 2:
        raise OpError("AddN: a folded ReluGrad reads the Relu's output r after the terms: "
                      "at least 2 inputs")
    return [first]


def _addn_reference(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    folded = activation(a) != "none"
    terms = xs[:-1] if folded else xs
    out = terms[0].copy()
    for x in terms[1:]:
        out += x
    return [get_op("ReluGrad").reference([out, xs[-1]], {})[0] if folded else out]


def _addn_flops(ins: list[TensorType], outs: list[TensorType], a: Attrs) -> int:
    terms = len(ins) - (activation(a) != "none")
    return (terms - 1) * outs[0].size + activation_flops(outs[0], a)


def _addn_pointwise(m, xs, p):
    out = xs[0]
    for x in xs[1:]:
        out = out + x
    return [out]


def _addn_grad(g: GradBuilder, node: Node, grads: list[str | None]) -> list[str | None]:
    dy = grads[0]
    if activation(node.attrs) != "none":  # the fold runs after autodiff: nothing asks
        raise OpError(f"AddN {node.name!r}: no gradient rule for a folded ReluGrad")
    return [dy if dy is not None and g.needs(x) else None for x in node.inputs]


register(OpDef(
    name="AddN",
    cost_class="elementwise", arity=None, min_inputs=1,
    attrs=dict(ACTIVATION_ATTR),
    infer=_addn_infer,
    flops=_addn_flops,
    reference=_addn_reference,
    gradient=_addn_grad,
    # summed in input order, as the reference; more inputs chain kernels over the output. A
    # folded ReluGrad is the CPU runtime's alone: the generated kernels refuse it.
    pointwise=Pointwise(_addn_pointwise,
                        signatures=("float32->float32", *low_signatures("float32->float32")),
                        arities=(2, 3, 4)),
    channel_blocked=BY_POSITION,
    doc="y = x1 + ... + xn, all of one shape and dtype (summing gradient contributions); "
        "activation none | relu (a folded ReluGrad: the Relu's output r after the terms, y = "
        "r > 0 ? x1 + ... + xn : 0, float32).",
))


# ---- unary ------------------------------------------------------------------------------------

def _numeric_same(op: str):
    def infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
        if ins[0].dtype == "bool":
            raise OpError(f"{op}: input must be numeric, got bool")
        return same_as_input(ins, a)

    return infer


def _neg_grad(g: GradBuilder, node: Node, grads: list[str | None]) -> list[str | None]:
    dy = grads[0]
    return [g.emit("Neg", [dy])[0] if dy is not None and g.needs(node.inputs[0]) else None]


def _scale_infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    require_float("Scale", ins[0])
    return same_as_input(ins, a)


def _scale_reference(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    x = xs[0]
    return [x * np.asarray(a["factor"], dtype=x.dtype)]


def _scale_grad(g: GradBuilder, node: Node, grads: list[str | None]) -> list[str | None]:
    dy = grads[0]
    if dy is None or not g.needs(node.inputs[0]):
        return [None]
    return [g.emit("Scale", [dy], {"factor": node.attrs["factor"]})[0]]


register(OpDef(
    name="Neg",
    cost_class="elementwise", arity=1,
    infer=_numeric_same("Neg"),
    flops=elementwise_flops(1),
    reference=lambda xs, a: [np.negative(xs[0])],
    gradient=_neg_grad,
    pointwise=Pointwise(lambda m, xs, p: [-xs[0]]),
    doc="y = -x.",
))

register(OpDef(
    name="Scale",
    cost_class="elementwise", arity=1, attrs={"factor": Attr("float", required=True)},
    infer=_scale_infer,
    flops=elementwise_flops(1),
    reference=_scale_reference,
    gradient=_scale_grad,
    pointwise=Pointwise(lambda m, xs, p: [xs[0] * p["factor"]],
                        params=(("factor", "float32", 1.0),)),
    doc="y = factor * x (factor a constant attribute, applied in x's dtype).",
))


# ---- Expand -----------------------------------------------------------------------------------

def _expand_infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    x, shape = ins[0], tuple(a["shape"])
    lead = len(shape) - x.rank
    if lead < 0 or any(d not in (1, shape[lead + k]) for k, d in enumerate(x.shape)):
        raise OpError(f"Expand: cannot broadcast input shape {list(x.shape)} to shape "
                      f"{list(shape)}")
    return [TensorType(shape, x.dtype)]


def _expand_grad(g: GradBuilder, node: Node, grads: list[str | None]) -> list[str | None]:
    x, dy = node.inputs[0], grads[0]
    if dy is None or not g.needs(x):
        return [None]
    return [sum_to_shape(g, dy, g.type(x).shape)]


register(OpDef(
    name="Expand",
    cost_class="elementwise", arity=1, attrs={"shape": Attr("ints", required=True)},
    infer=_expand_infer,
    flops=zero_flops,
    reference=lambda xs, a: [np.broadcast_to(xs[0], tuple(a["shape"])).copy()],
    gradient=_expand_grad,
    doc="y = x broadcast (numpy rules) to exactly `shape`.",
))
