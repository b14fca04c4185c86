"""ATen's sort family on the planner's TopK (planner/ops/topk.py), whose gradient scatters
dvalues back to the chosen positions:

    sort, argsort     TopK with k = the whole axis (largest = descending)
    argmax, argmin    TopK with k = 1 (argmin: of -x, so that NaN is chosen, as torch's is);
                      no dim: over the flattened tensor
    max.dim, min.dim  the first position of the max (min) or of a NaN, the values gathered
                      there (max_with_index: no TopK, which the CUDA executor lacks)
    argsort of an argsort's indices: those cast to float32 (exact below 2^24), sorted
    kthvalue, median  TopK of the k smallest, then its last (median: torch's lower median,
                      k = (n + 1) // 2); median without dim: of the flattened tensor
    cummax, cummin    CumMax (planner/ops/cummax.py: ties to the later index, as torch)
    logcumsumexp      log2(n) steps of y = logaddexp(y, y shifted by 2^k along the axis,
                      float32's lowest shifted in): a scan of the pointwise table's stable
                      LogAddExp, log2(n) roundings deep (a max-shifted cumsum underflows
                      where a line spans more than ~88)
    mode              the most frequent value (ties: the smallest), at its last index, as
                      torch: per element the count of its equals on the line (n^2 compares,
                      a NaN counting once, as torch's runs of a sorted line), then the value
                      gathered at that index (its gradient goes there)
    nanmedian         the sorted line (NaN last) read at position (count of numbers - 1) // 2,
                      a gather by a computed position (0 where all are NaN: NaN, as torch);
                      the indices gathered as float32 (exact below 2^24)

Without a dim, max() / min() / median() / nanmedian() share their gradient evenly among the
elements equal to the value (the NaNs where it is NaN), as torch's evenly_distribute_backward;
with a dim, the values' gradient goes to the returned index alone.

Ties: TopK orders equal values by lower index, so sort is stable (stable=True's answer, and a
valid one for stable=False), argmax / argmin give the first occurrence (as torch documents),
and kthvalue / median the position the stable order puts k-th (torch's kthvalue selects in
place and promises no particular one among equal values). NaN is above every number: sorted
last ascending and first descending, chosen by argmax and argmin, as in torch.
"""

from __future__ import annotations

import math

import numpy as np

from planner.dtypes import INTEGER_DTYPES
from planner.importers.kit import Const, Unsupported
from planner.importers.torch.context import UNAVAILABLE, NodeCtx, Value, rule


def _input(n: NodeCtx) -> tuple[str | Const, tuple[int, ...]]:
    x = n.tensor(0)
    if not n.dtype(x).startswith(("float", "bfloat")):
        raise Unsupported(f"{n.op} (of a {n.dtype(x)} tensor)")
    return x, n.shape(x)


def _positions(n: NodeCtx, x: str | Const) -> bool:
    """Is x the indices of a TopK (a sort's, an argsort's), whose values, below the axis'
    extent, float32 holds exactly?"""
    node = n.imp.builder.producer(x) if isinstance(x, str) else None
    return node is not None and node.op == "TopK" and node.outputs[1] == x and \
        n.shape(node.inputs[0])[node.attrs["axis"]] <= 2 ** 24


def _axis(n: NodeCtx, dim: object, rank: int) -> int:
    dim = -1 if dim is None else int(dim)  # type: ignore[call-overload]
    if not -max(rank, 1) <= dim < max(rank, 1):
        raise n.fail(f"dim {dim} out of range for rank {rank}")
    return dim % max(rank, 1)


def _lines(n: NodeCtx, x: str | Const, shape: tuple[int, ...], dim: object
           ) -> tuple[str | Const, tuple[int, ...], int]:
    """x, its shape and the axis to select along: the flattened x when dim is None, and a
    0-d x as one line of one."""
    if dim is None or not shape:
        flat = (math.prod(shape),)
        return (x if shape == flat else n.emit1("Reshape", [x], {"shape": list(flat)})), flat, 0
    return x, shape, _axis(n, dim, len(shape))


def _topk(n: NodeCtx, x: str | Const, k: int, axis: int, largest: bool) -> list[str]:
    return n.emit("TopK", [x], {"k": k, "axis": axis, "largest": largest}, n_out=2)


def _to_out(n: NodeCtx, v: str, shape: tuple[int, ...]) -> str:
    return v if n.shape(v) == tuple(shape) else n.emit1("Reshape", [v], {"shape": list(shape)})


