"""DepthToSpace and SpaceToDepth: moving blocks of b x b values between channels and space, as
ONNX defines them (nn.PixelShuffle / nn.PixelUnshuffle export to them, mode CRD).

    DepthToSpace [x (N, C, H, W)] -> (N, C / b^2, H b, W b)
    SpaceToDepth [x (N, C, H, W)] -> (N, C b^2, H / b, W / b)

`mode` says how a channel index splits into (block row i, block column j, channel c):
    DCR  channel (i b + j) C' + c      (ONNX's default; depth, column, row)
    CRD  channel c b^2 + i b + j       (PyTorch's PixelShuffle)
and the output (or input) position is (h b + i, w b + j). Each op is a permutation and
SpaceToDepth with the same blocksize and mode is its exact inverse, so each op's gradient is
the other one.

FLOPs: none (data movement); bytes: read and write every element once.

Example:
    >>> import numpy as np
    >>> from planner.ops import get_op
    >>> x = np.arange(4.0).reshape(1, 4, 1, 1)
    >>> get_op("DepthToSpace").reference([x], {"blocksize": 2, "mode": "DCR"})[0][0, 0]
    array([[0., 1.],
           [2., 3.]])
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
    require_rank,
    zero_flops,
)

if TYPE_CHECKING:
    from planner.ir.graph import Node

MODES = ("DCR", "CRD")
_ATTRS = {"blocksize": Attr("int", required=True), "mode": Attr("str", "DCR")}


def _check(op: str, x: TensorType, a: Attrs) -> int:
    require_rank(op, x, 4)
    b = a["blocksize"]
    if b < 1:
        raise OpError(f"{op}: blocksize must be >= 1, got {b}")
    if a["mode"] not in MODES:
        raise OpError(f"{op}: mode {a['mode']!r} is not one of {', '.join(MODES)}")
    return b


def _d2s_infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    x = ins[0]
    b = _check("DepthToSpace", x, a)
    n, c, h, w = x.shape
    if c % (b * b):
        raise OpError(f"DepthToSpace: {c} channels are not a multiple of blocksize^2 = {b * b}")
    return [TensorType((n, c // (b * b), h * b, w * b), x.dtype)]


def _s2d_infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    x = ins[0]
    b = _check("SpaceToDepth", x, a)
    n, c, h, w = x.shape
    if h % b or w % b:
        raise OpError(f"SpaceToDepth: H and W ({h}, {w}) are not multiples of blocksize {b}")
    return [TensorType((n, c * b * b, h // b, w // b), x.dtype)]


def _d2s_reference(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    x, b = xs[0], a["blocksize"]
    n, c, h, w = x.shape
    if a["mode"] == "DCR":
        y = x.reshape(n, b, b, c // (b * b), h, w).transpose(0, 3, 4, 1, 5, 2)
    else:
        y = x.reshape(n, c // (b * b), b, b, h, w).transpose(0, 1, 4, 2, 5, 3)
    return [np.ascontiguousarray(y.reshape(n, c // (b * b), h * b, w * b))]


def _s2d_reference(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    x, b = xs[0], a["blocksize"]
    n, c, h, w = x.shape
    y = x.reshape(n, c, h // b, b, w // b, b)
    y = y.transpose(0, 3, 5, 1, 2, 4) if a["mode"] == "DCR" else y.transpose(0, 1, 3, 5, 2, 4)
    return [np.ascontiguousarray(y.reshape(n, c * b * b, h // b, w // b))]


def _inverse(op: str):
    def gradient(g: GradBuilder, node: Node, grads: list[str | None]) -> list[str | None]:
        dy = grads[0]
        if dy is None or not g.needs(node.inputs[0]):
            return [None]
        return [g.emit(op, [dy], dict(node.attrs))[0]]
    return gradient


register(OpDef(
    name="DepthToSpace", arity=1, attrs=_ATTRS, cost_class="data-movement",
    infer=_d2s_infer, flops=zero_flops, reference=_d2s_reference,
    gradient=_inverse("SpaceToDepth"),
    doc="Channels to b x b spatial blocks (nn.PixelShuffle: mode CRD).",
))

register(OpDef(
    name="SpaceToDepth", arity=1, attrs=_ATTRS, cost_class="data-movement",
    infer=_s2d_infer, flops=zero_flops, reference=_s2d_reference,
    gradient=_inverse("DepthToSpace"),
    doc="b x b spatial blocks to channels (nn.PixelUnshuffle: mode CRD).",
))
