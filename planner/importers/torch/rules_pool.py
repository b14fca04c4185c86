"""ATen pools to planner ops: max pools with their indices, 3-D pools, adaptive pools of any
output size, and max_unpool (planner/ops/pool_nd.py's MaxPoolND, AvgPoolND, PoolScatter).

    max_pool2d_with_indices       the planner's MaxPool when nothing reads the indices (as before:
                                  oneDNN's pooling), else MaxPoolND (y and indices)
    max_pool3d_with_indices       MaxPoolND
    avg_pool2d                    the planner's AvgPool, or AvgPoolND where ceil_mode's last
                                  window overhangs the padding and count_include_pad is set
                                  (oneDNN would count the overhang in the divisor)
    avg_pool3d                    AvgPoolND
    divisor_override (both)       AvgPoolND without the padding counted, times each window's
                                  taps / divisor_override (a constant of the output's shape):
                                  the window's sum over the divisor
    adaptive_avg_pool2d / 3d      GlobalAvgPool for an output of 1 x 1 (2-D), else AvgPoolND
    adaptive_max_pool2d / 3d      MaxPoolND (y and indices)
    max_unpool2d / 3d             PoolScatter of the values at their indices into zeros
    max_pool2d/3d_with_indices_   PoolScatter (accumulate) of grad_output at the indices:
      backward                    the gradient called directly

1-D pools reach these as 2-D ones over (N, C, 1, L) (torch's own decomposition); an input
without its batch axis gets one for the op, dropped after.
"""

from __future__ import annotations

import math

from planner.importers.kit import Const, Unsupported
from planner.importers.torch.context import NodeCtx, Value, rule
from planner.importers.torch.rules import _pair, _reshape_to
from planner.importers.torch.rules_sort import ReadLater
from planner.ops import get_op
from planner.ops.base import OpError
from planner.ops.pool_nd import axis_windows

PRESERVED = ("max_unpool2d.default", "max_unpool3d.default")


def _batched(n: NodeCtx, x: str | Const, spatial: int) -> tuple[str | Const, bool]:
    """x as (N, C, *spatial); whether a batch axis of 1 was added."""
    shape = n.shape(x)
    if len(shape) == spatial + 1:
        return _reshape_to(n, x, (1, *shape)), True
    if len(shape) != spatial + 2:
        raise Unsupported(f"{n.op} (rank {len(shape)})")
    return x, False


def _unbatched(n: NodeCtx, ys: list[str], added: bool) -> list:
    return [_reshape_to(n, y, n.shape(y)[1:]) for y in ys] if added else ys


def _indices_read(n: NodeCtx) -> bool:
    """Whether the program reads the node's indices: torch.export keeps a getitem only for an
    output something reads, so a max pool read twice is read for both. (Read for its indices
    alone, its indices are MaxPoolND's, made where read: rules_sort.ReadLater.)"""
    return getattr(n.node, "users", 0) > 1


def _window(n: NodeCtx, dims: int, avg: bool) -> dict:
    kernel = _pair(n, 1, "kernel_size", [1], dims)
    attrs = {"kernel": kernel, "strides": _pair(n, 2, "stride", kernel, dims),
             "pads": _pair(n, 3, "padding", [0], dims),
             "ceil_mode": bool(n.arg(4 if avg else 5, "ceil_mode", False))}
    if avg:
        attrs["count_include_pad"] = bool(n.arg(5, "count_include_pad", True))
    else:
        attrs["dilations"] = _pair(n, 4, "dilation", [1], dims)
    return attrs


@rule("aten.max_pool2d_with_indices.default", "aten.max_pool2d.default",
      "aten.max_pool3d_with_indices.default")
def max_pool(n: NodeCtx) -> Value:
    dims = 3 if "pool3d" in n.op else 2
    x, added = _batched(n, n.tensor(0), dims)
    attrs = _window(n, dims, avg=False)
    if dims == 2 and not _indices_read(n):
        y = n.emit1("MaxPool", [x], {**attrs, "pads": attrs["pads"] * 2})
        (y,) = _unbatched(n, [y], added)
        if not n.op.endswith("with_indices.default"):
            return y
        # read for its indices alone (a gradient called directly): MaxPoolND's, made then
        return ReadLater((y, None), {1: lambda: _unbatched(
            n, n.emit("MaxPoolND", [x], attrs, n_out=2), added)[1]})
    return tuple(_unbatched(n, n.emit("MaxPoolND", [x], attrs, n_out=2), added))


def _overhangs(shape: tuple[int, ...], a: dict) -> bool:
    """Whether ceil_mode's last window reaches past the padding on some axis: oneDNN's average
    (the planner's AvgPool on the CPU) then counts the overhang in count_include_pad's divisor,
    where torch clips the window to the padded input (a divisor below the kernel's size)."""
    windows = axis_windows("AvgPoolND", get_op("AvgPoolND").normalize_attrs(a), shape)
    return any(w[-1].divisor < k for w, k in zip(windows, a["kernel"], strict=True))