@rule("aten.sort.default", "aten.sort.stable")
def sort(n: NodeCtx) -> Value:
    """An argsort of an argsort's indices (the inverse permutation: a masked autoencoder's
    ids_restore) sorts them as float32, exact below 2^24: its indices, not its values."""
    x = n.tensor(0)
    if _positions(n, x):
        x = n.emit1("Cast", [x], {"to": "float32"})
        return UNAVAILABLE, sort_lines(n, x, n.shape(x))[1]
    x, shape = _input(n)
    return sort_lines(n, x, shape)


def sort_lines(n: NodeCtx, x: str | Const, shape: tuple[int, ...]) -> tuple[str, str]:
    if n.op == "aten.sort.stable":
        dim, descending = n.kwargs.get("dim", -1), n.kwargs.get("descending", False)
    else:
        dim, descending = n.arg(1, "dim", -1), n.arg(2, "descending", False)
    x, lines, axis = _lines(n, x, shape, dim)
    values, indices = _topk(n, x, lines[axis], axis, bool(descending))
    return _to_out(n, values, shape), _to_out(n, indices, shape)


@rule("aten.argmax.default", "aten.argmin.default")
def argmax(n: NodeCtx) -> Value:
    x = n.tensor(0)
    if n.dtype(x) in INTEGER_DTYPES:
        return integer_argmax(n, x, n.shape(x))
    x, shape = _input(n)
    dim = n.arg(1, "dim")
    x, lines, axis = _lines(n, x, shape, dim)
    if n.op == "aten.argmin.default":
        x = n.emit1("Neg", [x])
    if lines[axis] == 0:
        raise n.fail(f"an arg{'min' if 'argmin' in n.op else 'max'} over an empty dim")
    return _to_out(n, _topk(n, x, 1, axis, True)[1], n.out_shape)


def integer_argmax(n: NodeCtx, x: str | Const, shape: tuple[int, ...]) -> str:
    """argmax / argmin of integers (token ids: CLIP's end-of-text position), exactly: the
    extremum along the line, then the smallest position holding it (the first occurrence, as
    torch) — no cast to a float, which would merge ids past 2^24."""
    x, lines, axis = _lines(n, x, shape, n.arg(1, "dim"))
    size = lines[axis]
    if size == 0:
        raise n.fail(f"an arg{'min' if 'argmin' in n.op else 'max'} over an empty dim")
    fold = "ReduceMin" if n.op == "aten.argmin.default" else "ReduceMax"
    best = n.emit1(fold, [x], {"axes": [axis], "keepdims": True})
    hit = n.emit1("Equal", [x, best])
    where = [1] * len(lines)
    where[axis] = size
    positions = n.const(np.arange(size, dtype=np.int64).reshape(where), "int64")
    first = n.emit1("Where", [hit, positions, n.const(size, "int64")])
    return _to_out(n, n.emit1("ReduceMin", [first], {"axes": [axis], "keepdims": True}),
                   n.out_shape)


@rule("aten.kthvalue.default", "aten.median.dim", "aten.median.default")
def kthvalue(n: NodeCtx) -> Value:
    x, shape = _input(n)
    if n.op == "aten.kthvalue.default":
        k, dim = int(n.arg(1, "k")), n.arg(2, "dim", -1)
    else:
        k, dim = 0, n.arg(1, "dim") if n.op == "aten.median.dim" else None
    x, lines, axis = _lines(n, x, shape, dim)
    size = lines[axis]
    k = k or (size + 1) // 2
    if not 1 <= k <= size:
        raise n.fail(f"k = {k} out of range [1, {size}] for dim {axis}")
    values, indices = _topk(n, x, k, axis, False)
    picked = []
    for v in (values, indices):
        if k > 1:
            v = n.emit1("Slice", [v], {"starts": [k - 1], "ends": [k], "axes": [axis]})
        picked.append(v)
    if n.op == "aten.median.default":
        return _to_out(n, evenly_distributed(n, x, picked[0]), n.out_shape)
    keep = bool(n.arg(3 if n.op == "aten.kthvalue.default" else 2, "keepdim", False))
    out = tuple(1 if j == axis else d for j, d in enumerate(lines)) if keep else \
        tuple(d for j, d in enumerate(lines) if j != axis)
    out = out if shape else ()
    return _to_out(n, picked[0], out), _to_out(n, picked[1], out)


@rule("aten.cummax.default", "aten.cummin.default")
def cummax(n: NodeCtx) -> Value:
    x, shape = _input(n)
    x, lines, axis = _lines(n, x, shape, n.arg(1, "dim"))
    values, indices = n.emit("CumMax", [x], {"axis": axis, "minimum": "cummin" in n.op},
                             n_out=2)
    return _to_out(n, values, shape), _to_out(n, indices, shape)


