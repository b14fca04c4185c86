"""GridSample: an NCHW image read at the points of a sampling grid (torch's F.grid_sample, 2-D;
spatial transformer networks, optical-flow warping), and its gradient GridSampleGrad. One op
for the family: interpolation and padding are attrs.

    GridSample [x (N, C, H, W), grid (N, OH, OW, 2)] -> y (N, C, OH, OW)
    GridSampleGrad [dy, x, grid] -> dx (x's shape), dgrid (grid's shape)

grid[n, i, j] = (gx, gy) in [-1, 1] spans the image's width and height: the source position
along an axis of `size` elements is (g + 1) * (size - 1) / 2 with align_corners (the -1 and 1
are the corner pixels' centres), else (g + 1) * size / 2 - 0.5 (they are the image's outer
edges), computed in the grid's dtype as PyTorch's CPU kernel does. `padding_mode` says what a
position outside the image reads:

    zeros       0 (each bilinear corner outside contributes nothing)
    border      the position clamped to [0, size - 1]
    reflection  the position reflected at the borders (at the corners' centres with
                align_corners, else at the outer edges) until inside, then clamped

`mode` "bilinear" mixes the four pixels around the position by its fractional parts; "nearest"
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
    require_rank(op, x, 4, "input x (N,C,H,W)")
    require_rank(op, grid, 4, "grid (N,OH,OW,2)")
    require_float(op, x, "input x")
    if grid.dtype != x.dtype:
        raise OpError(f"{op}: grid is {grid.dtype} but x is {x.dtype}")
    if grid.shape[3] != 2 or grid.shape[0] != x.shape[0]:
        raise OpError(f"{op}: grid {list(grid.shape)} must be (N, OH, OW, 2) with x's batch "
                      f"N = {x.shape[0]}")
    if min(x.shape[2:]) < 1:
        raise OpError(f"{op}: input x {list(x.shape)} has an empty image")
    return (x.shape[0], x.shape[1], grid.shape[1], grid.shape[2])


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


def _taps(x_shape: tuple[int, ...], grid: np.ndarray, a: Attrs) -> tuple[list, tuple]:
    """Per tap (row, column, inside, weight) over the (N, OH, OW) points, and the positions'
    fractional parts and slopes (bilinear's dgrid)."""
    h, w = x_shape[2:]
    px, sx = source(grid[..., 0], w, a)
    py, sy = source(grid[..., 1], h, a)
    if a["mode"] == "nearest":
        (r, ri), (c, ci) = _index(np.rint(py), h), _index(np.rint(px), w)
        return [(r, c, ri & ci, np.ones_like(px))], (px, py, sx, sy)
    x0, y0 = np.floor(px), np.floor(py)
    fx, fy = px - x0, py - y0
    one = px.dtype.type(1)
    taps = []
    for dy_, wy in ((0, one - fy), (1, fy)):
        for dx_, wx in ((0, one - fx), (1, fx)):
            (r, ri), (c, ci) = _index(y0 + dy_, h), _index(x0 + dx_, w)
            taps.append((r, c, ri & ci, wy * wx))
    return taps, (fx, fy, sx, sy)


def _values(x: np.ndarray, r: np.ndarray, c: np.ndarray, inside: np.ndarray) -> np.ndarray:
    """x at the taps, (N, OH, OW, C), 0 outside."""
    batch = np.arange(x.shape[0]).reshape(-1, 1, 1)
    return np.where(inside[..., None], x[batch, :, r, c], x.dtype.type(0))


def _reference(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    x, grid = (np.asarray(v) for v in xs)
    taps, _ = _taps(x.shape, grid, a)
    y = np.zeros((*grid.shape[:3], x.shape[1]), x.dtype)
    for r, c, inside, wt in taps:
        y += wt[..., None] * _values(x, r, c, inside)
    return [np.ascontiguousarray(np.moveaxis(y, 3, 1))]


def _grad_reference(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    dy, x, grid = (np.asarray(v) for v in xs)
    taps, (fx, fy, sx, sy) = _taps(x.shape, grid, a)
    g = np.moveaxis(dy, 1, 3)  # (N, OH, OW, C)
    dx = np.zeros((x.shape[0], *x.shape[2:], x.shape[1]), x.dtype)  # (N, H, W, C)
    batch = np.broadcast_to(np.arange(x.shape[0]).reshape(-1, 1, 1), grid.shape[:3])
    # point by point, each point's taps in order (the kernel's order of additions)
    r, c, inside, wt = (np.stack(v, axis=-1) for v in zip(*taps, strict=True))
    share = wt[..., None] * g[..., None, :]  # (N, OH, OW, taps, C)
    batch = np.broadcast_to(batch[..., None], inside.shape)
    np.add.at(dx, (batch[inside], r[inside], c[inside]), share[inside])
    dgrid = np.zeros_like(grid)
    if a["mode"] == "bilinear":
        nw, ne, sw, se = (_values(x, r, c, inside) for r, c, inside, _ in taps)
        one = fx.dtype.type(1)
        gx = (g * ((ne - nw) * (one - fy)[..., None] + (se - sw) * fy[..., None])).sum(-1)
        gy = (g * ((sw - nw) * (one - fx)[..., None] + (se - ne) * fx[..., None])).sum(-1)
        dgrid = np.stack([gx * sx, gy * sy], axis=-1).astype(grid.dtype)
    return [np.ascontiguousarray(np.moveaxis(dx, 3, 1)), dgrid]


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
        taps = 4 if a["mode"] == "bilinear" else 1
        x, grid = ins[-2:]
        points = grid.size // 2
        return points * (12 + taps * per_tap * x.shape[1])

    return flops


register(OpDef(
    name="GridSample", arity=2, attrs=_ATTRS, cost_class="data-movement",
    infer=_infer, flops=_flops(2), reference=_reference, gradient=_gradient,
    doc="x (N,C,H,W) read at grid (N,OH,OW,2) in [-1, 1]: bilinear or nearest, zeros, border "
        "or reflection padding, align_corners (F.grid_sample).",
))

# GridSampleGrad's CPU kernel keeps every point's taps (4 offsets, weights and flags, the
# fractions and slopes: 72 bytes) for its passes over the channels
POINT_BYTES = 72

register(OpDef(
    name="GridSampleGrad", arity=3, attrs=_ATTRS, cost_class="data-movement",
    scratch=lambda ins, outs, a, threads: POINT_BYTES * (ins[2].size // 2),
    infer=_grad_infer, flops=_flops(6), reference=_grad_reference,
    doc="[dy, x, grid] -> dx (dy scattered onto the pixels read), dgrid (the mix's slope times "
        "the position's).",
))