@rule("aten.avg_pool2d.default", "aten.avg_pool3d.default")
def avg_pool(n: NodeCtx) -> Value:
    """2-D: the planner's AvgPool (oneDNN's), or AvgPoolND where ceil_mode's last window
    overhangs the padding and the padding counts; 3-D: AvgPoolND."""
    dims = 3 if "pool3d" in n.op else 2
    x, added = _batched(n, n.tensor(0), dims)
    attrs = _window(n, dims, avg=True)
    divisor = n.arg(6, "divisor_override")
    if divisor is not None:
        return _unbatched(n, [_pool_sum(n, x, attrs, int(divisor))], added)[0]
    if dims == 2 and not (attrs["ceil_mode"] and attrs["count_include_pad"]
                          and _overhangs(n.shape(x)[2:], attrs)):
        y = n.emit1("AvgPool", [x], {**attrs, "pads": attrs["pads"] * 2})
    else:
        y = n.emit1("AvgPoolND", [x], attrs)
    return _unbatched(n, [y], added)[0]


def _pool_sum(n: NodeCtx, x: str | Const, attrs: dict, divisor: int) -> str:
    """Each window's sum (its taps inside x) over `divisor`."""
    import numpy as np

    if divisor == 0:
        raise n.fail("divisor_override must not be 0")
    attrs = {**attrs, "count_include_pad": False}
    try:
        windows = axis_windows("AvgPoolND", get_op("AvgPoolND").normalize_attrs(attrs),
                               n.shape(x)[2:])
    except OpError as e:
        raise n.fail(str(e)) from None
    taps = np.ones((1, 1), dtype=np.float64)
    for axis in windows:
        taps = np.multiply.outer(taps, [w.count for w in axis])
    # in x's dtype when float64 (a float32 scale would make the Mul's dtypes differ), float32
    # for the others (the low floats' Mul widens it)
    dtype = "float64" if n.dtype(x) == "float64" else "float32"
    scale = n.const((taps / divisor).astype(dtype), dtype)
    return n.emit1("Mul", [n.emit1("AvgPoolND", [x], attrs), scale])


@rule("aten.adaptive_avg_pool2d.default", "aten._adaptive_avg_pool2d.default",
      "aten._adaptive_avg_pool3d.default", "aten.adaptive_avg_pool3d.default",
      "aten.adaptive_max_pool2d.default", "aten.adaptive_max_pool3d.default")
def adaptive_pool(n: NodeCtx) -> Value:
    dims = 3 if "pool3d" in n.op else 2
    x, added = _batched(n, n.tensor(0), dims)
    size = _pair(n, 1, "output_size", [1], dims)
    if "max" in n.op:
        return tuple(_unbatched(n, n.emit("MaxPoolND", [x], {"output_size": size}, n_out=2),
                                added))
    if size == [1, 1]:  # the planner's global pool, as imports before (oneDNN's reduction)
        return _unbatched(n, [n.emit1("GlobalAvgPool", [x])], added)[0]
    return _unbatched(n, [n.emit1("AvgPoolND", [x], {"output_size": size})], added)[0]


@rule("aten.max_unpool2d.default", "aten.max_unpool3d.default")
def max_unpool(n: NodeCtx) -> Value:
    """Each value to its index in a zero plane of output_size (stride and padding, which
    torch's 3-D op takes, only check the size there)."""
    dims = 3 if "3d" in n.op else 2
    values, added = _batched(n, n.tensor(0), dims)
    indices, _ = _batched(n, n.tensor(1), dims)
    spatial = n.ints(2, "output_size")
    if len(spatial) != dims:
        raise n.fail(f"output_size {spatial} is not {dims}-D")
    y = n.emit1("PoolScatter", [values, indices], {"spatial": spatial, "accumulate": False})
    return _unbatched(n, [y], added)[0]


@rule("aten.max_pool2d_with_indices_backward.default",
      "aten.max_pool3d_with_indices_backward.default")
def max_pool_backward(n: NodeCtx) -> Value:
    """max_pool's gradient called directly (grad_output, self, kernel, stride, padding,
    dilation, ceil_mode, indices): each grad at its index of a zero plane of self's size,
    summed where windows overlap (MaxPoolND's own gradient)."""
    dims = 3 if "pool3d" in n.op else 2
    dy, added = _batched(n, n.tensor(0), dims)
    x, _ = _batched(n, n.tensor(1), dims)
    indices, _ = _batched(n, n.tensor(7, "indices"), dims)
    if n.shape(indices) != n.shape(dy):
        raise n.fail(f"indices {list(n.shape(indices))} and grad_output "
                     f"{list(n.shape(dy))} differ")
    y = n.emit1("PoolScatter", [dy, indices], {"spatial": list(n.shape(x)[2:]),
                                               "accumulate": True})
    return _unbatched(n, [y], added)[0]


