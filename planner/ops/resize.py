"""Resize: nearest or bilinear resampling of an NCHW image's H and W, as ONNX's Resize defines
it (nn.Upsample and F.interpolate export to it), and its gradient ResizeGrad.

    Resize [x (N, C, H, W)] -> y (N, C, sizes[0], sizes[1])

Each output coordinate o along an axis (input length L, output length O, scale s, by default
O / L) maps to an input coordinate by `coordinate_mode`:

    half_pixel          (o + 0.5) / s - 0.5
    pytorch_half_pixel  (o + 0.5) / s - 0.5, or 0 when L * s <= 1
    align_corners       o * (L - 1) / (L * s - 1), or 0 when L * s == 1
    asymmetric          o / s

`mode` "nearest" takes the input at that coordinate rounded by `nearest_mode`
(round_prefer_floor, round_prefer_ceil, floor, ceil); "linear" mixes its two neighbours
floor(x) and floor(x) + 1 by x - floor(x). Indices are clamped to [0, L - 1] (edge values), as
ONNX's reference and PyTorch do. H and W are independent, so each output is a weighted sum of
at most 2 x 2 inputs, with weights the product of each axis's: y is linear in x, and

    ResizeGrad [dy] -> dx (N, C, input_sizes...): the adjoint, every dy scattered back onto the
    inputs it was read from with the same weights.

The per-axis taps (`taps`) are the one definition of the mapping: the reference uses them; the
kernels compute the same formulas in double precision (templates/common/resize.h).

FLOPs per output element: nearest 1 (a copy), linear 7 (4 products, 3 sums); ResizeGrad the
same per dy element.

Example:
    >>> import numpy as np
    >>> from planner.ops import get_op
    >>> op = get_op("Resize")
    >>> x = np.arange(4.0).reshape(1, 1, 2, 2)
    >>> op.reference([x], op.normalize_attrs({"sizes": [4, 4]}))[0][0, 0, 0]
    array([0., 0., 1., 1.])
    >>> taps(2, 4, 2.0, "linear", "align_corners", "round_prefer_floor")[2].round(3).tolist()
    [0.0, 0.333, 0.667, 0.0]
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
    register,
    require_float,
    require_rank,
)

if TYPE_CHECKING:
    from planner.ir.graph import Node

MODES = ("nearest", "linear")
COORDINATE_MODES = ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric")
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


def source_coordinate(o: int, length: int, scale: float, coordinate_mode: str) -> float:
    """The input coordinate output coordinate `o` reads (see the module doc); the output's
    length in these formulas is length * scale, as ONNX's (the integer output size when
    sizes were given, since then scale = O / L)."""
    resized = length * scale
    if coordinate_mode == "align_corners":
        return 0.0 if resized == 1 else o * (length - 1) / (resized - 1)
    if coordinate_mode == "asymmetric":
        return o / scale
    if coordinate_mode == "pytorch_half_pixel" and resized <= 1:
        return 0.0
    return (o + 0.5) / scale - 0.5


def _nearest(x: float, nearest_mode: str) -> int:
    if nearest_mode == "floor":
        return math.floor(x)
    if nearest_mode == "ceil":
        return math.ceil(x)
    if x == math.floor(x) + 0.5:  # a tie
        return math.floor(x) if nearest_mode == "round_prefer_floor" else math.ceil(x)
    return round(x)


def taps(length: int, out: int, scale: float, mode: str, coordinate_mode: str,
         nearest_mode: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(i0, i1, w1) per output coordinate of one axis: output o is
    x[i0[o]] * (1 - w1[o]) + x[i1[o]] * w1[o] (nearest: i1 == i0, w1 == 0)."""
    i0, i1, w1 = np.zeros(out, np.int64), np.zeros(out, np.int64), np.zeros(out)
    for o in range(out):
        x = source_coordinate(o, length, scale, coordinate_mode)
        if mode == "nearest":
            i0[o] = i1[o] = min(max(_nearest(x, nearest_mode), 0), length - 1)
            continue
        base = math.floor(x)
        i0[o] = min(max(base, 0), length - 1)
        i1[o] = min(max(base + 1, 0), length - 1)
        w1[o] = x - base
    return i0, i1, w1


def _scales(a: Attrs, ins: tuple[int, int], outs: tuple[int, int]) -> list[float]:
    if a["scales"]:
        return list(a["scales"])
    return [o / i for i, o in zip(ins, outs, strict=True)]


