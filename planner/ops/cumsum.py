"""The scans: running sums and products along one axis (torch.cumsum, torch.cumprod, ONNX
CumSum), one row each.

    CumSum  [x] -> y, same shape and dtype (float, or an integer: exact, wrapping)
    y[..., i, ...] = sum of x[..., j, ...] over j <= i        (default)
                     over j < i  with exclusive (y[..., 0, ...] = 0)
                     over j >= i with reverse (j > i with both)
    CumProd [x] -> y: the same with products (1 for an empty one)

The sums and products run one element after the other along the axis, in x's dtype, as numpy's
and PyTorch's do on the CPU. CumSum's gradient is the running sum the other way: every x[j]
enters each y[i] with i >= j (default), so dx = CumSum(dy, reverse flipped, exclusive kept).
CumProd's is CumProdGrad [dy, x] -> dx, exact where x holds zeros (no division by x): along
the scan's order, dx[j] = (product of x[k], k < j) * s[j], where s[j] = dy[j] + x[j+1] s[j+1]
(inclusive; exclusive: s[j] = dy[j+1] + x[j+1] s[j+1]), one pass each way.
FLOPs: one add or multiply per element; CumProdGrad four.

Example:
    >>> import numpy as np
    >>> from planner.ops import get_op
    >>> x = np.array([1.0, 2.0, 3.0])
    >>> get_op("CumSum").reference([x], {"axis": 0, "exclusive": False, "reverse": False})[0]
    array([1., 3., 6.])
    >>> get_op("CumSum").reference([x], {"axis": 0, "exclusive": True, "reverse": True})[0]
    array([5., 3., 0.])
    >>> get_op("CumProd").reference([x], {"axis": 0, "exclusive": False, "reverse": False})[0]
    array([1., 2., 6.])
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from planner.dtypes import INTEGER_DTYPES
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


def _infer(op: str):
    def infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
        for t in ins:
            if not (op == "CumSum" and t.dtype in INTEGER_DTYPES):  # counts: exact, wrapping
                require_float(op, t)
        if ins[1:] and ins[1] != ins[0]:
            raise OpError(f"{op}: dy {list(ins[0].shape)} and x {list(ins[1].shape)} differ")
        norm_axis(op, a["axis"], ins[0].rank)
        return [ins[0]]

    return infer


def _scan(op: str, running, identity: float):
    def reference(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
        x = np.asarray(xs[0])
        if x.ndim == 0:
            return [np.full_like(x, identity) if a["exclusive"] else x.copy()]
        axis = norm_axis(op, a["axis"], x.ndim)
        if x.size == 0:  # no element to scan (and no first one to shift in exclusive mode)
            return [x.copy()]
        if a["reverse"]:
            x = np.flip(x, axis)
        y = running(x, axis=axis, dtype=x.dtype)
        if a["exclusive"]:
            # the scan of the elements before: y shifted one along the axis, the identity first
            y = np.concatenate([np.full_like(np.take(y, [0], axis=axis), identity),
                                np.take(y, range(x.shape[axis] - 1), axis=axis)], axis=axis)
        if a["reverse"]:
            y = np.flip(y, axis)
        return [np.asarray(y, order="C")]

    return reference


def _cumprod_grad(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    dy, x = (np.asarray(v) for v in xs)
    if x.ndim == 0:
        return [np.zeros_like(x) if a["exclusive"] else dy.copy()]
    axis = norm_axis("CumProdGrad", a["axis"], x.ndim)
    if x.size == 0:
        return [np.zeros_like(x)]
    if a["reverse"]:
        dy, x = np.flip(dy, axis), np.flip(x, axis)
    dy, x = np.moveaxis(dy, axis, 0), np.moveaxis(x, axis, 0)
    # the product of the elements before each one, in either mode
    before = _scan("CumProdGrad", np.cumprod, 1.0)([x], {"axis": 0, "exclusive": True,
                                                          "reverse": False})[0]
    s = np.zeros_like(x)
    acc = np.zeros_like(x[0])
    for j in range(x.shape[0] - 1, -1, -1):
        nxt = x[j + 1] * acc if j + 1 < x.shape[0] else acc
        if a["exclusive"]:
            acc = (dy[j + 1] + nxt) if j + 1 < x.shape[0] else np.zeros_like(acc)
        else:
            acc = dy[j] + nxt
        s[j] = acc
    dx = np.moveaxis(before * s, 0, axis)
    return [np.asarray(np.flip(dx, axis) if a["reverse"] else dx, order="C")]


def _gradient(g: GradBuilder, node: Node, grads: list[str | None]) -> list[str | None]:
    dy = grads[0]
    if dy is None or not g.needs(node.inputs[0]):
        return [None]
    if node.op == "CumProd":
        return [g.emit("CumProdGrad", [dy, node.inputs[0]], dict(node.attrs))[0]]
    attrs = {**node.attrs, "reverse": not node.attrs["reverse"]}
    return [g.emit("CumSum", [dy], attrs)[0]]


_ATTRS = {"axis": Attr("int", required=True), "exclusive": Attr("bool", False),
          "reverse": Attr("bool", False)}

for _name, _running, _identity, _what in (("CumSum", np.cumsum, 0.0, "sums"),
                                          ("CumProd", np.cumprod, 1.0, "products")):
    register(OpDef(
        name=_name, arity=1, cost_class="elementwise", attrs=_ATTRS,
        infer=_infer(_name), flops=elementwise_flops(1),
        reference=_scan(_name, _running, _identity), gradient=_gradient,
        doc=f"Running {_what} along axis (exclusive: of the elements before; reverse: from the "
            f"end).",
    ))

register(OpDef(
    name="CumProdGrad", arity=2, cost_class="elementwise", attrs=_ATTRS,
    infer=_infer("CumProdGrad"), flops=elementwise_flops(4), reference=_cumprod_grad,
    doc="Gradient of CumProd: [dy, x] -> dx, exact where x holds zeros.",
))