def evenly_distributed(n: NodeCtx, x: str | Const, value: str) -> str:
    """The 0-d `value` (one element of the 1-d x) with torch's evenly_distribute_backward: dy / k
    to each of the k elements equal to it, or to the k NaNs where it is NaN. Forward it is the
    value exactly: a max over the equal elements (-inf elsewhere), a min where the value is
    -inf (the max would count every -inf), a sum of the NaNs where it is NaN. Each branch's
    gradient is finite where it is not chosen, so Where passes 0 from it, never 0 * NaN."""
    dtype = n.dtype(x)
    value = n.emit1("Reshape", [n.emit1("StopGradient", [value])], {"shape": []})
    every = {"axes": [0], "keepdims": False}
    inf, zero = n.const(math.inf, dtype), n.const(0.0, dtype)
    hit = n.emit1("Equal", [x, value])
    up = n.emit1("ReduceMax", [n.emit1("Where", [hit, x, n.emit1("Neg", [inf])])], every)
    down = n.emit1("ReduceMin", [n.emit1("Where", [hit, x, inf])], every)
    nans = n.emit1("IsNaN", [x])
    count = n.emit1("ReduceSum", [n.emit1("Cast", [nans], {"to": dtype})], every)
    share = n.emit1("Reciprocal", [n.emit1("Max", [count, n.const(1.0, dtype)])])
    nan = n.emit1("Mul", [n.emit1("ReduceSum", [n.emit1("Where", [nans, x, zero])], every),
                          share])
    lowest = n.emit1("Equal", [value, n.emit1("Neg", [inf])])
    return n.emit1("Where", [n.emit1("IsNaN", [value]), nan,
                             n.emit1("Where", [lowest, down, up])])


class ReadLater(tuple):
    """A multi-output value whose output k is emitted when a node reads it (max.dim's
    indices: a TopK beside the values' MaxPool only where they are used)."""

    later: dict

    def __new__(cls, values: tuple, later: dict) -> ReadLater:
        made = super().__new__(cls, values)
        made.later = dict(later)
        return made

    def __getitem__(self, k):  # type: ignore[override]
        if isinstance(k, int) and k in self.later:
            made = self.later[k]
            if callable(made):
                self.later[k] = made = made()
            return made
        return super().__getitem__(k)


def max_with_index(n: NodeCtx) -> Value:
    """max.dim / min.dim (x, dim, keepdim) -> (values, indices): the first position holding the
    max (min), or the first NaN, as torch's; the values gathered there, so that their gradient
    goes to that index alone (torch's value_selecting_reduction_backward). ReduceMax, Equal and
    IndexGather, which both executors run (the positions as float32: exact below 2^24)."""
    x, shape = _input(n)
    dim = n.arg(1, "dim") if n.op.endswith(".dim") else None
    x, lines, axis = _lines(n, x, shape, dim)
    minimum = n.op.startswith("aten.min")
    size = lines[axis]
    if size == 0:
        raise n.fail("a max over an empty dim")
    if size > 2 ** 24:
        raise n.fail(f"a max over {size} elements (the planner's positions are exact below "
                     "2^24)")
    best = n.emit1("ReduceMin" if minimum else "ReduceMax", [n.emit1("StopGradient", [x])],
                   {"axes": [axis], "keepdims": True})  # NaN where the line holds one
    hit = n.emit1("Or", [n.emit1("Equal", [x, best]), n.emit1("IsNaN", [x])])
    where = [1] * len(lines)
    where[axis] = size
    positions = n.const(np.arange(size, dtype=np.float32).reshape(where), "float32")
    first = n.emit1("ReduceMin", [n.emit1("Where", [hit, positions,
                                                    n.const(float(size), "float32")])],
                    {"axes": [axis], "keepdims": True})
    index = n.emit1("Cast", [first], {"to": "int64"})
    values = n.emit1("IndexGather", [x, index], {"axis": axis, "mode": "elements",
                                                 "wrap": False})
    keep = bool(n.arg(2, "keepdim", False))
    out = tuple(1 if j == axis else d for j, d in enumerate(lines)) if keep else \
        tuple(d for j, d in enumerate(lines) if j != axis)
    out = out if shape and dim is not None else ()
    return _to_out(n, values, out), _to_out(n, index, out)


