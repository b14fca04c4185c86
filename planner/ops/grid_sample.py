"""GridSample: an NCHW (or NCDHW) image read at the points of a sampling grid (torch's
F.grid_sample, 2-D and 3-D; spatial transformer networks, optical-flow warping), and its
gradient GridSampleGrad. One op for the family: interpolation and padding are attrs.

    GridSample [x (N, C, H, W), grid (N, OH, OW, 2)] -> y (N, C, OH, OW)
               [x (N, C, D, H, W), grid (N, OD, OH, OW, 3)] -> y (N, C, OD, OH, OW)
    GridSampleGrad [dy, x, grid] -> dx (x's shape), dgrid (grid's shape)

grid[n, i, j] = (gx, gy) in [-1, 1] spans the image's width and height (gz its depth in 3-D,
as torch orders them): the source position
along an axis of `size` elements is (g + 1) * (size - 1) / 2 with align_corners (the -1 and 1
are the corner pixels' centres), else (g + 1) * size / 2 - 0.5 (they are the image's outer
edges), computed in the grid's dtype as PyTorch's CPU kernel does. `padding_mode` says what a
position outside the image reads:

    zeros       0 (each bilinear corner outside contributes nothing)
    border      the position clamped to [0, size - 1]
    reflection  the position reflected at the borders (at the corners' centres with
                align_corners, else at the outer edges) until inside, then clamped

`mode` "bilinear" mixes the four pixels around the position (eight in 3-D: torch's trilinear)
by its fractional parts; "nearest"
reads the pixel at the position rounded half to even (std::nearbyint, PyTorch's).

Gradients: dx scatters each dy onto the pixels it was read from with the same weights; dgrid
is the derivative of the bilinear mix along each axis (summed over channels) times that of the
position: the unnormalisation's scale, 0 where border or reflection clamps (a position at or
past an edge, PyTorch's convention), -1 where a reflection flips it. Nearest's dgrid is 0.
Sample points must be finite (torch maps a non-finite one to an arbitrary far position).

Example:
    >>> import numpy as np
    >>> from planner.ops import get_op
    >>> x = np.arange(4.0).reshape(1, 1, 2, 2)
    >>> grid = np.array([[[[0.0, 0.0], [-1.0, -1.0], [3.0, 0.0]]]])  # centre, corner, outside
    >>> a = {"mode": "bilinear", "padding_mode": "zeros", "align_corners": True}
    >>> get_op("GridSample").reference([x, grid], a)[0]
    array([[[[1.5, 0. , 0. ]]]])
    >>> get_op("GridSample").reference([x, grid], {**a, "padding_mode": "border"})[0]
    array([[[[1.5, 0. , 2. ]]]])
"""

from __future__ import annotations

import functools
import itertools
import operator
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

MODES = ("bilinear", "nearest")
PADDINGS = ("zeros", "border", "reflection")
_ATTRS = {"mode": Attr("str", "bilinear"), "padding_mode": Attr("str", "zeros"),
          "align_corners": Attr("bool", False)}


def _check(op: str, x: TensorType, grid: TensorType, a: Attrs) -> tuple[int, ...]:
    """y's shape; OpError naming what does not fit."""
    if a["mode"] not in MODES:
        raise OpError(f"{op}: mode {a['mode']!r} is not one of {list(MODES)}")
    if a["padding_mode"] not in PADDINGS:
        raise OpError(f"{op}: padding_mode {a['padding_mode']!r} is not one of "
                      f"{list(PADDINGS)}")
    if x.rank not in (4, 5):
        raise OpError(f"{op}: input x must be (N,C,H,W) or (N,C,D,H,W), got {list(x.shape)}")
    k = x.rank - 2
    require_float(op, x, "input x")
    if grid.dtype != x.dtype:
        raise OpError(f"{op}: grid is {grid.dtype} but x is {x.dtype}")
    if grid.rank != x.rank or grid.shape[-1] != k or grid.shape[0] != x.shape[0]:
        want = "(N, OH, OW, 2)" if k == 2 else "(N, OD, OH, OW, 3)"
        raise OpError(f"{op}: grid {list(grid.shape)} must be {want} with x's batch "
                      f"N = {x.shape[0]}")
    if min(x.shape[2:]) < 1:
        raise OpError(f"{op}: input x {list(x.shape)} has an empty image")
    return (x.shape[0], x.shape[1], *grid.shape[1:-1])


