"""Pools over 1, 2 or 3 spatial axes, windowed or adaptive, with PyTorch's geometry and
indices: the ops torch's max_pool{1,2,3}d(return_indices), avg_pool3d, adaptive_{avg,max}_pool
{1,2,3}d of any output size, and max_unpool{1,2,3}d become.

    MaxPoolND     [x (N, C, *S)] -> [y (N, C, *O), indices (int64, N, C, *O)]
    AvgPoolND     [x] -> y;   AvgPoolNDGrad [dy] -> dx (shape input_shape)
    PoolScatter   [v (N, C, *O), indices] -> y (N, C, *spatial): zeros, then each v at its
                  index of its (n, c) plane (summed where indices repeat with accumulate, else
                  one of them); max_unpool, and MaxPoolND's gradient (accumulate)
    PoolGather    [x (N, C, *S), indices (N, C, *O)] -> y: x at each index of its plane
                  (PoolScatter's gradient; its own is PoolScatter with accumulate)

An index is the flat position in the (n, c) plane of x's spatial axes ((d * H + h) * W + w),
as torch's; one outside the plane is a run-time error naming the node (CPU) or NaN (GPU).

The window of output o along an axis of length L: adaptive (output_size given) covers
[floor(o L / O), ceil((o + 1) L / O)); otherwise the taps o s - p + t d, t < k, that fall in
[0, L), with O = floor((L + 2p - d (k - 1) - 1) / s) + 1 (ceil in ceil_mode, less a last
window that would start in the padding), and p at most k / 2 (torch's rules). The window of an
output is the product of its axes' windows. A max takes the first maximum in row-major order,
a NaN wins (the last NaN); its gradient goes to that index. AvgPoolND divides by the number of
taps in [0, L) per axis, or with count_include_pad by the window clipped to [-p, L + p).

FLOPs: one compare or add per tap per output (plus a divide for the average); the scatter and
gather one per element.

Example:
    >>> import numpy as np
    >>> from planner.ops import get_op
    >>> x = np.arange(5.0).reshape(1, 1, 5)
    >>> avg, top = get_op("AvgPoolND"), get_op("MaxPoolND")
    >>> avg.reference([x], avg.normalize_attrs({"output_size": [3]}))[0]
    array([[[0.5, 2. , 3.5]]])
    >>> y, i = top.reference([x], top.normalize_attrs({"kernel": [2], "strides": [2]}))
    >>> y, i
    (array([[[1., 3.]]]), array([[[1, 3]]]))
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import product
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

WINDOW_ATTRS: dict[str, Attr] = {
    "output_size": Attr("ints", []),  # adaptive when given
    "kernel": Attr("ints", []),
    "strides": Attr("ints", []),  # default: the kernel
    "pads": Attr("ints", []),  # one per axis, both sides
    "dilations": Attr("ints", []),
    "ceil_mode": Attr("bool", False),
    "count_include_pad": Attr("bool", True),
}


@dataclass(frozen=True)
class AxisWindow:
    """Output o's taps along one axis: first, first + step, ... (count of them) and the
    average's divisor factor."""

    first: int
    count: int
    step: int
    divisor: int


def _per_axis(op: str, a: Attrs, key: str, rank: int, default: int) -> list[int]:
    v = list(a[key]) or [default] * rank
    if len(v) == 1:
        v = v * rank
    if len(v) != rank:
        raise OpError(f"{op}: attribute {key!r} = {list(a[key])} does not fit {rank} spatial axes")
    return v


def spatial_rank(op: str, a: Attrs) -> int:
    rank = len(a["output_size"]) or len(a["kernel"])
    if not 1 <= rank <= 3:
        raise OpError(f"{op}: give 1 to 3 spatial axes in 'kernel' or 'output_size', got "
                      f"kernel {a['kernel']}, output_size {a['output_size']}")
    return rank


