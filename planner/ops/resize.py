"""Resize: nearest or bilinear resampling of an NCHW image's H and W, as ONNX's Resize defines
it (nn.Upsample and F.interpolate export to it), and its gradient ResizeGrad.

    Resize [x (N, C, H, W)] -> y (N, C, sizes[0], sizes[1])

Each output coordinate o along an axis (input length L, output length O, scale s, by default
O / L) maps to an input coordinate x by `coordinate_mode`:

    half_pixel          (o + 0.5) / s - 0.5
    pytorch_half_pixel  (o + 0.5) / s - 0.5, or 0 when L * s <= 1
    align_corners       o * (L - 1) / (L * s - 1), or 0 when L * s == 1
    asymmetric          o / s

in one of two arithmetics, since the last bit of x decides which input a nearest output reads
and whether a linear weight is exactly 0 (an infinity times 0 is NaN):
- PyTorch's mappings (`pytorch_mapping`: nearest asymmetric floor, linear half_pixel and
  align_corners, what the torch importer writes) as PyTorch computes them, in the data's
  precision (float32 for the kernels): x = r * o, or r * (o + 0.5) - 0.5 rounded once (its
  fused multiply-add), with r = L / O (or 1 / s; align_corners (L - 1) / (O - 1)) rounded to
  float32 (`ratio`); and an axis whose length is unchanged (O == L) reads x[o] (linear:
  x[o] * 1 + x[o] * 0) whatever the scale, PyTorch's copy;
- the others, ONNX's alone, as ONNX's reference computes the formulas above, in double.

`mode` "nearest" takes the one input at that coordinate rounded by `nearest_mode`
(round_prefer_floor, round_prefer_ceil, floor, ceil); "linear" mixes its two neighbours
floor(x) and floor(x) + 1 by x - floor(x), the coordinate first raised to 0 (PyTorch's and ONNX
Runtime's clamp: x = -0.25 reads x[0] * 1 + x[1] * 0, not x[0] twice). Indices are clamped to
[0, L - 1] (edge values), as ONNX's reference and PyTorch do. H and W are independent, so
each output is a weighted sum of at most 2 x 2 inputs, with weights the product of each axis's:
y is linear in x, and

    ResizeGrad [dy] -> dx (N, C, input_sizes...): the adjoint, every dy scattered back onto the
    inputs it was read from with the same weights.

Non-finite values follow PyTorch (F.interpolate and its backward): nearest reads (and scatters
onto) its one tap only, so an infinity stays an infinity; linear multiplies all 2 x 2 taps by
their weights, zero weights included, so an infinity on a zero-weight tap (the clamped edges,
an integral coordinate, an unresized axis) gives NaN, as PyTorch's upsample_bilinear2d does
forward and backward.

The per-axis taps (`taps`) are the one definition of the mapping: the reference uses them; the
kernels compute the same formulas, in the same arithmetic, from the ratios and scales this
module hands them (templates/common/resize.h).

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
from fractions import Fraction
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


def pytorch_mapping(mode: str, coordinate_mode: str, nearest_mode: str) -> bool:
    """Whether the mapping is one of PyTorch's (the torch importer's): nearest is asymmetric
    floor, bilinear half_pixel or align_corners. Those are computed in PyTorch's arithmetic;
    the others are ONNX's alone, computed as its reference computes them."""
    if mode == "nearest":
        return coordinate_mode == "asymmetric" and nearest_mode == "floor"
    return coordinate_mode in ("half_pixel", "align_corners")


def ratio(length: int, out: int, scale: float | None, coordinate_mode: str,
          dtype: type = np.float32) -> float:
    """A PyTorch mapping's sampling ratio r (see the module doc) as PyTorch computes it for
    data of `dtype` (its float32 arithmetic for float32, double for float64): with sizes (scale
    None) (L - 1) / (O - 1) (align_corners; 0 when O == 1) or L / O divided in `dtype`; with a
    scale, 1 / s (align_corners: (L - 1) / (L * s - 1)) in double, then rounded to `dtype`."""
    resized = out if scale is None else length * scale
    if coordinate_mode == "align_corners":
        if resized == 1:
            return 0.0
        if scale is None:
            return float(dtype(length - 1) / dtype(out - 1))
        return float(dtype((length - 1) / (resized - 1)))
    if scale is None:
        return float(dtype(length) / dtype(out))
    return float(dtype(1 / scale))