def _infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    x, grid = ins
    return [TensorType(_check("GridSample", x, grid, a), x.dtype)]


def _grad_infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    dy, x, grid = ins
    want = _check("GridSampleGrad", x, grid, a)
    if dy.shape != want or dy.dtype != x.dtype:
        raise OpError(f"GridSampleGrad: dy is {dy.dtype}{list(dy.shape)} but the sampled "
                      f"output is {x.dtype}{list(want)}")
    return [x, grid]


def source(g: np.ndarray, size: int, a: Attrs) -> tuple[np.ndarray, np.ndarray]:
    """Positions along one axis of `size` pixels for grid values g, and their derivative
    with respect to g (module docstring), in g's dtype."""
    t = g.dtype.type
    scale = t((size - 1) / 2) if a["align_corners"] else t(size / 2)
    x = (g + t(1)) * scale if a["align_corners"] else (g + t(1)) * scale - t(0.5)
    slope = np.full_like(x, scale)
    pad = a["padding_mode"]
    if pad == "reflection":
        low, high = (0, 2 * (size - 1)) if a["align_corners"] else (-1, 2 * size - 1)
        if low == high:  # one pixel with align_corners: every position is it
            return np.zeros_like(x), np.zeros_like(x)
        lo, span = t(low / 2), t((high - low) / 2)
        d = x - lo
        sign = np.where(d < 0, t(-1), t(1))
        d = np.abs(d)
        extra = np.fmod(d, span)
        odd = np.floor(d / span) % 2 == 1
        x = np.where(odd, span - extra + lo, extra + lo)
        slope = slope * np.where(odd, -sign, sign)
    if pad != "zeros":
        top = t(size - 1)
        slope = np.where((x > 0) & (x < top), slope, t(0))
        x = np.minimum(top, np.maximum(x, t(0)))
    return x, slope


def _index(v: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Integer pixel positions (clamped into the image for reading) and whether inside."""
    far = np.clip(v, -2, size + 1).astype(np.int64)  # beyond either edge is simply outside
    inside = (far >= 0) & (far < size)
    return np.clip(far, 0, size - 1), inside


def _taps(x_shape: tuple[int, ...], grid: np.ndarray, a: Attrs) -> tuple[list, list, list]:
    """Per tap (its pixel's coordinates in x's spatial order, inside, weight) over the grid's
    points; the positions' fractional parts and slopes per spatial axis (bilinear's dgrid).
    Taps go corner by corner with the first spatial axis the slowest (torch's nw, ne, sw, se;
    tnw ... bse in 3-D); the grid's last axis holds x, y(, z): the spatial axes reversed."""
    sizes = x_shape[2:]
    k = len(sizes)
    pos, slopes = zip(*(source(grid[..., k - 1 - ax], sizes[ax], a) for ax in range(k)),
                      strict=True)
    if a["mode"] == "nearest":
        at = [_index(np.rint(p), n) for p, n in zip(pos, sizes, strict=True)]
        inside = np.logical_and.reduce([i for _, i in at])
        return [(tuple(c for c, _ in at), inside, np.ones_like(pos[0]))], [], list(slopes)
    low = [np.floor(p) for p in pos]
    frac = [p - f for p, f in zip(pos, low, strict=True)]
    one = pos[0].dtype.type(1)
    taps = []
    for bits in itertools.product((0, 1), repeat=k):
        at = [_index(f + b, n) for f, b, n in zip(low, bits, sizes, strict=True)]
        weight = functools.reduce(operator.mul, (fr if b else one - fr
                                                 for fr, b in zip(frac, bits, strict=True)))
        taps.append((tuple(c for c, _ in at), np.logical_and.reduce([i for _, i in at]),
                     weight))
    return taps, frac, list(slopes)


def _values(x: np.ndarray, coords: tuple[np.ndarray, ...], inside: np.ndarray) -> np.ndarray:
    """x at the taps, (N, *grid points, C), 0 outside."""
    batch = np.arange(x.shape[0]).reshape(-1, *[1] * (x.ndim - 2))
    return np.where(inside[..., None], x[(batch, slice(None), *coords)], x.dtype.type(0))