def _check(op: str, x: TensorType, a: Attrs, sizes_key: str) -> None:
    require_float(op, x)
    require_rank(op, x, 4)
    for key, allowed in (("mode", MODES), ("coordinate_mode", COORDINATE_MODES),
                         ("nearest_mode", NEAREST_MODES)):
        if a[key] not in allowed:
            raise OpError(f"{op}: {key} {a[key]!r} is not one of {', '.join(allowed)}")
    for key in ("sizes", sizes_key):
        if len(a[key]) != 2 or any(d < 1 for d in a[key]):
            raise OpError(f"{op}: {key} must be 2 lengths >= 1 (H, W), got {a[key]}")
    if a["scales"] and (len(a["scales"]) != 2 or any(s <= 0 for s in a["scales"])):
        raise OpError(f"{op}: scales must be 2 numbers > 0 (H, W), got {a['scales']}")


def _infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    x = ins[0]
    _check("Resize", x, a, "sizes")
    if 0 in x.shape[2:]:
        raise OpError(f"Resize: input {list(x.shape)} has an empty axis to resample")
    return [TensorType(x.shape[:2] + tuple(a["sizes"]), x.dtype)]


def _grad_infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    dy = ins[0]
    _check("ResizeGrad", dy, a, "input_sizes")
    if tuple(dy.shape[2:]) != tuple(a["sizes"]):
        raise OpError(f"ResizeGrad: dy {list(dy.shape)} does not end in sizes {a['sizes']}")
    return [TensorType(dy.shape[:2] + tuple(a["input_sizes"]), dy.dtype)]


def _axis_taps(a: Attrs, ins: tuple[int, int]) -> list[tuple[np.ndarray, ...]]:
    outs = tuple(a["sizes"])
    scales = _scales(a, ins, outs)
    return [taps(ins[k], outs[k], scales[k], a["mode"], a["coordinate_mode"], a["nearest_mode"])
            for k in range(2)]


def _reference(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    x = xs[0]
    (h0, h1, hw), (w0, w1, ww) = _axis_taps(a, x.shape[2:])
    hw, ww = hw.astype(x.dtype), ww.astype(x.dtype)
    rows = x[:, :, h0, :] * (1 - hw)[:, None] + x[:, :, h1, :] * hw[:, None]
    return [(rows[..., w0] * (1 - ww) + rows[..., w1] * ww).astype(x.dtype)]


def _grad_reference(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    dy = xs[0]
    ih, iw = a["input_sizes"]
    (h0, h1, hw), (w0, w1, ww) = _axis_taps(a, (ih, iw))
    hw, ww = hw.astype(dy.dtype), ww.astype(dy.dtype)
    cols = np.zeros(dy.shape[:3] + (iw,), dy.dtype)
    np.add.at(cols, (slice(None), slice(None), slice(None), w0), dy * (1 - ww))
    np.add.at(cols, (slice(None), slice(None), slice(None), w1), dy * ww)
    dx = np.zeros(dy.shape[:2] + (ih, iw), dy.dtype)
    np.add.at(dx, (slice(None), slice(None), h0), cols * (1 - hw)[:, None])
    np.add.at(dx, (slice(None), slice(None), h1), cols * hw[:, None])
    return [dx]


def _gradient(g: GradBuilder, node: Node, grads: list[str | None]) -> list[str | None]:
    dy = grads[0]
    if dy is None or not g.needs(node.inputs[0]):
        return [None]
    attrs = {**node.attrs, "input_sizes": list(g.type(node.inputs[0]).shape[2:])}
    return [g.emit("ResizeGrad", [dy], attrs)[0]]


def _kernel_scales(ins: tuple[int, int], a: Attrs) -> Attrs:
    """The per-axis scales as two floats (kernels read no float lists)."""
    scale_h, scale_w = _scales(a, ins, tuple(a["sizes"]))
    return {"scale_h": scale_h, "scale_w": scale_w}


_ATTRS = {"sizes": Attr("ints", required=True), "scales": Attr("floats", []),
          "mode": Attr("str", "nearest"), "coordinate_mode": Attr("str", "half_pixel"),
          "nearest_mode": Attr("str", "round_prefer_floor")}

register(OpDef(
    name="Resize", arity=1, attrs=_ATTRS, cost_class="data-movement",
    infer=_infer,
    flops=lambda ins, outs, a: (7 if a["mode"] == "linear" else 1) * outs[0].size,
    reference=_reference,
    gradient=_gradient,
    kernel_attrs=lambda ins, a: _kernel_scales(ins[0].shape[2:], a),
    doc="Nearest or bilinear resampling of NCHW's H and W to `sizes`, as ONNX Resize.",
))

register(OpDef(
    name="ResizeGrad", arity=1, attrs={**_ATTRS, "input_sizes": Attr("ints", required=True)},
    cost_class="data-movement",
    infer=_grad_infer,
    flops=lambda ins, outs, a: (7 if a["mode"] == "linear" else 1) * ins[0].size,
    reference=_grad_reference,
    kernel_attrs=lambda ins, a: _kernel_scales(tuple(a["input_sizes"]), a),
    doc="dx of Resize: each dy scattered onto the inputs it read, with the same weights.",
))
