"""ATen's search and histogram ops as comparisons and counts (no gradient: torch gives none):

    searchsorted(seq, v)   the count of seq's entries below v along seq's last axis (side
                           'right': at or below), each v against its own line of seq (or the
                           one line of a 1-D seq); a sorter only reorders seq, which a count
                           does not see
    bucketize(v, edges)    searchsorted(edges, v)
    histc(x, bins, lo, hi) per bin, the elements of x in it: bins of equal width over
                           [lo, hi] (lo = hi: x's own min and max, widened by 1 each way where
                           those are equal too, as torch), the last bin closed, elements outside
                           not counted
    histogram(x, bins)     histc's counts (weighted, or a density) and the bin edges; with a
                           tensor of edges, bins between consecutive edges
    histogramdd(x, bins)   over x's last axis as D coordinates, each dim binned as histogram
                           does, the cells counted in row-major order (values x cells)

An element's bin is, as torch's kernels find it: for histogram, the count of inner edges at or
below it (its edges computed as torch.linspace rounds them); for histc, trunc((x - lo) bins /
(hi - lo)) in float32. Counts are summed in float32, exact below 2^24 per bin. searchsorted
compares as torch's binary search does, `!(s >= v)` (left) and `!(s > v)` (right), so a NaN
value lands past every entry (a seq holding NaN is not sorted: torch's answer then depends on
where its search steps, the count's on every entry). Each compares every value with every
entry of its line: memory and work of values x entries (a bucketize of a million values into
100 edges: 10^8 compares).
"""

from __future__ import annotations

import numpy as np

from planner.importers.kit import Const, Unsupported
from planner.importers.torch.context import NodeCtx, Value, rule


def _float(n: NodeCtx, *xs: str | Const) -> None:
    for x in xs:
        if n.dtype(x) != "float32":
            raise Unsupported(f"{n.op} (of a {n.dtype(x)} tensor)")


def _count(n: NodeCtx, cmp: str, axis: int) -> str:
    counted = n.emit1("Cast", [cmp], {"to": "float32"})
    return n.emit1("ReduceSum", [counted], {"axes": [axis], "keepdims": False})


def _below(n: NodeCtx, seq: str | Const, v: str | Const, right: bool) -> str:
    """bool: seq entry below v (!(s >= v)), or at or below (!(s > v)) with right."""
    return n.emit1("Not", [n.emit1("Greater" if right else "GreaterOrEqual", [seq, v])])


def search(n: NodeCtx, seq: str | Const, v: str | Const, right: bool, dtype: str) -> str:
    shape, entries = n.shape(v), n.shape(seq)
    if len(entries) > 1:  # a line per value line: (*B, 1, N) against (*B, M, 1)
        if entries[:-1] != shape[:-1]:
            raise n.fail(f"sorted_sequence {list(entries)} and values {list(shape)} differ "
                         "before the last axis")
        seq = n.emit1("Reshape", [seq], {"shape": [*entries[:-1], 1, entries[-1]]})
    values = n.emit1("Reshape", [v], {"shape": [*shape, 1]})
    count = _count(n, _below(n, seq, values, right), len(shape))
    return n.emit1("Cast", [count], {"to": dtype})


def _side(n: NodeCtx, right_at: int) -> bool:
    side = n.kwargs.get("side")
    right = bool(n.arg(right_at, "right", False))
    if side is not None and side not in ("left", "right"):
        raise n.fail(f"side must be 'left' or 'right', got {side!r}")
    if side is not None and right != (side == "right") and "right" in n.kwargs:
        raise n.fail(f"side {side!r} and right={right} disagree")
    return right or side == "right"


@rule("aten.searchsorted.Tensor", "aten.searchsorted.Scalar")
def searchsorted(n: NodeCtx) -> Value:
    seq = n.tensor(0)
    v = n.arg(1, "self")
    v = n.const(float(v), "float32") if isinstance(v, (int, float)) else v
    _float(n, seq, v)
    if not n.shape(seq):
        raise n.fail("sorted_sequence must have at least one axis")
    return search(n, seq, v, _side(n, 3), "int32" if n.arg(2, "out_int32", False) else "int64")