def _reference(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    x, grid = (np.asarray(v) for v in xs)
    taps, _, _ = _taps(x.shape, grid, a)
    y = np.zeros((*grid.shape[:-1], x.shape[1]), x.dtype)
    for coords, inside, wt in taps:
        y += wt[..., None] * _values(x, coords, inside)
    return [np.ascontiguousarray(np.moveaxis(y, -1, 1))]


def _grad_reference(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    dy, x, grid = (np.asarray(v) for v in xs)
    k = x.ndim - 2
    taps, frac, slopes = _taps(x.shape, grid, a)
    g = np.moveaxis(dy, 1, -1)  # (N, *points, C)
    dx = np.zeros((x.shape[0], *x.shape[2:], x.shape[1]), x.dtype)  # (N, *spatial, C)
    batch = np.broadcast_to(np.arange(x.shape[0]).reshape(-1, *[1] * k), grid.shape[:-1])
    # point by point, each point's taps in order (the kernel's order of additions)
    coords = [np.stack([c[ax] for c, _, _ in taps], axis=-1) for ax in range(k)]
    inside = np.stack([i for _, i, _ in taps], axis=-1)
    wt = np.stack([w for _, _, w in taps], axis=-1)
    share = wt[..., None] * g[..., None, :]  # (N, *points, taps, C)
    batch = np.broadcast_to(batch[..., None], inside.shape)
    np.add.at(dx, (batch[inside], *(c[inside] for c in coords)), share[inside])
    dgrid = np.zeros_like(grid)
    if a["mode"] == "bilinear":
        values = [_values(x, c, i) for c, i, _ in taps]
        one = grid.dtype.type(1)
        for ax in range(k):
            # d weight / d position along ax: the other axes' weights, signed by this bit
            slope = np.zeros_like(g)
            for bits, v in zip(itertools.product((0, 1), repeat=k), values, strict=True):
                others = functools.reduce(operator.mul, (
                    fr if b else one - fr for b2, (fr, b) in enumerate(zip(frac, bits,
                                                                            strict=True))
                    if b2 != ax), np.ones_like(frac[0]))
                slope = slope + v * (others if bits[ax] else -others)[..., None]
            dgrid[..., k - 1 - ax] = (g * slope).sum(-1) * slopes[ax]
    return [np.ascontiguousarray(np.moveaxis(dx, -1, 1)), dgrid]


def _gradient(g: GradBuilder, node: Node, grads: list[str | None]) -> list[str | None]:
    x, grid = node.inputs
    dy = grads[0]
    wanted = [dy is not None and g.needs(t) for t in (x, grid)]
    if not any(wanted):
        return [None, None]
    dx, dgrid = g.emit("GridSampleGrad", [dy, x, grid], dict(node.attrs))
    return [dx if wanted[0] else None, dgrid if wanted[1] else None]


def _flops(per_tap: int):
    def flops(ins: list[TensorType], outs: list[TensorType], a: Attrs) -> int:
        x, grid = ins[-2:]
        k = grid.shape[-1]
        taps = 2 ** k if a["mode"] == "bilinear" else 1
        points = grid.size // k
        return points * (6 * k + taps * per_tap * x.shape[1])

    return flops


register(OpDef(
    name="GridSample", arity=2, attrs=_ATTRS, cost_class="data-movement",
    infer=_infer, flops=_flops(2), reference=_reference, gradient=_gradient,
    doc="x (N,C,H,W) read at grid (N,OH,OW,2) in [-1, 1] (3-D: (N,C,D,H,W), (N,OD,OH,OW,3)): "
        "bilinear or nearest, zeros, border or reflection padding, align_corners "
        "(F.grid_sample).",
))

# GridSampleGrad's CPU kernel keeps every point's taps (up to 8 offsets, weights and flags, the
# fractions and slopes per axis: 136 bytes) for its passes over the channels
POINT_BYTES = 136

register(OpDef(
    name="GridSampleGrad", arity=3, attrs=_ATTRS, cost_class="data-movement",
    scratch=lambda ins, outs, a, threads: POINT_BYTES * (ins[2].size // ins[2].shape[-1]),
    infer=_grad_infer, flops=_flops(6), reference=_grad_reference,
    doc="[dy, x, grid] -> dx (dy scattered onto the pixels read), dgrid (the mix's slope times "
        "the position's).",
))
