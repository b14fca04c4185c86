"""TopK: the k largest (or smallest) elements along one axis and where they were (torch.topk,
ONNX TopK); TopKGrad: its gradient, the scatter back into those positions.

    TopK [x] -> values (x's shape with k along axis, x's dtype), indices (same shape, int64)
    TopKGrad [dvalues, indices] -> dx (dvalues' shape with `size` along axis)

Order: the largest first (the smallest first with largest=False); equal values in index
order, the lower index first (ONNX's rule); NaN counts as greater than every number (it comes
first among the largest, last among the smallest), as in PyTorch. The output is always sorted,
which is also a valid answer where an exporter asks for none (sorted=False leaves the order
unspecified).

Each input element reaches at most one output, so the gradient is dx = dvalues at the chosen
positions and zero elsewhere (no sums: the indices of one line are distinct).
FLOPs: comparisons, about n log2(k + 1) per line of n.

Example:
    >>> import numpy as np
    >>> from planner.ops import get_op
    >>> v, i = get_op("TopK").reference([np.array([[3.0, 1.0, 4.0, 1.5]])],
    ...                                 {"k": 2, "axis": -1, "largest": True})
    >>> v, i
    (array([[4., 3.]]), array([[2, 0]]))
    >>> get_op("TopKGrad").reference([np.array([[10.0, 20.0]]), i], {"axis": -1, "size": 4})[0]
    array([[20.,  0., 10.,  0.]])
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
    require_float,
)

if TYPE_CHECKING:
    from planner.ir.graph import Node


def _with_extent(shape: tuple[int, ...], axis: int, extent: int) -> tuple[int, ...]:
    return shape[:axis] + (extent,) + shape[axis + 1:]


def _infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    x = ins[0]
    require_float("TopK", x)
    if x.rank == 0:
        raise OpError("TopK: input must have rank >= 1, got a scalar")
    axis = norm_axis("TopK", a["axis"], x.rank)
    if not 0 <= a["k"] <= x.shape[axis]:
        raise OpError(f"TopK: k = {a['k']} out of range [0, {x.shape[axis]}] for axis {axis} "
                      f"of shape {list(x.shape)}")
    shape = _with_extent(x.shape, axis, a["k"])
    return [TensorType(shape, x.dtype), TensorType(shape, "int64")]


def _order(x: np.ndarray, largest: bool) -> np.ndarray:
    """Per line of the last axis, the positions in output order (module docstring)."""
    nan = np.isnan(x)
    value = np.where(nan, 0, x)
    index = np.broadcast_to(np.arange(x.shape[-1]), x.shape)
    # np.lexsort's last key is the primary one
    keys = (index, -value, ~nan) if largest else (index, value, nan)
    return np.lexsort(keys, axis=-1)


def _reference(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    x = np.asarray(xs[0])
    axis = norm_axis("TopK", a["axis"], x.ndim)
    last = np.moveaxis(x, axis, -1)
    order = _order(last, a["largest"])[..., :a["k"]]
    values = np.take_along_axis(last, order, axis=-1)
    return [np.asarray(np.moveaxis(values, -1, axis), order="C"),
            np.asarray(np.moveaxis(order.astype(np.int64), -1, axis), order="C")]


def _flops(ins: list[TensorType], outs: list[TensorType], a: Attrs) -> int:
    return ins[0].size * max(1, math.ceil(math.log2(a["k"] + 1)))


def _gradient(g: GradBuilder, node: Node, grads: list[str | None]) -> list[str | None]:
    dv = grads[0]
    if dv is None or not g.needs(node.inputs[0]):
        return [None]
    x = g.type(node.inputs[0])
    axis = norm_axis("TopK", node.attrs["axis"], x.rank)
    dx = g.emit("TopKGrad", [dv, node.outputs[1]], {"axis": axis, "size": x.shape[axis]})
    return [dx[0]]


def _grad_infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    dv, idx = ins
    require_float("TopKGrad", dv, "dvalues")
    if idx.dtype != "int64" or idx.shape != dv.shape:
        raise OpError(f"TopKGrad: indices must be int64 of dvalues' shape {list(dv.shape)}, "
                      f"got {idx.dtype} {list(idx.shape)}")
    axis = norm_axis("TopKGrad", a["axis"], dv.rank)
    if a["size"] < dv.shape[axis]:
        raise OpError(f"TopKGrad: size {a['size']} is below k = {dv.shape[axis]}")
    return [TensorType(_with_extent(dv.shape, axis, a["size"]), dv.dtype)]


def _grad_reference(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    dv, idx = np.asarray(xs[0]), np.asarray(xs[1])
    axis = norm_axis("TopKGrad", a["axis"], dv.ndim)
    if idx.size and (idx.min() < 0 or idx.max() >= a["size"]):
        raise ValueError(f"TopKGrad: an index outside [0, {a['size']})")
    dx = np.zeros(_with_extent(dv.shape, axis, a["size"]), dtype=dv.dtype)
    np.put_along_axis(dx, idx, dv, axis=axis)
    return [dx]


register(OpDef(
    name="TopK", arity=1, cost_class="reduction",
    attrs={"k": Attr("int", required=True), "axis": Attr("int", -1),
           "largest": Attr("bool", True)},
    infer=_infer, flops=_flops, reference=_reference, gradient=_gradient,
    # the CPU kernel sorts one line's positions per thread in its scratch
    scratch=lambda ins, outs, a, threads: 8 * threads * max(
        1, ins[0].shape[norm_axis("TopK", a["axis"], ins[0].rank)]),
    doc="The k largest (largest=False: smallest) elements along axis, sorted, and their "
        "int64 positions; ties by lower index, NaN above every number.",
))

register(OpDef(
    name="TopKGrad", arity=2, cost_class="scatter", nondiff_inputs=(1,),
    attrs={"axis": Attr("int", required=True), "size": Attr("int", required=True)},
    infer=_grad_infer, flops=lambda ins, outs, a: 0, reference=_grad_reference,
    doc="dx: dvalues scattered to their TopK positions along axis (extent `size`), 0 elsewhere.",
))