@rule("aten.bucketize.Tensor", "aten.bucketize.Scalar")
def bucketize(n: NodeCtx) -> Value:
    v, edges = n.arg(0, "self"), n.tensor(1)
    v = n.const(float(v), "float32") if isinstance(v, (int, float)) else v
    _float(n, v, edges)
    if len(n.shape(edges)) != 1:
        raise n.fail(f"boundaries must be 1-D, got {list(n.shape(edges))}")
    dtype = "int32" if n.arg(2, "out_int32", False) else "int64"
    return search(n, edges, v, bool(n.arg(3, "right", False)), dtype)


def _scalar(n: NodeCtx, v: float) -> Const:
    return n.const(np.array([v], dtype=np.float32), "float32")


def _range(n: NodeCtx, x: str | Const, lo: float, hi: float, widen: float
           ) -> tuple[str | Const, ...]:
    """The histogram's range as (1,) tensors: [lo, hi], or x's own min and max where lo == hi
    ([0, 1] for an empty x), each moved out by `widen` where the two are equal (histc 1,
    histogram 1/2: torch's)."""
    if lo != hi:
        if not lo < hi:
            raise n.fail(f"max {hi} must not be below min {lo}")
        return _scalar(n, lo), _scalar(n, hi)
    if 0 in n.shape(x):
        return _scalar(n, 0.0), _scalar(n, 1.0)
    flat = n.emit1("Reshape", [x], {"shape": [-1]})
    low = n.emit1("ReduceMin", [flat], {"axes": [0], "keepdims": True})
    high = n.emit1("ReduceMax", [flat], {"axes": [0], "keepdims": True})
    same = n.emit1("Equal", [low, high])
    return (n.emit1("Where", [same, n.emit1("Add", [low, _scalar(n, -widen)]), low]),
            n.emit1("Where", [same, n.emit1("Add", [high, _scalar(n, widen)]), high]))


def _edges(n: NodeCtx, lo: str | Const, hi: str | Const, bins: int) -> str:
    """torch.linspace(lo, hi, bins + 1) as torch's CPU kernel rounds it: with step =
    (hi - lo) / bins, lo + step j in the first half, hi - step (bins - j) in the second."""
    step = n.emit1("Div", [n.emit1("Sub", [hi, lo]), _scalar(n, float(bins))])
    half = (bins + 1) // 2
    ahead = n.const(np.arange(half, dtype=np.float32), "float32")
    behind = n.const(np.arange(bins - half, -1, -1, dtype=np.float32), "float32")
    return n.emit1("Concat", [n.emit1("Add", [lo, n.emit1("Mul", [step, ahead])]),
                              n.emit1("Sub", [hi, n.emit1("Mul", [step, behind])])],
                   {"axis": 0})


def _bin_of(n: NodeCtx, flat: str, edges: str | Const, bins: int, linear: bool = False
            ) -> tuple[str, str]:
    """Each element's bin between consecutive edges (bins + 1 of them, the last bin closed)
    as float32 (N, 1), and whether it lies inside them: the count of inner edges at or below
    it, or with `linear` (histc's rule in torch; edges are then [lo, hi] alone)
    trunc((x - lo) bins / (hi - lo)) in float32."""
    end = n.shape(edges)[0] - 1
    first = n.emit1("Slice", [edges], {"starts": [0], "ends": [1], "axes": [0]})
    last = n.emit1("Slice", [edges], {"starts": [end], "ends": [end + 1], "axes": [0]})
    if linear:
        scaled = n.emit1("Mul", [n.emit1("Sub", [flat, first]), _scalar(n, float(bins))])
        at = n.emit1("Floor", [n.emit1("Div", [scaled, n.emit1("Sub", [last, first])])])
        at = n.emit1("Min", [at, _scalar(n, float(bins - 1))])  # x = hi: the last bin
    elif bins > 1:
        inner = n.emit1("Slice", [edges], {"starts": [1], "ends": [bins], "axes": [0]})
        at = n.emit1("ReduceSum", [n.emit1("Cast", [n.emit1("LessOrEqual", [inner, flat])],
                                           {"to": "float32"})], {"axes": [1], "keepdims": True})
    else:
        at = n.emit1("Mul", [flat, _scalar(n, 0.0)])
    inside = n.emit1("And", [n.emit1("GreaterOrEqual", [flat, first]),
                             n.emit1("LessOrEqual", [flat, last])])
    return at, inside