@rule("aten.nanmedian.default", "aten.nanmedian.dim")
def nanmedian(n: NodeCtx) -> Value:
    x, shape = _input(n)
    dim = n.arg(1, "dim") if n.op == "aten.nanmedian.dim" else None
    x, lines, axis = _lines(n, x, shape, dim)
    if lines[axis] == 0:
        raise n.fail("a nanmedian over an empty dim")
    if lines[axis] > 2 ** 24:
        raise n.fail(f"a nanmedian over {lines[axis]} elements (the planner's positions are "
                     "exact below 2^24)")
    values, indices = _topk(n, x, lines[axis], axis, False)  # NaN last
    numbers = n.emit1("Cast", [n.emit1("Not", [n.emit1("IsNaN", [x])])], {"to": "float32"})
    count = n.emit1("ReduceSum", [numbers], {"axes": [axis], "keepdims": True})
    half = n.emit1("Mul", [n.emit1("Add", [count, n.const(-1.0, "float32")]),
                           n.const(0.5, "float32")])
    position = n.emit1("Cast", [n.emit1("Max", [n.emit1("Floor", [half]),
                                                n.const(0.0, "float32")])], {"to": "int64"})
    where = {"axis": axis, "mode": "elements", "wrap": False}
    picked = n.emit1("IndexGather", [values, position], where)
    at = n.emit1("IndexGather", [n.emit1("Cast", [indices], {"to": "float32"}), position], where)
    at = n.emit1("Cast", [at], {"to": "int64"})
    if dim is None:
        return _to_out(n, evenly_distributed(n, x, picked), n.out_shape)
    keep = bool(n.arg(2, "keepdim", False))
    out = tuple(1 if j == axis else d for j, d in enumerate(lines)) if keep else \
        tuple(d for j, d in enumerate(lines) if j != axis)
    out = out if shape else ()
    return _to_out(n, picked, out), _to_out(n, at, out)


# shifted in where a line has no earlier element: float32's lowest, which logaddexp passes over
# (exp(lowest - y) is 0) as it would -inf, which Pad does not take
_LOWEST = -3.4028234663852886e38


@rule("aten.logcumsumexp.default")
def logcumsumexp(n: NodeCtx) -> Value:
    x, shape = _input(n)
    x, lines, axis = _lines(n, x, shape, n.arg(1, "dim"))
    size, y, step = lines[axis], x, 1
    while step < size:
        pads = [0] * (2 * len(lines))
        pads[axis] = step
        shifted = n.emit1("Slice", [n.emit1("Pad", [y], {"pads": pads, "value": _LOWEST})],
                          {"starts": [0], "ends": [size], "axes": [axis]})
        y = n.emit1("LogAddExp", [y, shifted])
        step *= 2
    return _to_out(n, y, shape)  # a line of one (or none): x itself


@rule("aten.mode.default")
def mode(n: NodeCtx) -> Value:
    x, shape = _input(n)
    x, lines, axis = _lines(n, x, shape, n.arg(1, "dim", -1))
    size = lines[axis]
    if size == 0:
        raise n.fail("a mode over an empty dim")
    if size > 2 ** 24:
        raise n.fail(f"a mode over {size} elements (the planner's positions are exact below "
                     "2^24)")
    pairs = n.emit1("Equal", [
        n.emit1("Reshape", [x], {"shape": [*lines[:axis + 1], 1, *lines[axis + 1:]]}),
        n.emit1("Reshape", [x], {"shape": [*lines[:axis], 1, *lines[axis:]]})])
    count = n.emit1("ReduceSum", [n.emit1("Cast", [pairs], {"to": "float32"})],
                    {"axes": [axis + 1], "keepdims": False})
    count = n.emit1("Max", [count, n.const(1.0, "float32")])  # NaN: a run of its own
    most = n.emit1("ReduceMax", [count], {"axes": [axis], "keepdims": True})
    chosen = n.emit1("And", [n.emit1("Equal", [count, most]),
                             n.emit1("Not", [n.emit1("IsNaN", [x])])])
    inf = n.const(math.inf, "float32")
    value = n.emit1("ReduceMin", [n.emit1("Where", [chosen, x, inf])],
                    {"axes": [axis], "keepdims": True})
    where = [1] * len(lines)
    where[axis] = size
    positions = n.const(np.arange(size, dtype=np.float32).reshape(where), "float32")
    last = n.emit1("ReduceMax", [n.emit1("Where", [n.emit1("Equal", [x, value]), positions,
                                                   n.const(0.0, "float32")])],
                   {"axes": [axis], "keepdims": True})  # a line of NaN alone: index 0
    index = n.emit1("Cast", [last], {"to": "int64"})
    picked = n.emit1("IndexGather", [x, index], {"axis": axis, "mode": "elements",
                                                 "wrap": False})
    keep = bool(n.arg(2, "keepdim", False))
    out = tuple(1 if j == axis else d for j, d in enumerate(lines)) if keep else \
        tuple(d for j, d in enumerate(lines) if j != axis)
    out = out if shape else ()
    return _to_out(n, picked, out), _to_out(n, index, out)