def source_coordinate(o: int, r: float, coordinate_mode: str, dtype: type = np.float32) -> float:
    """A PyTorch mapping's input coordinate for output coordinate `o`, from the axis' `ratio`
    r, as PyTorch computes it in `dtype`: r * o, or r * (o + 0.5) - 0.5 rounded once (its fused
    multiply-add: for float32 the product and the 0.5 are exact in double; for float64, in
    fractions)."""
    if coordinate_mode in ("align_corners", "asymmetric"):
        return float(dtype(r) * dtype(o))
    if dtype == np.float32:
        return float(np.float32(r * (o + 0.5) - 0.5))
    return float(Fraction(r) * Fraction(2 * o + 1, 2) - Fraction(1, 2))


def onnx_coordinate(o: int, length: int, scale: float, coordinate_mode: str) -> float:
    """An ONNX-only mapping's input coordinate for output coordinate `o`, in double as ONNX's
    reference computes it (scale s = O / L when sizes were given)."""
    resized = length * scale
    if coordinate_mode == "align_corners":
        return 0.0 if resized == 1 else o * (length - 1) / (resized - 1)
    if coordinate_mode == "asymmetric":
        return o / scale
    if coordinate_mode == "pytorch_half_pixel" and resized <= 1:
        return 0.0
    return (o + 0.5) / scale - 0.5


def _nearest(x: float, nearest_mode: str) -> int:
    base = math.floor(x)
    if nearest_mode == "floor":
        return base
    if nearest_mode == "ceil":
        return math.ceil(x)
    if x - base == 0.5:  # a tie
        return base if nearest_mode == "round_prefer_floor" else base + 1
    return base if x - base < 0.5 else base + 1


def taps(length: int, out: int, scale: float | None, mode: str, coordinate_mode: str,
         nearest_mode: str, dtype: type = np.float32) -> tuple[np.ndarray, ...]:
    """(i0, i1, w1) per output coordinate of one axis (`scale` None: the sizes' ratio), a
    PyTorch mapping in the arithmetic of data of `dtype` (float32: the kernels'): linear output
    o is x[i0[o]] * (1 - w1[o]) + x[i1[o]] * w1[o]; nearest reads x[i0[o]] alone (i1 == i0,
    w1 == 0, which the reference and kernels never multiply: inf * 0 would be NaN)."""
    i0, i1, w1 = np.zeros(out, np.int64), np.zeros(out, np.int64), np.zeros(out)
    pytorch = pytorch_mapping(mode, coordinate_mode, nearest_mode)
    if pytorch and out == length:  # PyTorch copies an unresized axis, whatever the scale
        i0[:] = i1[:] = np.arange(out)  # (linear: x[o] * 1 + x[o] * 0)
        return i0, i1, w1
    r = ratio(length, out, scale, coordinate_mode, dtype)
    for o in range(out):
        x = (source_coordinate(o, r, coordinate_mode, dtype) if pytorch else
             onnx_coordinate(o, length, out / length if scale is None else scale,
                             coordinate_mode))
        if mode == "nearest":
            i0[o] = i1[o] = min(max(_nearest(x, nearest_mode), 0), length - 1)
            continue
        # PyTorch's (and ONNX Runtime's) clamps: x raised to 0 (x = -0.25 reads
        # x[0] * 1 + x[1] * 0, and inf * 0 is NaN), i0 lowered to L - 1, w1 kept in [0, 1]
        x = max(x, 0.0)
        i0[o] = min(math.floor(x), length - 1)
        i1[o] = min(i0[o] + 1, length - 1)
        w1[o] = min(max(x - i0[o], 0.0), 1.0)
    return i0, i1, w1


def _scales(a: Attrs) -> list[float | None]:
    return list(a["scales"]) if a["scales"] else [None, None]


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


def _axis_taps(a: Attrs, ins: tuple[int, int], dtype) -> list[tuple[np.ndarray, ...]]:
    outs, scales = tuple(a["sizes"]), _scales(a)
    return [taps(ins[k], outs[k], scales[k], a["mode"], a["coordinate_mode"], a["nearest_mode"],
                 np.float64 if dtype == np.float64 else np.float32) for k in range(2)]


