"""CumSum: running sums along one axis (torch.cumsum, ONNX CumSum).

    CumSum [x] -> y, same shape and dtype
    y[..., i, ...] = sum of x[..., j, ...] over j <= i        (default)
                     over j < i  with exclusive (y[..., 0, ...] = 0)
                     over j >= i with reverse (j > i with both)

The sums run one element after the other along the axis, in x's dtype, as numpy's and
PyTorch's do on the CPU. The gradient is the running sum the other way: every x[j] enters each
y[i] with i >= j (default), so dx = CumSum(dy, reverse flipped, exclusive kept).
FLOPs: one add per element.

Example:
    >>> import numpy as np
    >>> from planner.ops import get_op
    >>> x = np.array([1.0, 2.0, 3.0])
    >>> get_op("CumSum").reference([x], {"axis": 0, "exclusive": False, "reverse": False})[0]
    array([1., 3., 6.])
    >>> get_op("CumSum").reference([x], {"axis": 0, "exclusive": True, "reverse": True})[0]
    array([5., 3., 0.])
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from planner.ops.base import (
    Attr,
    Attrs,
    GradBuilder,
    OpDef,
    TensorType,
    elementwise_flops,
    norm_axis,
    register,
    require_float,
)

if TYPE_CHECKING:
    from planner.graph.ir import Node


def _infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    x = ins[0]
    require_float("CumSum", x)
    norm_axis("CumSum", a["axis"], x.rank)
    return [x]


def _reference(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    x = np.asarray(xs[0])
    if x.ndim == 0:
        return [np.zeros_like(x) if a["exclusive"] else x.copy()]
    axis = norm_axis("CumSum", a["axis"], x.ndim)
    if a["reverse"]:
        x = np.flip(x, axis)
    y = np.cumsum(x, axis=axis, dtype=x.dtype)
    if a["exclusive"]:
        # the sum of the elements before: y shifted one along the axis, 0 first
        y = np.concatenate([np.zeros_like(np.take(y, [0], axis=axis)),
                            np.take(y, range(x.shape[axis] - 1), axis=axis)], axis=axis)
    if a["reverse"]:
        y = np.flip(y, axis)
    return [np.ascontiguousarray(y)]


def _gradient(g: GradBuilder, node: Node, grads: list[str | None]) -> list[str | None]:
    dy = grads[0]
    if dy is None or not g.needs(node.inputs[0]):
        return [None]
    attrs = {**node.attrs, "reverse": not node.attrs["reverse"]}
    return [g.emit("CumSum", [dy], attrs)[0]]


register(OpDef(
    name="CumSum", arity=1, cost_class="elementwise",
    attrs={"axis": Attr("int", required=True), "exclusive": Attr("bool", False),
           "reverse": Attr("bool", False)},
    infer=_infer, flops=elementwise_flops(1), reference=_reference, gradient=_gradient,
    doc="Running sums along axis (exclusive: of the elements before; reverse: from the end); "
        "dx = CumSum(dy) the other way.",
))
