"""Pad and its gradient PadGrad.

Pad [x] attrs pads (required ints: the amount added before each axis, then after each axis,
as ONNX lays them out; on a 2-D tensor that is [top, left, bottom, right]), mode="constant"
("constant" fills with `value`, "reflect" mirrors without repeating the edge, "edge" repeats
the edge: numpy's np.pad modes of those names, and ONNX's), value=0.0.

PadGrad [dy] attrs = Pad's + input_shape -> dx: every element of dy is added to the input
element it was copied from (padding by a constant copies nothing, so that part of dy is
dropped). Per axis, np.pad applied to the index range 0..n-1 tells which input index each
output position came from; the axes are independent, so dx folds them one at a time.

FLOPs: Pad 0 (a copy); PadGrad 1 per element of dy (an add).

Example:
    >>> import numpy as np
    >>> from planner.ops import get_op
    >>> get_op("Pad").reference([np.array([1.0, 2.0, 3.0])],
    ...                         {"pads": [2, 1], "mode": "reflect", "value": 0.0})[0]
    array([3., 2., 1., 2., 3., 2.])
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
    register,
    zero_flops,
)

if TYPE_CHECKING:
    from planner.ir.graph import Node

MODES = ("constant", "reflect", "edge")

PAD_ATTRS = {
    "pads": Attr("ints", required=True),
    "mode": Attr("str", "constant"),
    "value": Attr("float", 0.0),
}


def _widths(op: str, shape: tuple[int, ...], a: Attrs) -> list[tuple[int, int]]:
    """Per axis (before, after); OpError naming the field when pads or mode do not fit."""
    pads, mode, rank = a["pads"], a["mode"], len(shape)
    if mode not in MODES:
        raise OpError(f"{op}: mode {mode!r} is not one of {list(MODES)}")
    if len(pads) != 2 * rank:
        raise OpError(f"{op}: pads {pads} must hold 2 * rank = {2 * rank} values for input "
                      f"shape {list(shape)}")
    if any(p < 0 for p in pads):
        raise OpError(f"{op}: pads {pads} must be >= 0 (cropping is a Slice)")
    widths = list(zip(pads[:rank], pads[rank:], strict=True))
    for axis, ((before, after), n) in enumerate(zip(widths, shape, strict=True)):
        if mode == "reflect" and (before or after) and max(before, after) > n - 1:
            raise OpError(f"{op}: reflect padding of {max(before, after)} on axis {axis} needs "
                          f"a dimension larger than that, got {n}")
        if mode == "edge" and (before or after) and n == 0:
            raise OpError(f"{op}: edge padding of an empty axis {axis}")
    return widths


def _pad_infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    x = ins[0]
    widths = _widths("Pad", x.shape, a)
    return [TensorType(tuple(n + b + e for n, (b, e) in zip(x.shape, widths, strict=True)),
                       x.dtype)]


def _pad_reference(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    x = xs[0]
    widths = _widths("Pad", x.shape, a)
    if a["mode"] == "constant":
        return [np.pad(x, widths, mode="constant",
                       constant_values=np.asarray(a["value"], dtype=x.dtype))]
    return [np.pad(x, widths, mode=a["mode"])]


def _pad_gradient(g: GradBuilder, node: Node, grads: list[str | None]) -> list[str | None]:
    dy = grads[0]
    if dy is None or not g.needs(node.inputs[0]):
        return [None]
    attrs = {**node.attrs, "input_shape": list(g.type(node.inputs[0]).shape)}
    return [g.emit("PadGrad", [dy], attrs)[0]]


def _grad_infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    dy, shape = ins[0], tuple(a["input_shape"])
    padded = _pad_infer([TensorType(shape, dy.dtype)], a)[0]
    if padded.shape != dy.shape:
        raise OpError(f"PadGrad: dy has shape {list(dy.shape)}, but padding input_shape "
                      f"{list(shape)} by {a['pads']} gives {list(padded.shape)}")
    return [TensorType(shape, dy.dtype)]


def _grad_reference(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    dx = xs[0]
    shape = tuple(a["input_shape"])
    widths = _widths("PadGrad", shape, a)
    for axis, (n, (before, after)) in enumerate(zip(shape, widths, strict=True)):
        if a["mode"] == "constant":
            source = np.pad(np.arange(n), (before, after), constant_values=-1)
        else:
            source = np.pad(np.arange(n), (before, after), mode=a["mode"])
        moved = np.moveaxis(dx, axis, 0)
        folded = np.zeros((n, *moved.shape[1:]), dtype=dx.dtype)
        copied = source >= 0
        np.add.at(folded, source[copied], moved[copied])
        dx = np.moveaxis(folded, 0, axis)
    return [dx]


register(OpDef(
    name="Pad", arity=1, attrs=PAD_ATTRS, cost_class="data-movement",
    infer=_pad_infer,
    flops=zero_flops,
    reference=_pad_reference,
    gradient=_pad_gradient,
    doc="Pad x by pads (befores then afters) with a constant, a reflection or the edge.",
))

register(OpDef(
    name="PadGrad", arity=1, cost_class="scatter",
    attrs={**PAD_ATTRS, "input_shape": Attr("ints", required=True)},
    infer=_grad_infer,
    flops=lambda ins, outs, a: ins[0].size,
    reference=_grad_reference,
    doc="Gradient of Pad: [dy] -> dx, each padded copy added back to its source element.",
))