def _reference(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    x = xs[0]
    (h0, h1, hw), (w0, w1, ww) = _axis_taps(a, x.shape[2:], x.dtype)
    if a["mode"] == "nearest":  # one tap, as PyTorch: x * 1 + x * 0 would make inf NaN
        return [np.ascontiguousarray(x[:, :, h0][..., w0])]
    hw, ww = hw.astype(x.dtype), ww.astype(x.dtype)
    rows = x[:, :, h0, :] * (1 - hw)[:, None] + x[:, :, h1, :] * hw[:, None]
    return [(rows[..., w0] * (1 - ww) + rows[..., w1] * ww).astype(x.dtype)]


def _grad_reference(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    dy = xs[0]
    ih, iw = a["input_sizes"]
    (h0, h1, hw), (w0, w1, ww) = _axis_taps(a, (ih, iw), dy.dtype)
    cols = np.zeros(dy.shape[:3] + (iw,), dy.dtype)
    dx = np.zeros(dy.shape[:2] + (ih, iw), dy.dtype)
    if a["mode"] == "nearest":  # each dy added once onto its one tap, as PyTorch
        np.add.at(cols, (slice(None), slice(None), slice(None), w0), dy)
        np.add.at(dx, (slice(None), slice(None), h0), cols)
        return [dx]
    # linear: every tap's product on its own, zero weights included (PyTorch's NaN of inf * 0)
    hw, ww = hw.astype(dy.dtype), ww.astype(dy.dtype)
    np.add.at(cols, (slice(None), slice(None), slice(None), w0), dy * (1 - ww))
    np.add.at(cols, (slice(None), slice(None), slice(None), w1), dy * ww)
    np.add.at(dx, (slice(None), slice(None), h0), cols * (1 - hw)[:, None])
    np.add.at(dx, (slice(None), slice(None), h1), cols * hw[:, None])
    return [dx]


def _gradient(g: GradBuilder, node: Node, grads: list[str | None]) -> list[str | None]:
    dy = grads[0]
    if dy is None or not g.needs(node.inputs[0]):
        return [None]
    attrs = {**node.attrs, "input_sizes": list(g.type(node.inputs[0]).shape[2:])}
    return [g.emit("ResizeGrad", [dy], attrs)[0]]


def _kernel_ratios(ins: tuple[int, int], a: Attrs) -> Attrs:
    """Per axis, the float32 `ratio` (a PyTorch mapping's) and the scale (an ONNX-only one's,
    O / L when sizes were given), as floats: the kernels' inputs to the coordinate arithmetic,
    so they cannot round them differently."""
    (ih, iw), (oh, ow), (sh, sw) = ins, a["sizes"], _scales(a)
    coord = a["coordinate_mode"]
    return {"ratio_h": ratio(ih, oh, sh, coord), "ratio_w": ratio(iw, ow, sw, coord),
            "scale_h": oh / ih if sh is None else sh, "scale_w": ow / iw if sw is None else sw}


_ATTRS = {"sizes": Attr("ints", required=True), "scales": Attr("floats", []),
          "mode": Attr("str", "nearest"), "coordinate_mode": Attr("str", "half_pixel"),
          "nearest_mode": Attr("str", "round_prefer_floor")}

register(OpDef(
    name="Resize", arity=1, attrs=_ATTRS, cost_class="data-movement",
    infer=_infer,
    flops=lambda ins, outs, a: (7 if a["mode"] == "linear" else 1) * outs[0].size,
    reference=_reference,
    gradient=_gradient,
    kernel_attrs=lambda ins, a: _kernel_ratios(ins[0].shape[2:], a),
    doc="Nearest or bilinear resampling of NCHW's H and W to `sizes`, as ONNX Resize.",
))

register(OpDef(
    name="ResizeGrad", arity=1, attrs={**_ATTRS, "input_sizes": Attr("ints", required=True)},
    cost_class="data-movement",
    infer=_grad_infer,
    flops=lambda ins, outs, a: (7 if a["mode"] == "linear" else 1) * ins[0].size,
    reference=_grad_reference,
    kernel_attrs=lambda ins, a: _kernel_ratios(tuple(a["input_sizes"]), a),
    doc="dx of Resize: each dy scattered onto the inputs it read, with the same weights.",
))
