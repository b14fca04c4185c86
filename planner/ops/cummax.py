"""CumMax: the running maximum (minimum with `minimum`) along an axis and where it was
(torch.cummax, torch.cummin).

    CumMax [x] attrs axis, minimum -> values (x's shape), indices (x's shape, int64)

As PyTorch's kernel: an element at least as large (as small) as the running value takes its
place, so among equal values the later index is given; a NaN takes the place of anything
and holds it against every number (the later NaN's index, among NaNs).

The gradient scatters dvalues back to the indices, adding where one element is the running
value of several positions (PyTorch's cummaxmin_backward): an IndexScatter-sum into zeros.
FLOPs: one comparison per element.

Example:
    >>> import numpy as np
    >>> from planner.ops import get_op
    >>> get_op("CumMax").reference([np.array([1.0, 3.0, 2.0, 3.0])],
    ...                            {"axis": 0, "minimum": False})
    [array([1., 3., 3., 3.]), array([0, 1, 1, 3])]
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from planner.ops.base import (
    Attr,
    Attrs,
    GradBuilder,
    OpDef,
    OpError,
    TensorType,
    elementwise_flops,
    norm_axis,
    register,
    require_float,
)

if TYPE_CHECKING:
    from planner.ir.graph import Node


def _infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    x = ins[0]
    require_float("CumMax", x)
    if x.rank == 0:
        raise OpError("CumMax: input must have rank >= 1, got a scalar")
    norm_axis("CumMax", a["axis"], x.rank)
    return [x, TensorType(x.shape, "int64")]


def _reference(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    x = np.asarray(xs[0])
    axis = norm_axis("CumMax", a["axis"], x.ndim)
    lines = np.moveaxis(x, axis, 0)
    values = np.empty_like(lines)
    indices = np.zeros(lines.shape, dtype=np.int64)
    if lines.shape[0] == 0:  # an empty axis: nothing held, nothing to scan
        return [x.copy(), np.zeros(x.shape, dtype=np.int64)]
    held, at = lines[0].copy(), np.zeros(lines.shape[1:], dtype=np.int64)
    for k in range(lines.shape[0]):
        v = lines[k]
        better = v <= held if a["minimum"] else v >= held
        take = np.isnan(v) | (~np.isnan(held) & better) | (k == 0)
        held, at = np.where(take, v, held), np.where(take, k, at)
        values[k], indices[k] = held, at
    return [np.moveaxis(values, 0, axis), np.moveaxis(indices, 0, axis)]


def _gradient(g: GradBuilder, node: Node, grads: list[str | None]) -> list[str | None]:
    dv = grads[0]
    if dv is None or not g.needs(node.inputs[0]):
        return [None]
    t = g.type(node.inputs[0])
    zeros = g.emit("Zeros", [], {"shape": list(t.shape), "dtype": t.dtype})[0]
    return [g.emit("IndexScatter", [zeros, node.outputs[1], dv],
                   {"axis": norm_axis("CumMax", node.attrs["axis"], t.rank),
                    "mode": "elements", "reduce": "sum"})[0]]


register(OpDef(
    name="CumMax", arity=1, cost_class="reduction",
    attrs={"axis": Attr("int", required=True), "minimum": Attr("bool", False)},
    infer=_infer, flops=elementwise_flops(1), reference=_reference, gradient=_gradient,
    doc="The running max (minimum=True: min) along axis and its int64 position; ties to the "
        "later index, NaN held (torch.cummax / cummin).",
))
