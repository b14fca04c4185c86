"""LayerNorm and LayerNormGrad: normalisation over the trailing axes, as ONNX LayerNormalization
and torch.nn.LayerNorm.

LayerNorm [x, scale, bias?] attrs axis (-1), epsilon (1e-5) -> [y, mean, var]. The statistics are
taken over axes axis..rank-1 (n elements per row), biased variance, as PyTorch:

    mean = mean(x);  var = mean((x - mean)^2);  y = (x - mean) / sqrt(var + eps) * scale + bias

scale and bias have x's trailing shape x.shape[axis:]; bias may be left out (no shift). mean and
var keep the reduced axes with size 1 (x.shape[:axis] + [1] * (rank - axis)), like ONNX's Mean.
The saved statistic is the variance, not ONNX's InvStdDev, because that is what oneDNN's layer
normalization backward reads.

LayerNormGrad [dy, x, scale, mean, var] (same attrs) -> [dx, dscale, dbias], with
xhat = (x - mean) * invstd and g = dy * scale:

    dbias  = sum over the leading axes of dy;   dscale = sum over the leading axes of dy * xhat
    dx     = invstd * (g - mean_row(g) - xhat * mean_row(g * xhat))

FLOPs per element: LayerNorm 8 (mean 1, centred square and sum 3, normalise 2, scale and shift
2); LayerNormGrad 11 (xhat 2, dbias 1, dscale 2, g 1, two row means 3, dx 2).

Example:
    >>> import numpy as np
    >>> from planner.ops import get_op
    >>> y, mean, var = get_op("LayerNorm").reference(
    ...     [np.array([[1.0, 3.0]]), np.ones(2), np.zeros(2)], {"axis": -1, "epsilon": 0.0})
    >>> y, mean, var
    (array([[-1.,  1.]]), array([[2.]]), array([[1.]]))
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
    TensorType,
    norm_axis,
    register,
    reorder_scratch,
    require_float,
)

if TYPE_CHECKING:
    from planner.ir.graph import Node

LN_ATTRS = {"axis": Attr("int", -1), "epsilon": Attr("float", 1e-5)}


def _axis(op: str, x: TensorType, a: Attrs) -> int:
    if x.rank < 1:
        raise OpError(f"{op}: input x must have rank >= 1, got a scalar")
    return norm_axis(op, a["axis"], x.rank)


def _check_trailing(op: str, x: TensorType, axis: int, named: dict[str, TensorType]) -> None:
    want = x.shape[axis:]
    for what, t in named.items():
        if t.shape != want:
            raise OpError(f"{op}: {what} must have shape {list(want)} (x {list(x.shape)} from "
                          f"axis {axis}), got {list(t.shape)}")
        if t.dtype != x.dtype:
            raise OpError(f"{op}: {what} is {t.dtype} but x is {x.dtype}")


def _stats_type(x: TensorType, axis: int) -> TensorType:
    return TensorType(x.shape[:axis] + (1,) * (x.rank - axis), x.dtype)


def _infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    x = ins[0]
    if len(ins) > 3:
        raise OpError(f"LayerNorm takes 2 or 3 inputs (x, scale, bias), got {len(ins)}")
    require_float("LayerNorm", x, "input x")
    axis = _axis("LayerNorm", x, a)
    _check_trailing("LayerNorm", x, axis, dict(zip(("scale", "bias"), ins[1:], strict=False)))
    return [x, _stats_type(x, axis), _stats_type(x, axis)]


def _grad_infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    dy, x, scale, mean, var = ins
    require_float("LayerNormGrad", x, "input x")
    axis = _axis("LayerNormGrad", x, a)
    if dy != x:
        raise OpError(f"LayerNormGrad: dy is {dy.dtype} {list(dy.shape)} but x is {x.dtype} "
                      f"{list(x.shape)}; they must match")
    _check_trailing("LayerNormGrad", x, axis, {"scale": scale})
    for what, t in (("mean", mean), ("var", var)):
        if t != _stats_type(x, axis):
            raise OpError(f"LayerNormGrad: {what} must have shape "
                          f"{list(_stats_type(x, axis).shape)}, got {list(t.shape)}")
    return [x, scale, scale]


def _row_axes(x: np.ndarray, a: Attrs) -> tuple[int, ...]:
    return tuple(range(norm_axis("LayerNorm", a["axis"], x.ndim), x.ndim))


def _reference(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    x, scale, *bias = xs
    axes = _row_axes(x, a)
    mean = x.mean(axis=axes, keepdims=True)
    xc = x - mean
    var = (xc * xc).mean(axis=axes, keepdims=True)
    y = xc / np.sqrt(var + x.dtype.type(a["epsilon"])) * scale
    if bias:
        y = y + bias[0]
    return [y, mean, var]


def _grad_reference(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    dy, x, scale, mean, var = xs
    axes = _row_axes(x, a)
    lead = tuple(range(x.ndim - len(axes)))
    invstd = 1 / np.sqrt(var + x.dtype.type(a["epsilon"]))
    xhat = (x - mean) * invstd
    g = dy * scale
    dx = invstd * (g - g.mean(axis=axes, keepdims=True)
                   - xhat * (g * xhat).mean(axis=axes, keepdims=True))
    return [dx, (dy * xhat).sum(axis=lead), dy.sum(axis=lead)]


def _gradient(g: GradBuilder, node: Node, grads: list[str | None]) -> list[str | None]:
    dy, *stat_grads = grads
    if any(s is not None for s in stat_grads):
        raise OpError("LayerNorm: no gradient rule for its mean and var outputs")
    inputs = list(node.inputs)
    wanted = [g.needs(t) for t in inputs]
    if dy is None or not any(wanted):
        return [None] * len(inputs)
    attrs = {"axis": node.attrs.get("axis", -1), "epsilon": node.attrs.get("epsilon", 1e-5)}
    outs = g.emit("LayerNormGrad", [dy, inputs[0], inputs[1], *node.outputs[1:]], attrs)
    return [d if w else None for d, w in zip(outs, wanted, strict=False)]


register(OpDef(
    name="LayerNorm", arity=None, min_inputs=2, attrs=LN_ATTRS, cost_class="reduction",
    scratch=reorder_scratch(1, 4096),
    infer=_infer,
    flops=lambda ins, outs, a: 8 * ins[0].size,
    reference=_reference,
    gradient=_gradient,
    doc="[x, scale, bias?] -> [y, mean, var]: normalise over the axes from `axis` on, then "
        "scale and shift.",
))

def column_partials(ins: list[TensorType], outs: list[TensorType], a: Attrs) -> int:
    """The CUDA kernel's partial sums of dscale and dbias (floats): rows are cut into about
    1024 / ceil(n / 32) chunks, one row of n partials each, none when one chunk writes them
    (templates/cuda/runtime/kernels/layer_norm.cu, LayerNormGrad).

    >>> x = TensorType((64, 16))
    >>> column_partials([x, x], [], {"axis": -1}), column_partials([x, x], [], {"axis": 0})
    (8192, 0)
    """
    shape = ins[1].shape
    axis = a.get("axis", -1) % len(shape)
    rows, n = math.prod(shape[:axis]), math.prod(shape[axis:])
    tiles = -(-n // 32)
    want = min(max(1, -(-1024 // max(tiles, 1))), max(rows, 1))
    chunk = max(1, -(-rows // want))
    chunks = max(1, -(-rows // chunk))
    return 2 * 4 * chunks * n if chunks > 1 else 0


register(OpDef(
    name="LayerNormGrad", arity=5, attrs=LN_ATTRS, cost_class="reduction",
    scratch=reorder_scratch(1, 4096),
    gpu_scratch=column_partials,
    infer=_grad_infer,
    flops=lambda ins, outs, a: 11 * ins[0].size,
    reference=_grad_reference,
    doc="Gradient of LayerNorm: [dy, x, scale, mean, var] -> [dx, dscale, dbias].",
))