# float32 holds every flat position of a plane exactly below this
EXACT_POSITIONS = 1 << 24


@rule("aten.fractional_max_pool2d.default", "aten.fractional_max_pool3d.default")
def fractional_max_pool(n: NodeCtx) -> Value:
    """F.fractional_max_pool2d / 3d (x, kernel_size, output_size, random_samples): each output
    the max of a kernel-sized window whose start on each axis torch draws from the plane's
    random sample u (its own aten.rand, the planner's generator): start_i = floor((i + u)
    alpha) - floor(u alpha), alpha = (in - k) / (out - 1) in x's dtype as torch computes it,
    the last window ending at the input's end. Every such window is one of the stride-1 max
    pool's (MaxPoolND, torch's NaN and tie rule, with indices), so the output is that pool's
    value and index at each start (an IndexGather): dy reaches the window's argmax, as torch's
    backward sends it."""
    dims = 3 if "3d" in n.op else 2
    x, added = _batched(n, n.tensor(0), dims)
    kernel, out = n.ints(1, "kernel_size"), n.ints(2, "output_size")
    spatial = n.shape(x)[2:]
    if len(kernel) != dims or len(out) != dims or min(out) < 1 or any(
            o + k - 1 > s for o, k, s in zip(out, kernel, spatial, strict=True)):
        raise n.fail(f"kernel {kernel} and output_size {out} for an input of spatial shape "
                     f"{list(spatial)}")
    dense = [s - k + 1 for s, k in zip(spatial, kernel, strict=True)]
    if math.prod(spatial) >= EXACT_POSITIONS:
        raise n.fail(f"a plane of {math.prod(spatial)} elements (the planner's fractional "
                     f"pool takes fewer than {EXACT_POSITIONS})")
    y, ind = n.emit("MaxPoolND", [x], {"kernel": kernel, "strides": [1] * dims}, n_out=2)
    lead = list(n.shape(x)[:2])
    pos = _fractional_positions(n, n.tensor(3, "random_samples"), spatial, kernel, out, dense)
    where = {"axis": 2, "mode": "elements", "wrap": False}

    def picked(v: str) -> str:
        flat = n.emit1("Reshape", [v], {"shape": [*lead, math.prod(dense)]})
        return n.emit1("Reshape", [n.emit1("IndexGather", [flat, pos], where)],
                       {"shape": [*lead, *out]})

    # the indices through float32 (exact: EXACT_POSITIONS), which every gather kernel takes
    index = n.emit1("Cast", [picked(n.emit1("Cast", [ind], {"to": "float32"}))],
                    {"to": "int64"})
    return tuple(_unbatched(n, [picked(y), index], added))


def _fractional_positions(n: NodeCtx, u: str | Const, spatial: tuple[int, ...],
                          kernel: list[int], out: list[int], dense: list[int]) -> str:
    """Each output's window start as a flat position in the stride-1 pool's output (shape
    `dense`), int64 (N, C, prod(out)). torch's samples per plane are (W, H) for 2-D, (T, H, W)
    for 3-D."""
    import numpy as np

    dims, dtype = len(spatial), n.dtype(u)
    lead = list(n.shape(u)[:2])
    total: str | None = None
    for a, s in enumerate((1, 0) if dims == 2 else (0, 1, 2)):
        room, o = spatial[a] - kernel[a], out[a]
        if o == 1:
            start: str | Const = n.const(np.full((*lead, 1), room), dtype)
        else:
            ua = n.emit1("Slice", [u], {"starts": [s], "ends": [s + 1], "axes": [2]})
            alpha = n.const(np.divide(np.asarray(room, dtype), np.asarray(o - 1, dtype)), dtype)
            at = n.emit1("Floor", [n.emit1("Mul", [n.emit1("Add", [
                n.const(np.arange(o), dtype), ua]), alpha])])
            t = n.emit1("Sub", [at, n.emit1("Floor", [n.emit1("Mul", [ua, alpha])])])
            last = n.const(np.arange(o) == o - 1, "bool")
            start = n.emit1("Where", [last, n.const(room, dtype), t])
        shape = [*lead, *(o if b == a else 1 for b in range(dims))]
        term = n.emit1("Mul", [n.emit1("Reshape", [start], {"shape": shape}),
                               n.const(math.prod(dense[a + 1:]), dtype)])
        total = term if total is None else n.emit1("Add", [total, term])
    flat = n.emit1("Reshape", [total], {"shape": [*lead, math.prod(out)]})
    return n.emit1("Cast", [flat], {"to": "int64"})