def _tally(n: NodeCtx, at: str, inside: str, bins: int, weight: str | Const | None) -> str:
    """Per bin 0..bins-1, the elements (or their weights) inside whose bin `at` is it."""
    slots = n.const(np.arange(bins, dtype=np.float32).reshape(1, bins), "float32")
    hits = n.emit1("Cast", [n.emit1("And", [n.emit1("Equal", [at, slots]), inside])],
                   {"to": "float32"})
    if weight is not None:
        hits = n.emit1("Mul", [hits, n.emit1("Reshape", [weight], {"shape": [-1, 1]})])
    return n.emit1("ReduceSum", [hits], {"axes": [0], "keepdims": False})


def _counts(n: NodeCtx, x: str | Const, edges: str | Const, bins: int,
            weight: str | Const | None, linear: bool = False) -> str:
    """histc's and histogram's counts of x's elements (_bin_of, _tally)."""
    at, inside = _bin_of(n, n.emit1("Reshape", [x], {"shape": [-1, 1]}), edges, bins, linear)
    return _tally(n, at, inside, bins, weight)


def _widths(n: NodeCtx, edges: str | Const, bins: int) -> str:
    return n.emit1("Sub", [n.emit1("Slice", [edges], {"starts": [1], "ends": [bins + 1],
                                                     "axes": [0]}),
                           n.emit1("Slice", [edges], {"starts": [0], "ends": [bins],
                                                     "axes": [0]})])


@rule("aten.histc.default")
def histc(n: NodeCtx) -> Value:
    x = n.tensor(0)
    _float(n, x)
    bins = int(n.arg(1, "bins", 100))
    if bins < 1:
        raise n.fail(f"bins must be positive, got {bins}")
    lo, hi = _range(n, x, float(n.arg(2, "min", 0)), float(n.arg(3, "max", 0)), 1.0)
    return _counts(n, x, n.emit1("Concat", [lo, hi], {"axis": 0}), bins, None, linear=True)


@rule("aten.histogram.bin_ct", "aten.histogram.bins_tensor")
def histogram(n: NodeCtx) -> Value:
    x = n.tensor(0)
    weight = n.kwargs.get("weight")  # weight, range and density: keyword-only
    density = bool(n.kwargs.get("density", False))
    _float(n, x, *([weight] if weight is not None else []))
    if n.op.endswith("bins_tensor"):
        edges = n.tensor(1, "bins")
        _float(n, edges)
        if len(n.shape(edges)) != 1 or n.shape(edges)[0] < 2:
            raise n.fail(f"bins must be a 1-D tensor of 2 or more edges, got "
                         f"{list(n.shape(edges))}")
        bins = n.shape(edges)[0] - 1
    else:
        bins = int(n.arg(1, "bins", 100))
        if bins < 1:
            raise n.fail(f"bins must be positive, got {bins}")
        span = n.kwargs.get("range")
        lo, hi = (float(span[0]), float(span[1])) if span is not None else (0.0, 0.0)
        edges = _edges(n, *_range(n, x, lo, hi, 0.5), bins)
    hist = _counts(n, x, edges, bins, weight)
    if density:  # hist / (its total x each bin's width)
        total = n.emit1("ReduceSum", [hist], {"axes": [0], "keepdims": True})
        hist = n.emit1("Div", [hist, n.emit1("Mul", [total, _widths(n, edges, bins)])])
    return hist, edges


