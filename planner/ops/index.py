"""The index family: reading (IndexGather) and writing (IndexScatter) the elements of a float
tensor that an int64 index names along one axis. Every ATen index op is one of the two
(planner/importers/torch/rules_index.py): torch.gather, index_select, take and `x[idx]` read;
scatter, scatter_add, scatter_reduce, index_put, index_add, index_copy and index_fill write.

    IndexGather  [x, index]              -> y
    IndexScatter [x, index, src]         -> out (x's shape)
    IndexScatter [x, index] value=v      -> out (every written element takes v)

Two ways of naming elements (`mode`), with x seen as (outer, n, inner) around `axis`:
  - "elements" (torch.gather / scatter): index has x's rank, each of its dims but `axis` at
    most x's; y (and src) has index's shape, y[..., i, ...] = x[..., index[..., i, ...], ...].
  - "rows" (index_select / index_put / index_add): index of any shape names whole slices;
    y (and src) is x.shape[:axis] + index.shape + x.shape[axis + 1:].
An index is refused outside [0, n), or [-n, n) with `wrap` (a negative one counts from the
end, as index_put, index_fill, take and `x[idx]` do; gather, scatter and index_select refuse
it in PyTorch): at import when the index is a constant, at run time (the kernel raises naming
the node, before it reads or writes anything) when it is computed.

IndexScatter's `reduce` is one row of REDUCTIONS: "none" writes (where an index repeats, the
last write wins: the order along the index, as PyTorch's CPU kernels), the others combine
every src element written to a place, with that place's x value too when `include_self`
(torch.scatter_reduce); a place nothing is written to keeps x. "mean" divides by the count of
values combined.

Gradients (PyTorch's derivatives.yaml): IndexGather's is an IndexScatter-sum of dy into zeros;
IndexScatter's dsrc = IndexGather(dy) (dy / count for "mean"), dx = dy where nothing was
written and, at the written places, 0 ("none", or include_self=False), dy ("sum") or
dy / count ("mean"). amax and amin (of a src) split each place's dy evenly between x's value
and the src values equal to the result (IndexScatterGrad, PyTorch's rule, which counts x's value
even with include_self=False and then gives x no gradient at the places written); prod gives
each factor the product of the place's other factors (exactly, zeros included: PyTorch's
answer), x's being the product of the src values written there.

Example:
    >>> import numpy as np
    >>> from planner.ops import get_op
    >>> x = np.arange(6.0).reshape(2, 3)
    >>> get_op("IndexGather").reference([x, np.array([[2, 0], [1, 1]])],
    ...                                 {"axis": 1, "mode": "elements", "wrap": False})[0]
    array([[2., 0.],
           [4., 4.]])
    >>> get_op("IndexScatter").reference(
    ...     [np.zeros(4), np.array([1, 3, 1]), np.array([1.0, 2.0, 5.0])],
    ...     {"axis": 0, "mode": "rows", "reduce": "sum", "include_self": True, "wrap": False})[0]
    array([0., 6., 0., 2.])
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from planner.ops.base import (
    Attr,
    Attrs,
    GradBuilder,
    OpDef,
    OpError,
    TensorType,
    norm_axis,
    register,
    require_float,
)

if TYPE_CHECKING:
    from planner.ir.graph import Node

MODES = ("elements", "rows")


@dataclass(frozen=True)
class Reduction:
    """One way IndexScatter combines the values written to a place: the value it starts from
    without x (`identity`), numpy's unbuffered combination (`ufunc.at`), and whether the
    result is divided by the count (mean)."""

    identity: float
    ufunc: Any
    mean: bool = False


REDUCTIONS: dict[str, Reduction | None] = {
    "none": None,
    "sum": Reduction(0.0, np.add),
    "prod": Reduction(1.0, np.multiply),
    "mean": Reduction(0.0, np.add, mean=True),
    "amax": Reduction(-math.inf, np.maximum),   # NaN wins, as in PyTorch
    "amin": Reduction(math.inf, np.minimum),
}

GATHER_ATTRS = {"axis": Attr("int", required=True), "mode": Attr("str", "rows"),
                "wrap": Attr("bool", False)}
SCATTER_ATTRS = {**GATHER_ATTRS, "reduce": Attr("str", "none"),
                 "include_self": Attr("bool", True), "value": Attr("float", optional=True)}


def gathered_shape(op: str, x: TensorType, index: TensorType, a: Attrs) -> tuple[int, ...]:
    """The shape of IndexGather's y (and IndexScatter's src); OpError for a misfit."""
    require_float(op, x)
    if index.dtype != "int64":
        raise OpError(f"{op}: index must be an int64 tensor, got {index.dtype}")
    if a["mode"] not in MODES:
        raise OpError(f"{op}: mode must be one of {list(MODES)}, got {a['mode']!r}")
    if x.rank == 0:
        raise OpError(f"{op}: input must have rank >= 1, got a scalar")
    axis = norm_axis(op, a["axis"], x.rank)
    if a["mode"] == "rows":
        return x.shape[:axis] + index.shape + x.shape[axis + 1:]
    if index.rank != x.rank or any(index.shape[k] > x.shape[k] for k in range(x.rank)
                                   if k != axis):
        raise OpError(f"{op}: index of shape {list(index.shape)} does not fit an input of "
                      f"shape {list(x.shape)} (the same rank, no dim but {axis} larger)")
    return index.shape


def check_range(index: np.ndarray, axis: int, n: int, wrap: bool) -> None:
    """OpError naming the first index outside [0, n) ([-n, n) with wrap)."""
    low = -n if wrap else 0
    if index.size and (index.min() < low or index.max() >= n):
        bad = index[(index < low) | (index >= n)].flat[0]
        raise OpError(f"index {bad} out of range [{low}, {n}) for dim {axis} of size {n}")


def positions(x_shape: tuple[int, ...], index: np.ndarray, a: Attrs) -> np.ndarray:
    """The flat position in x of each gathered (scattered) element, in y's (src's) order;
    OpError for an index out of range."""
    axis = norm_axis("IndexGather", a["axis"], len(x_shape))
    n = x_shape[axis]
    index = np.asarray(index, dtype=np.int64)
    check_range(index, axis, n, a["wrap"])
    index = np.where(index < 0, index + n, index)
    if a["mode"] == "rows":
        outer, inner = math.prod(x_shape[:axis]), math.prod(x_shape[axis + 1:])
        pos = (np.arange(outer)[:, None, None] * n + index.reshape(1, -1, 1)) * inner \
            + np.arange(inner)[None, None, :]
        return pos.reshape(-1)
    coords = list(np.indices(index.shape, sparse=True))
    coords[axis] = index
    return np.ravel_multi_index(tuple(np.broadcast_arrays(*coords)), x_shape).reshape(-1)


# ---- IndexGather ----------------------------------------------------------------------------

def _gather_infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    x, index = ins
    return [TensorType(gathered_shape("IndexGather", x, index, a), x.dtype)]


def _gather_reference(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    x, index = np.asarray(xs[0]), np.asarray(xs[1])
    shape = gathered_shape("IndexGather", TensorType(x.shape, str(x.dtype)),
                           TensorType(index.shape, "int64"), a)
    return [x.reshape(-1)[positions(x.shape, index, a)].reshape(shape)]


def _gather_gradient(g: GradBuilder, node: Node, grads: list[str | None]) -> list[str | None]:
    dy = grads[0]
    x, index = node.inputs
    if dy is None or not g.needs(x):
        return [None, None]
    t = g.type(x)
    zeros = g.emit("Zeros", [], {"shape": list(t.shape), "dtype": t.dtype})[0]
    return [g.emit("IndexScatter", [zeros, index, dy],
                   {**_where(node.attrs), "reduce": "sum"})[0], None]


def _where(a: Attrs) -> Attrs:
    """The attrs naming the same elements (an op's gradient reads or writes those)."""
    return {k: a[k] for k in ("axis", "mode", "wrap")}


def _bytes_gather(ins: list[TensorType], outs: list[TensorType], a: Attrs) -> int:
    # reads the index and only the elements it names (one output's worth), not all of x
    return ins[1].nbytes + 2 * outs[0].nbytes


register(OpDef(
    name="IndexGather", arity=2, cost_class="scatter", attrs=GATHER_ATTRS,
    infer=_gather_infer, flops=lambda ins, outs, a: 0, bytes_moved=_bytes_gather,
    reference=_gather_reference, gradient=_gather_gradient, nondiff_inputs=(1,),
    doc="y = the elements of x that an int64 index names along axis (torch.gather with "
        "mode=elements; index_select, take, x[idx] with mode=rows).",
))


# ---- IndexScatter ---------------------------------------------------------------------------

def _scatter_check(ins: list[TensorType], a: Attrs) -> tuple[int, ...]:
    if a["reduce"] not in REDUCTIONS:
        raise OpError(f"IndexScatter: reduce must be one of {list(REDUCTIONS)}, got "
                      f"{a['reduce']!r}")
    x, index = ins[0], ins[1]
    shape = gathered_shape("IndexScatter", x, index, a)
    if len(ins) == 2:
        if "value" not in a:
            raise OpError("IndexScatter: give a src input or a value attribute")
    elif len(ins) == 3:
        src = ins[2]
        if "value" in a:
            raise OpError("IndexScatter: a src input and a value attribute both given")
        if src.dtype != x.dtype or src.shape != shape:
            raise OpError(f"IndexScatter: src must be {x.dtype} of shape {list(shape)}, got "
                          f"{src.dtype} {list(src.shape)}")
    else:
        raise OpError(f"IndexScatter takes 2 or 3 inputs, got {len(ins)}")
    return shape


def _scatter_infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    _scatter_check(ins, a)
    return [ins[0]]


def _scatter_reference(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    x, index = np.asarray(xs[0]), np.asarray(xs[1])
    types = [TensorType(x.shape, str(x.dtype)), TensorType(index.shape, "int64")]
    if len(xs) == 3:
        types.append(TensorType(np.shape(xs[2]), str(np.asarray(xs[2]).dtype)))
    shape = _scatter_check(types, a)
    pos = positions(x.shape, index, a)
    src = (np.asarray(xs[2]) if len(xs) == 3 else np.full(shape, a["value"], x.dtype))
    src = src.reshape(-1)
    out = x.copy().reshape(-1)
    rule = REDUCTIONS[a["reduce"]]
    if rule is None:
        # the last write to a place wins: keep each place's last occurrence
        last = len(pos) - 1 - np.unique(pos[::-1], return_index=True)[1]
        out[pos[last]] = src[last]
        return [out.reshape(x.shape)]
    touched = np.zeros(out.shape, dtype=bool)
    touched[pos] = True
    if not a["include_self"]:
        out[touched] = rule.identity
    with np.errstate(all="ignore"):
        rule.ufunc.at(out, pos, src)
        if rule.mean:
            count = np.full(out.shape, 1.0 if a["include_self"] else 0.0, dtype=out.dtype)
            np.add.at(count, pos, 1.0)
            out[touched] = out[touched] / count[touched]
    return [out.reshape(x.shape)]


def _scatter_gradient(g: GradBuilder, node: Node, grads: list[str | None]) -> list[str | None]:
    dy = grads[0]
    out: list[str | None] = [None] * len(node.inputs)
    wanted = [g.needs(t) for t in node.inputs]
    if dy is None or not (wanted[0] or (len(node.inputs) == 3 and wanted[2])):
        return out
    a = node.attrs
    x, index = node.inputs[:2]
    where = _where(a)
    if a["reduce"] in ("amax", "amin", "prod") and len(node.inputs) == 3:
        dx, dsrc = g.emit("IndexScatterGrad", [x, index, node.inputs[2], node.outputs[0], dy],
                          {**where, "include_self": a["include_self"],
                           "reduce": "prod" if a["reduce"] == "prod" else "amax"})
        return [dx if wanted[0] else None, None, dsrc if wanted[2] else None]
    if a["reduce"] not in ("none", "sum", "mean"):
        raise OpError(f"IndexScatter: no gradient for reduce={a['reduce']!r} of a value (of a "
                      f"src tensor it has one)")
    per_place = dy
    if a["reduce"] == "mean":
        t = g.type(x)
        ones = g.emit("Fill", [], {"shape": list(t.shape), "value": 1.0, "dtype": t.dtype})[0]
        count = g.emit("IndexScatter", [ones, index],
                       {**where, "reduce": "sum", "value": 1.0,
                        "include_self": a["include_self"]})[0]
        per_place = g.emit("Div", [dy, count])[0]
    if wanted[0]:
        if a["reduce"] == "none" or not a["include_self"]:
            out[0] = g.emit("IndexScatter", [dy, index], {**where, "value": 0.0})[0]
        else:
            out[0] = per_place
    if len(node.inputs) == 3 and wanted[2]:
        out[2] = g.emit("IndexGather", [per_place, index], where)[0]
    return out


def _scatter_scratch(ins: list[TensorType], outs: list[TensorType], a: Attrs,
                     threads: int) -> int:
    # "mean" counts the values reaching each place of a line, per thread
    if a["reduce"] != "mean":
        return 0
    return 8 * threads * ins[0].shape[norm_axis("IndexScatter", a["axis"], ins[0].rank)]


register(OpDef(
    name="IndexScatter", arity=None, min_inputs=2, cost_class="scatter", attrs=SCATTER_ATTRS,
    infer=_scatter_infer,
    # one combination per written element
    flops=lambda ins, outs, a: 0 if a["reduce"] == "none" else
    math.prod(gathered_shape("IndexScatter", ins[0], ins[1], a)),
    reference=_scatter_reference, gradient=_scatter_gradient, nondiff_inputs=(1,),
    # the kernel copies x to the output (nothing when they share bytes), then writes
    in_place=lambda n: (0,), scratch=_scatter_scratch,
    # the CUDA kernel's "mean" counts in a float per place of x
    gpu_scratch=lambda ins, outs, a: 4 * ins[0].size if a["reduce"] == "mean" else 0,
    doc="out = x, then src (or value) written to the elements an int64 index names along "
        "axis, combined by reduce (none, sum, prod, mean, amax, amin; include_self).",
))


# ---- IndexScatterGrad: amax / amin ----------------------------------------------------------

def _extreme_grad_infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    if len(ins) != 5:
        raise OpError(f"IndexScatterGrad takes 5 inputs [x, index, src, out, dy], got {len(ins)}")
    x, index, src, out, dy = ins
    if a["reduce"] not in ("amax", "prod"):
        raise OpError(f"IndexScatterGrad: reduce must be 'amax' (amax, amin) or 'prod', got "
                      f"{a['reduce']!r}")
    _scatter_check([x, index, src], a)
    if out != x or dy != x:
        raise OpError(f"IndexScatterGrad: out and dy must be {x.dtype} of x's shape "
                      f"{list(x.shape)}")
    return [x, src]


def _extreme_grad_reference(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    x, index, src, out, dy = (np.asarray(v) for v in xs)
    pos = positions(x.shape, index, a)
    if a["reduce"] == "prod":
        return _prod_grad(x, pos, src, dy, a["include_self"])
    value = out.reshape(-1)[pos]
    src_is = src.reshape(-1) == value
    self_is = x.reshape(-1) == out.reshape(-1)
    count = self_is.astype(x.dtype)
    np.add.at(count, pos, src_is.astype(x.dtype))
    with np.errstate(all="ignore"):
        share = np.where(count > 0, dy.reshape(-1) / count, 0).astype(x.dtype)
    dx = np.where(self_is, share, 0).astype(x.dtype)
    if not a["include_self"]:
        dx[pos] = 0
    dsrc = np.where(src_is, share[pos], 0).astype(x.dtype)
    return [dx.reshape(x.shape), dsrc.reshape(src.shape)]


def _prod_grad(x: np.ndarray, pos: np.ndarray, src: np.ndarray, dy: np.ndarray,
               include_self: bool) -> list[np.ndarray]:
    """Each factor of a place's product gets dy times the product of the others, in index
    order (the kernels' order)."""
    flat, dyf = src.reshape(-1), dy.reshape(-1)
    dx = dy.reshape(-1).copy()
    dsrc = np.zeros_like(flat)
    if pos.size == 0:  # no src element scattered: dx is dy, as the loop below would leave it
        return [dx.reshape(x.shape), dsrc.reshape(src.shape)]
    order = np.argsort(pos, kind="stable")
    places, starts = np.unique(pos[order], return_index=True)
    for p, group in zip(places, np.split(order, starts[1:]), strict=True):
        factors = np.concatenate([x.reshape(-1)[p:p + 1] if include_self else flat[:0],
                                  flat[group]])
        before = np.concatenate([[1], np.cumprod(factors)[:-1]]).astype(x.dtype)
        after = np.concatenate([np.cumprod(factors[::-1])[::-1][1:], [1]]).astype(x.dtype)
        others = before * after * dyf[p]
        dsrc[group] = others[1:] if include_self else others
        dx[p] = others[0] if include_self else 0
    return [dx.reshape(x.shape), dsrc.reshape(src.shape)]


register(OpDef(
    name="IndexScatterGrad", arity=5, cost_class="scatter",
    attrs={**GATHER_ATTRS, "include_self": Attr("bool", True), "reduce": Attr("str", "amax")},
    infer=_extreme_grad_infer, flops=lambda ins, outs, a: 2 * ins[2].size + ins[0].size,
    reference=_extreme_grad_reference, nondiff_inputs=(0, 1, 2, 3),
    # the CPU kernel's counts: a line's places, per thread; the CUDA kernel's, one per place
    scratch=lambda ins, outs, a, threads: 4 * threads * ins[0].shape[
        norm_axis("IndexScatterGrad", a["axis"], ins[0].rank)],
    gpu_scratch=lambda ins, outs, a: 4 * ins[0].size,
    doc="[x, index, src, out, dy] -> [dx, dsrc] of an IndexScatter amax / amin (reduce=amax: "
        "dy split evenly between x and the src values equal to out at each place) or prod "
        "(each factor: dy times the product of the others).",
))
