"""Rules for element-wise math and activations: Add, Sub, Mul, Div, Pow, Sum, Max, Min, the
unary ops, LeakyRelu, Elu, Selu, Clip, PRelu, Softmax, LogSoftmax.

Broadcasting: from opset 7 ONNX broadcasts as numpy does, like the planner's ops. Before that,
a binary op with broadcast=1 and an `axis` aligns B's dims with A's starting at that axis; B is
reshaped with trailing 1s so that numpy broadcasting gives the same result. Likewise PRelu
before opset 7 applies a (C,) slope per channel (axis 1).

Softmax and LogSoftmax before opset 13 coerce the input to 2-D at `axis` (default 1) and
normalize over everything after it: a Flatten, the op over the last axis, and a Reshape back;
when `axis` is the last one that is the plain op.
"""

from __future__ import annotations

import math

from planner.importers.kit import Const, Unsupported
from planner.importers.onnx.context import NodeCtx, Value, rule
from planner.importers.onnx.errors import OnnxImportError

# ONNX op -> planner op, for ops that map one to one with no attributes.
UNARY = {"Relu": "Relu", "Tanh": "Tanh", "Sigmoid": "Sigmoid", "Neg": "Neg", "Exp": "Exp",
         "Log": "Log", "Sqrt": "Sqrt", "Abs": "Abs", "Sign": "Sign", "Softplus": "Softplus"}

# Selu's constants as ONNX spells its defaults (float32 values).
ONNX_SELU_ALPHA = 1.67326319217681884765625
ONNX_SELU_GAMMA = 1.05070102214813232421875


def legacy_broadcast(n: NodeCtx, a: Value, b: Value) -> Value:
    """B reshaped so that numpy broadcasting matches opset < 7 `broadcast=1, axis=k`."""
    if n.opset >= 7 or not n.attr("broadcast", 0) or n.attr("axis") is None:
        return b
    a_rank, b_shape = len(n.type_of(a).shape), list(n.type_of(b).shape)
    axis = int(n.attr("axis")) % max(a_rank, 1)
    trailing = a_rank - axis - len(b_shape)
    if trailing < 0:
        raise OnnxImportError(f"node {n.label!r} ({n.op_type}): B of shape {b_shape} does not "
                              f"fit A's rank {a_rank} at axis {axis}")
    if trailing == 0:
        return b
    return n.emit1("Reshape", [b], {"shape": b_shape + [1] * trailing})


@rule("Add", "Sub", "Mul", "Div", "Pow")
def binary(n: NodeCtx) -> None:
    a = n.value(0)
    b = legacy_broadcast(n, a, n.value(1))
    if n.op_type == "Pow" and n.type_of(b).dtype != n.type_of(a).dtype:
        # Pow's exponent may have its own type (opset 12+); a constant one is cast to the
        # base's, as the planner's Pow computes in one dtype.
        if not isinstance(b, Const):
            raise Unsupported("Pow (computed exponent of another dtype)")
        dtype = n.type_of(a).dtype
        b = Const.of(n.imp.fresh(f"{b.name}:{dtype}"), b.value().astype(dtype),
                     origin="constant")
    n.emit1(n.op_type, [a, b], output=0)


@rule("Sum", "Max", "Min")
def variadic(n: NodeCtx) -> None:
    values = [n.value(k) for k in range(n.n_inputs)]
    if len(values) == 1:
        n.bind(0, values[0])
        return
    types = {n.type_of(v) for v in values}
    if n.op_type == "Sum" and len(types) == 1:
        n.emit1("AddN", values, output=0)
        return
    # Shapes that differ broadcast (opset 8+): a chain of binary ops.
    op = {"Sum": "Add", "Max": "Max", "Min": "Min"}[n.op_type]
    acc = values[0]
    for k, v in enumerate(values[1:], start=1):
        acc = n.emit1(op, [acc, v], output=0 if k == len(values) - 1 else None)


@rule(*UNARY)
def unary(n: NodeCtx) -> None:
    n.emit1(UNARY[n.op_type], [n.value(0)], output=0)


@rule("LeakyRelu")
def leaky_relu(n: NodeCtx) -> None:
    n.emit1("LeakyRelu", [n.value(0)], {"alpha": float(n.attr("alpha", 0.01))}, output=0)


@rule("Elu")
def elu(n: NodeCtx) -> None:
    n.emit1("Elu", [n.value(0)], {"alpha": float(n.attr("alpha", 1.0))}, output=0)


@rule("Selu")
def selu(n: NodeCtx) -> None:
    attrs = {"alpha": float(n.attr("alpha", ONNX_SELU_ALPHA)),
             "gamma": float(n.attr("gamma", ONNX_SELU_GAMMA))}
    n.emit1("Selu", [n.value(0)], attrs, output=0)


@rule("Clip")
def clip(n: NodeCtx) -> None:
    if n.opset < 11:
        low, high = n.attr("min"), n.attr("max")
    else:
        low = _scalar(n, 1, "min") if n.has_input(1) else None
        high = _scalar(n, 2, "max") if n.has_input(2) else None
    bounds = {"min": _finite(low), "max": _finite(high)}
    n.emit1("Clip", [n.value(0)], bounds, output=0)


def _scalar(n: NodeCtx, k: int, what: str) -> float:
    array = n.const_array(k, what)
    if array.size != 1:
        raise OnnxImportError(f"node {n.label!r} (Clip): {what} must be a scalar, got shape "
                              f"{list(array.shape)}")
    return float(array.reshape(()))


def _finite(bound: float | None) -> float | None:
    """An infinite bound is no bound (graph JSON holds no infinities)."""
    return None if bound is None or math.isinf(bound) else float(bound)


@rule("PRelu")
def prelu(n: NodeCtx) -> None:
    x, slope = n.value(0), n.value(1)
    x_shape, slope_shape = n.shape(0), n.shape(1)
    if (n.opset < 7 and len(x_shape) > 2 and len(slope_shape) == 1
            and slope_shape[0] == x_shape[1] and slope_shape[0] != 1):
        slope = n.emit1("Reshape", [slope], {"shape": [slope_shape[0]] + [1] * (len(x_shape) - 2)})
    n.emit1("PRelu", [x, slope], output=0)


@rule("Softmax", "LogSoftmax")
def softmax(n: NodeCtx) -> None:
    x, shape = n.value(0), n.shape(0)
    rank = len(shape)
    if rank == 0:
        raise OnnxImportError(f"node {n.label!r} ({n.op_type}): input is a scalar")
    axis = int(n.attr("axis", 1 if n.opset < 13 else -1))
    if not -rank <= axis < rank:
        raise OnnxImportError(f"node {n.label!r} ({n.op_type}): axis {axis} out of range for "
                              f"rank {rank}")
    axis %= rank
    if n.opset >= 13 or axis == rank - 1:
        n.emit1(n.op_type, [x], {"axis": axis}, output=0)
        return
    # Opset < 13: normalize over all of axis..end at once, as over one flattened axis.
    flat = n.emit1("Flatten", [x], {"axis": axis})
    y = n.emit1(n.op_type, [flat], {"axis": -1})
    n.emit1("Reshape", [y], {"shape": list(shape)}, output=0)