def _dd_input(n: NodeCtx) -> tuple[str, int, str | Const | None, bool]:
    """histogramdd's x as (N, D) and D, its weight and density."""
    x = n.tensor(0)
    weight = n.kwargs.get("weight")
    _float(n, x, *([weight] if weight is not None else []))
    shape = n.shape(x)
    if not shape:
        raise n.fail("histogramdd needs x of shape (..., D)")
    return n.emit1("Reshape", [x], {"shape": [-1, shape[-1]]}), shape[-1], weight, \
        bool(n.kwargs.get("density", False))


def _dd_edges(n: NodeCtx, x: str, dims: int) -> list[str]:
    """The bin_cts forms' edges per dim: [range[2d], range[2d + 1]] or the column's own."""
    bins = n.ints(1, "bins")
    if len(bins) != dims or min(bins, default=1) < 1:
        raise n.fail(f"bins {bins} must be {dims} positive counts")
    span = n.kwargs.get("range")
    if span is not None and len(span) != 2 * dims:
        raise n.fail(f"range {list(span)} must hold {2 * dims} numbers")
    edges = []
    for d, count in enumerate(bins):
        column = n.emit1("Slice", [x], {"starts": [d], "ends": [d + 1], "axes": [1]})
        lo, hi = (float(span[2 * d]), float(span[2 * d + 1])) if span is not None else (0, 0)
        edges.append(_edges(n, *_range(n, column, lo, hi, 0.5), count))
    return edges


@rule("aten._histogramdd_bin_edges.default")
def histogramdd_edges(n: NodeCtx) -> Value:
    x, dims, _, _ = _dd_input(n)
    return tuple(_dd_edges(n, x, dims))


@rule("aten._histogramdd_from_bin_cts.default", "aten._histogramdd_from_bin_tensors.default")
def histogramdd(n: NodeCtx) -> Value:
    """One tally over the cells of the D axes: a cell is the row-major index of its bins."""
    x, dims, weight, density = _dd_input(n)
    if n.op.endswith("bin_cts.default"):
        edges: list = _dd_edges(n, x, dims)
    else:
        edges = list(n.arg(1, "bins") or [])
        if len(edges) != dims or any(not isinstance(e, (str, Const)) for e in edges):
            raise n.fail(f"bins must be {dims} tensors of edges")
        _float(n, *edges)
        if any(len(n.shape(e)) != 1 or n.shape(e)[0] < 2 for e in edges):
            raise n.fail("each dim's bins must be a 1-D tensor of 2 or more edges")
    counts = [n.shape(e)[0] - 1 for e in edges]
    cell, inside = None, None
    for d, (e, count) in enumerate(zip(edges, counts, strict=True)):
        column = n.emit1("Slice", [x], {"starts": [d], "ends": [d + 1], "axes": [1]})
        at, within = _bin_of(n, column, e, count)
        stride = float(np.prod(counts[d + 1:], dtype=np.float64))
        at = at if stride == 1 else n.emit1("Mul", [at, _scalar(n, stride)])
        cell = at if cell is None else n.emit1("Add", [cell, at])
        inside = within if inside is None else n.emit1("And", [inside, within])
    hist = _tally(n, cell, inside, int(np.prod(counts)), weight)
    if density:  # over the total and each cell's volume
        hist = n.emit1("Div", [hist, n.emit1("ReduceSum", [hist], {"axes": [0],
                                                                    "keepdims": True})])
        hist = n.emit1("Reshape", [hist], {"shape": counts})
        for d, (e, count) in enumerate(zip(edges, counts, strict=True)):
            shape = [1] * dims
            shape[d] = count
            widths = n.emit1("Reshape", [_widths(n, e, count)], {"shape": shape})
            hist = n.emit1("Div", [hist, widths])
    return _to_shape(n, hist, counts)


def _to_shape(n: NodeCtx, v: str, shape: list[int]) -> str:
    return v if list(n.shape(v)) == shape else n.emit1("Reshape", [v], {"shape": shape})
