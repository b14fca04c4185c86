"""Reductions: ReduceSum, ReduceMean, and `sum_to_shape`, the gradient of numpy broadcasting.

Both reductions take `axes` (empty = every axis; negative axes count from the end) and
`keepdims` (False drops the reduced axes, True keeps them with size 1), as numpy's
`sum(x, axis=tuple(axes), keepdims=keepdims)`.

Their gradients broadcast dy back over the reduced axes: a Reshape re-inserts the dropped axes
(skipped when they are leading, since numpy broadcasting aligns shapes on the right), then an
Expand copies along them; ReduceMean scales dy by 1/count first, on the small tensor.

Example:
    >>> import numpy as np
    >>> from planner.ops import get_op
    >>> get_op("ReduceSum").reference([np.ones((2, 3))], {"axes": [1], "keepdims": False})[0]
    array([3., 3.])
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from planner.ops.base import (
    Attr,
    Attrs,
    GradBuilder,
    OpDef,
    OpError,
    TensorType,
    register,
    require_float,
)

if TYPE_CHECKING:
    from planner.ir.graph import Node


def reduce_axes(op: str, axes: Sequence[int], rank: int) -> tuple[int, ...]:
    """Sorted non-negative axes; empty `axes` means all of them. Raises OpError on an axis out
    of range or given twice."""
    if not axes:
        return tuple(range(rank))
    out: list[int] = []
    for a in axes:
        if not -rank <= a < rank:
            raise OpError(f"{op}: axis {a} out of range for rank {rank}")
        if a % rank in out:
            raise OpError(f"{op}: axis {a} given twice in axes {list(axes)}")
        out.append(a % rank)
    return tuple(sorted(out))


def reduced_shape(shape: Sequence[int], axes: Sequence[int], keepdims: bool) -> tuple[int, ...]:
    """Shape after reducing `axes` (already normalised) of `shape`."""
    if keepdims:
        return tuple(1 if k in axes else d for k, d in enumerate(shape))
    return tuple(d for k, d in enumerate(shape) if k not in axes)


def sum_to_shape(g: GradBuilder, grad: str, shape: Sequence[int]) -> str:
    """Sum `grad`, a value broadcast from `shape`, back down to `shape`: the gradient of
    numpy broadcasting. Emits nothing when the shapes already agree.

    Leading axes that broadcasting added are summed away; axes where `shape` has 1 are summed
    keeping the axis. When only leading axes are involved one ReduceSum suffices; otherwise
    a ReduceSum with keepdims is followed by a Reshape to `shape`.
    """
    shape = tuple(shape)
    gshape = g.type(grad).shape
    if gshape == shape:
        return grad
    lead = len(gshape) - len(shape)
    expanded = [lead + k for k, d in enumerate(shape) if d == 1 and gshape[lead + k] != 1]
    axes = list(range(lead)) + expanded
    if not expanded:
        return g.emit("ReduceSum", [grad], {"axes": axes, "keepdims": False})[0]
    summed = g.emit("ReduceSum", [grad], {"axes": axes, "keepdims": True})[0]
    if g.type(summed).shape == shape:
        return summed
    return g.emit("Reshape", [summed], {"shape": list(shape)})[0]


def _infer(op: str):
    def infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
        x = ins[0]
        if op == "ReduceMean":
            require_float(op, x)
        elif x.dtype == "bool":
            raise OpError(f"{op}: input must be a numeric tensor, got bool")
        axes = reduce_axes(op, a["axes"], x.rank)
        return [TensorType(reduced_shape(x.shape, axes, a["keepdims"]), x.dtype)]

    return infer


def _reduce_sum(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    x = xs[0]
    axes = reduce_axes("ReduceSum", a["axes"], x.ndim)
    return [np.sum(x, axis=axes, keepdims=a["keepdims"], dtype=x.dtype)]


def _reduce_mean(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    x = xs[0]
    axes = reduce_axes("ReduceMean", a["axes"], x.ndim)
    return [np.mean(x, axis=axes, keepdims=a["keepdims"], dtype=x.dtype)]


def _broadcast_back(g: GradBuilder, dy: str, x_shape: tuple[int, ...], axes: tuple[int, ...],
                    keepdims: bool) -> str:
    """dy (the reduced shape) broadcast back to x_shape along `axes`."""
    leading = axes == tuple(range(len(axes)))
    if not keepdims and not leading:
        dy = g.emit("Reshape", [dy], {"shape": list(reduced_shape(x_shape, axes, True))})[0]
    if g.type(dy).shape == x_shape:
        return dy
    return g.emit("Expand", [dy], {"shape": list(x_shape)})[0]


def _reduce_sum_grad(g: GradBuilder, node: Node, grads: list[str | None]) -> list[str | None]:
    x, dy = node.inputs[0], grads[0]
    if dy is None or not g.needs(x):
        return [None]
    xs = g.type(x).shape
    axes = reduce_axes("ReduceSum", node.attrs["axes"], len(xs))
    return [_broadcast_back(g, dy, xs, axes, node.attrs["keepdims"])]


def _reduce_mean_grad(g: GradBuilder, node: Node, grads: list[str | None]) -> list[str | None]:
    x, dy = node.inputs[0], grads[0]
    if dy is None or not g.needs(x):
        return [None]
    xs = g.type(x).shape
    axes = reduce_axes("ReduceMean", node.attrs["axes"], len(xs))
    count = int(np.prod([xs[k] for k in axes], dtype=np.int64))
    scaled = g.emit("Scale", [dy], {"factor": 1.0 / max(count, 1)})[0]
    return [_broadcast_back(g, scaled, xs, axes, node.attrs["keepdims"])]


_ATTRS = {"axes": Attr("ints", []), "keepdims": Attr("bool", False)}

register(OpDef(
    name="ReduceSum",
    cost_class="reduction", arity=1, attrs=_ATTRS,
    infer=_infer("ReduceSum"),
    # one addition per input element
    flops=lambda ins, outs, a: ins[0].size,
    reference=_reduce_sum,
    gradient=_reduce_sum_grad,
    doc="y = sum of x over axes (all when empty); keepdims keeps them with size 1.",
))

register(OpDef(
    name="ReduceMean",
    cost_class="reduction", arity=1, attrs=_ATTRS,
    infer=_infer("ReduceMean"),
    # one addition per input element, one division per output element
    flops=lambda ins, outs, a: ins[0].size + outs[0].size,
    reference=_reduce_mean,
    gradient=_reduce_mean_grad,
    doc="y = mean of x over axes (all when empty); keepdims keeps them with size 1.",
))