def axis_windows(op: str, a: Attrs, spatial: tuple[int, ...]) -> list[list[AxisWindow]]:
    """Per spatial axis, per output index, its window; OpError for a geometry torch refuses."""
    rank = len(spatial)
    if a["output_size"]:
        sizes = _per_axis(op, a, "output_size", rank, 1)
        if min(sizes) < 1 or min(spatial) < 1:
            raise OpError(f"{op}: output_size {sizes} and input {list(spatial)} must be positive")
        return [[AxisWindow(o * n // m, -(-(o + 1) * n // m) - o * n // m, 1,
                            -(-(o + 1) * n // m) - o * n // m) for o in range(m)]
                for n, m in zip(spatial, sizes, strict=True)]
    k = _per_axis(op, a, "kernel", rank, 1)
    s = _per_axis(op, a, "strides", rank, 0) if a["strides"] else k
    p = _per_axis(op, a, "pads", rank, 0)
    d = _per_axis(op, a, "dilations", rank, 1)
    if min(k) < 1 or min(s) < 1 or min(d) < 1 or min(p) < 0:
        raise OpError(f"{op}: kernel {k}, strides {s}, dilations {d} must be >= 1 and pads {p} "
                      f">= 0")
    if any(2 * pj > kj for pj, kj in zip(p, k, strict=True)):
        raise OpError(f"{op}: pads {p} must be at most half the kernel {k}")
    out = []
    for n, kj, sj, pj, dj in zip(spatial, k, s, p, d, strict=True):
        span = n + 2 * pj - dj * (kj - 1) - 1
        m = (span + (sj - 1 if a["ceil_mode"] else 0)) // sj + 1
        if a["ceil_mode"] and (m - 1) * sj >= n + pj:
            m -= 1
        if span < 0 or m < 1:
            raise OpError(f"{op}: the window ({kj} taps, dilation {dj}) does not fit an axis of "
                          f"{n} with padding {pj}")
        axis = []
        for o in range(m):
            start = o * sj - pj
            t0 = -(start // dj) if start < 0 else 0  # the first tap at or after 0
            t1 = min(kj - 1, (n - 1 - start) // dj)
            end = min(start + kj, n + pj)
            clipped = min(end, n) - max(start, 0)
            axis.append(AxisWindow(start + t0 * dj, max(0, t1 - t0 + 1), dj,
                                   end - start if a["count_include_pad"] else clipped))
        out.append(axis)
    return out


def _window_type(op: str, x: TensorType, a: Attrs) -> tuple[int, ...]:
    rank = spatial_rank(op, a)
    if x.rank != rank + 2:
        raise OpError(f"{op}: input x must be (N, C, {rank} spatial axes), got "
                      f"{list(x.shape)}")
    require_float(op, x, "input x")
    return (*x.shape[:2], *(len(w) for w in axis_windows(op, a, x.shape[2:])))


def _cells(windows: list[list[AxisWindow]]):
    """Every output position with its per-axis windows."""
    for pos in product(*(range(len(w)) for w in windows)):
        yield pos, [windows[k][o] for k, o in enumerate(pos)]


def _slices(ws: list[AxisWindow]) -> tuple[slice, ...]:
    return tuple(slice(w.first, w.first + (w.count - 1) * w.step + 1, w.step) for w in ws)


def _max_reference(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    x = np.asarray(xs[0])
    windows = axis_windows("MaxPoolND", a, x.shape[2:])
    y = np.empty((*x.shape[:2], *(len(w) for w in windows)), x.dtype)
    idx = np.empty(y.shape, np.int64)
    strides = [math.prod(x.shape[k + 1:]) for k in range(2, x.ndim)]  # in the flat index
    for pos, ws in _cells(windows):
        vals = x[(..., *_slices(ws))].reshape(*x.shape[:2], math.prod(w.count for w in ws))
        nan = np.isnan(vals)
        last_nan = vals.shape[-1] - 1 - np.argmax(nan[..., ::-1], axis=-1)
        t = np.where(nan.any(axis=-1), last_nan, np.argmax(vals, axis=-1))
        coords = np.unravel_index(t, [w.count for w in ws])
        idx[(..., *pos)] = sum((w.first + c * w.step) * st
                               for w, c, st in zip(ws, coords, strides, strict=True))
        y[(..., *pos)] = np.take_along_axis(vals, t[..., None], axis=-1)[..., 0]
    return [y, idx]


def _avg_reference(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    x = np.asarray(xs[0])
    windows = axis_windows("AvgPoolND", a, x.shape[2:])
    y = np.empty((*x.shape[:2], *(len(w) for w in windows)), x.dtype)
    for pos, ws in _cells(windows):
        total = x[(..., *_slices(ws))].sum(axis=tuple(range(2, x.ndim)))
        y[(..., *pos)] = total / x.dtype.type(math.prod(w.divisor for w in ws))
    return [y]


def _avg_grad_reference(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    dy = np.asarray(xs[0])
    shape = tuple(a["input_shape"])
    windows = axis_windows("AvgPoolNDGrad", a, shape[2:])
    dx = np.zeros(shape, dy.dtype)
    for pos, ws in _cells(windows):
        share = dy[(..., *pos)] / dy.dtype.type(math.prod(w.divisor for w in ws))
        dx[(..., *_slices(ws))] += share.reshape(*share.shape, *([1] * len(ws)))
    return [dx]


def _check_indices(op: str, idx: np.ndarray, plane: int) -> None:
    if idx.size and (idx.min() < 0 or idx.max() >= plane):
        bad = idx[(idx < 0) | (idx >= plane)][0]
        raise OpError(f"{op}: index {bad} out of range [0, {plane}) of the indices input")


def _scatter_reference(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    v, idx = (np.asarray(t) for t in xs)
    n, c = v.shape[:2]
    plane = math.prod(a["spatial"])
    _check_indices("PoolScatter", idx, plane)
    y = np.zeros((n * c, plane), v.dtype)
    rows = np.repeat(np.arange(n * c), math.prod(v.shape[2:]))
    if a["accumulate"]:
        np.add.at(y, (rows, idx.reshape(-1)), v.reshape(-1))
    else:
        y[rows, idx.reshape(-1)] = v.reshape(-1)
    return [y.reshape(n, c, *a["spatial"])]


def _gather_reference(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    x, idx = (np.asarray(t) for t in xs)
    plane = math.prod(x.shape[2:])
    _check_indices("PoolGather", idx, plane)
    flat = x.reshape(*x.shape[:2], plane)
    return [np.take_along_axis(flat, idx.reshape(*idx.shape[:2], math.prod(idx.shape[2:])), axis=-1)
            .reshape(idx.shape)]


# ---- shapes ----------------------------------------------------------------------------------

def _max_infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    shape = _window_type("MaxPoolND", ins[0], a)
    return [TensorType(shape, ins[0].dtype), TensorType(shape, "int64")]


def _avg_grad_infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    x = TensorType(tuple(a["input_shape"]), ins[0].dtype)
    if x.rank < 3 or min(x.shape[2:]) < 1:  # an empty batch or channel axis is a no-op
        raise OpError(f"AvgPoolNDGrad: input_shape {list(x.shape)} must be (N, C, 1 to 3 "
                      "positive spatial sizes)")
    want = _window_type("AvgPoolNDGrad", x, a)
    if ins[0].shape != want:
        raise OpError(f"AvgPoolNDGrad: dy is {list(ins[0].shape)}, the pool gives {list(want)}")
    return [x]


def _indexed(op: str, values: TensorType, idx: TensorType) -> None:
    require_float(op, values, "input 0")
    if idx.dtype != "int64" or idx.rank < 3 or idx.rank > 5:
        raise OpError(f"{op}: indices must be int64 (N, C, 1 to 3 spatial axes), got "
                      f"{idx.dtype} {list(idx.shape)}")


def _scatter_infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    v, idx = ins
    _indexed("PoolScatter", v, idx)
    spatial = tuple(a["spatial"])
    if v.shape != idx.shape or len(spatial) != idx.rank - 2 or min(spatial) < 1:
        raise OpError(f"PoolScatter: values {list(v.shape)} and indices {list(idx.shape)} must "
                      f"agree, and spatial {list(spatial)} have their {idx.rank - 2} axes")
    return [TensorType((*v.shape[:2], *spatial), v.dtype)]


def _gather_infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    x, idx = ins
    _indexed("PoolGather", x, idx)
    if x.shape[:2] != idx.shape[:2] or x.rank != idx.rank:
        raise OpError(f"PoolGather: x {list(x.shape)} and indices {list(idx.shape)} must share "
                      f"N, C and their number of spatial axes")
    return [TensorType(idx.shape, x.dtype)]


# ---- gradients -------------------------------------------------------------------------------

def _max_gradient(g: GradBuilder, node: Node, grads: list[str | None]) -> list[str | None]:
    dy, x = grads[0], node.inputs[0]
    if dy is None or not g.needs(x):
        return [None]
    spatial = list(g.type(x).shape[2:])
    return [g.emit("PoolScatter", [dy, node.outputs[1]],
                   {"spatial": spatial, "accumulate": True})[0]]


def _avg_gradient(g: GradBuilder, node: Node, grads: list[str | None]) -> list[str | None]:
    dy, x = grads[0], node.inputs[0]
    if dy is None or not g.needs(x):
        return [None]
    return [g.emit("AvgPoolNDGrad", [dy], {**node.attrs,
                                           "input_shape": list(g.type(x).shape)})[0]]


def _scatter_gradient(g: GradBuilder, node: Node, grads: list[str | None]) -> list[str | None]:
    dy, v = grads[0], node.inputs[0]
    if dy is None or not g.needs(v):
        return [None, None]
    return [g.emit("PoolGather", [dy, node.inputs[1]])[0], None]


def _gather_gradient(g: GradBuilder, node: Node, grads: list[str | None]) -> list[str | None]:
    dy, x = grads[0], node.inputs[0]
    if dy is None or not g.needs(x):
        return [None, None]
    spatial = list(g.type(x).shape[2:])
    return [g.emit("PoolScatter", [dy, node.inputs[1]],
                   {"spatial": spatial, "accumulate": True})[0], None]


def _taps(a: Attrs, spatial: tuple[int, ...]) -> int:
    """Taps of every output window of one plane, summed."""
    return sum(math.prod(w.count for w in ws)
               for _, ws in _cells(axis_windows("pool", a, spatial)))


register(OpDef(
    name="MaxPoolND", arity=1, cost_class="reduction", attrs=WINDOW_ATTRS,
    infer=_max_infer,
    flops=lambda ins, outs, a: math.prod(ins[0].shape[:2]) * _taps(a, ins[0].shape[2:]),
    reference=_max_reference, gradient=_max_gradient,
    doc="[x] -> [y, indices]: max over each window (1 to 3 spatial axes, adaptive or "
        "windowed), and where in x's plane it is.",
))
register(OpDef(
    name="AvgPoolND", arity=1, cost_class="reduction", attrs=WINDOW_ATTRS,
    infer=lambda ins, a: [TensorType(_window_type("AvgPoolND", ins[0], a), ins[0].dtype)],
    flops=lambda ins, outs, a: (math.prod(ins[0].shape[:2]) * _taps(a, ins[0].shape[2:])
                                + outs[0].size),
    reference=_avg_reference, gradient=_avg_gradient,
    doc="Mean over each window (1 to 3 spatial axes, adaptive or windowed).",
))
register(OpDef(
    name="AvgPoolNDGrad", arity=1, cost_class="reduction",
    attrs={**WINDOW_ATTRS, "input_shape": Attr("ints", required=True)},
    infer=_avg_grad_infer,
    flops=lambda ins, outs, a: (math.prod(outs[0].shape[:2]) * _taps(a, outs[0].shape[2:])
                                + ins[0].size),
    reference=_avg_grad_reference,
    doc="[dy] -> dx: each dy shared evenly over its window's divisor.",
))
register(OpDef(
    name="PoolScatter", arity=2, cost_class="scatter",
    attrs={"spatial": Attr("ints", required=True), "accumulate": Attr("bool", False)},
    infer=_scatter_infer, flops=lambda ins, outs, a: ins[0].size,
    reference=_scatter_reference, gradient=_scatter_gradient, nondiff_inputs=(1,),
    doc="[v, indices] -> zeros of (N, C, *spatial) with each v at its plane index (summed with "
        "accumulate): max_unpool, and MaxPoolND's gradient.",
))
register(OpDef(
    name="PoolGather", arity=2, cost_class="data-movement",
    infer=_gather_infer, flops=lambda ins, outs, a: 0,
    reference=_gather_reference, gradient=_gather_gradient, nondiff_inputs=(1,),
    doc="[x, indices] -> x at each plane index: max_unpool's gradient.",
))
