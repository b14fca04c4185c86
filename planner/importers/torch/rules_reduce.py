"""ATen reductions to planner ops: one table row per ATen overload (which planner op, where its
`dim` and `keepdim` arguments sit), read by one rule; var, var_mean and the vector norms, whose
rows differ by more than an op name, get a rule each.

torch's dim semantics, for every row: `dim=None` and `dim=()` reduce every axis; a 0-d tensor
accepts dim 0 or -1 (and keepdim) and reduces nothing, so y is x's one element (f of it: the
norm of a scalar is |x|); negative dims count from the end; a dim given twice is refused.

    sum, mean                     ReduceSum, ReduceMean
    amax, amin, max, min          ReduceMax, ReduceMin, of floats and integers (the gradient
                                  shared among tied maxima, as torch's amax; max() of floats
                                  shares it among the NaNs where there are any: rules_sort's
                                  evenly_distributed); a float
                                  torch.max(x, dim) is the values gathered at the first max
                                  (rules_sort.max_with_index), whose gradient goes to the
                                  index it returns, as torch's
    prod, nansum, nanmean,        ReduceProd (of integers too: bool and int32 in int64, as
    logsumexp                     sum), ReduceNanSum, ReduceNanMean, ReduceLogSumExp
    any, all                      ReduceAny, ReduceAll (bool)
    linalg_vector_norm            ReduceNorm for finite ord; ReduceMax / ReduceMin of |x| for
                                  inf / -inf
    var(correction), var_mean     ReduceMean, Sub, Mul, ReduceSum, Scale (std and std_mean are
                                  sqrt of these in the exported graph)

PRESERVED are the overloads convert.py keeps from torch's decompositions, so that they reach
these rows whole: all (decomposed to any of logical_not), logsumexp, nansum and nanmean
(decomposed through isnan and where).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from planner.dtypes import INTEGER_DTYPES
from planner.importers.kit import Const, Unsupported
from planner.importers.torch.context import UNAVAILABLE, NodeCtx, Value, rule
from planner.importers.torch.rules_pointwise import as_dtype

PRESERVED = ("all.default", "all.dim", "all.dims", "logsumexp.default", "nansum.default",
             "nanmean.default")


@dataclass(frozen=True)
class Row:
    """An ATen overload: the planner op, the positions of its dim and keepdim arguments (None:
    it has none and reduces every axis), and whether it has a `dtype` keyword."""

    op: str
    dim: int | None = 1
    keepdim: int | None = 2
    values_and_indices: bool = False  # max.dim: (values, indices)


ROWS: dict[str, Row] = {
    "aten.sum.dim_IntList": Row("ReduceSum"),
    "aten.sum.default": Row("ReduceSum", None, None),
    "aten.mean.dim": Row("ReduceMean"),
    "aten.mean.default": Row("ReduceMean", None, None),
    "aten.amax.default": Row("ReduceMax"),
    "aten.amin.default": Row("ReduceMin"),
    "aten.max.default": Row("ReduceMax", None, None),
    "aten.min.default": Row("ReduceMin", None, None),
    "aten.max.dim": Row("ReduceMax", values_and_indices=True),
    "aten.min.dim": Row("ReduceMin", values_and_indices=True),
    "aten.prod.dim_int": Row("ReduceProd"),
    "aten.prod.default": Row("ReduceProd", None, None),
    "aten.nansum.default": Row("ReduceNanSum"),
    "aten.nanmean.default": Row("ReduceNanMean"),
    "aten.logsumexp.default": Row("ReduceLogSumExp"),
    "aten.any.default": Row("ReduceAny", None, None),
    "aten.any.dim": Row("ReduceAny"),
    "aten.any.dims": Row("ReduceAny"),
    "aten.all.default": Row("ReduceAll", None, None),
    "aten.all.dim": Row("ReduceAll"),
    "aten.all.dims": Row("ReduceAll"),
}

# the accumulation torch runs in int64 for a bool or int32 input
PROMOTED = ("ReduceSum", "ReduceProd")
FLOAT_ONLY = ("ReduceMax", "ReduceMin", "ReduceProd", "ReduceNanSum",
              "ReduceNanMean", "ReduceLogSumExp")
# ... of which these take int64 and int32 too (exact; planner/ops/reductions.py)
INTEGER_TOO = ("ReduceMax", "ReduceMin", "ReduceProd")


def reduced_axes(n: NodeCtx, dims: object, rank: int) -> list[int]:
    """torch's `dim` argument as the planner's `axes` (sorted; empty reduces every axis)."""
    if dims is None:
        return []
    dims = [dims] if isinstance(dims, int) else list(dims)
    if not all(isinstance(d, int) and not isinstance(d, bool) for d in dims):
        raise n.fail(f"dim {dims} must be ints")
    width = max(rank, 1)
    for d in dims:
        if not -width <= d < width:
            raise n.fail(f"dim {d} out of range for rank {rank}")
    axes = sorted({d % width for d in dims})
    if len(axes) != len(dims):
        raise n.fail(f"dim {dims} names an axis twice")
    return axes if rank else []


def _dims(n: NodeCtx, row_dim: int | None, name: str = "dim") -> object:
    return None if row_dim is None else n.arg(row_dim, name)


def _keep(n: NodeCtx, position: int | None) -> bool:
    return bool(n.arg(position, "keepdim", False)) if position is not None else False


def _same_dtype(n: NodeCtx, x: str | Const) -> None:
    dtype = n.kwargs.get("dtype")
    if dtype is not None and str(dtype).removeprefix("torch.") != n.dtype(x):
        raise Unsupported(f"{n.op} (to {str(dtype).removeprefix('torch.')} from {n.dtype(x)})")


def promoted_sum(n: NodeCtx, row: Row, x: str | Const) -> Value:
    """torch sums (and multiplies) bool and int32 tensors in int64 (count_nonzero's sum of a
    mask): a mask's in float32 (every executor's sums take float32), exact below 2^24 terms; an
    int32's in int64 (the CPU's integer kernels)."""
    axes = reduced_axes(n, _dims(n, row.dim), len(n.shape(x)))
    terms = math.prod(n.shape(x)[a] for a in axes) if axes else math.prod(n.shape(x))
    exact = n.dtype(x) == "bool" and terms < 1 << 24
    x = as_dtype(n, x, "float32" if exact else n.out_dtype)
    y = n.emit1(row.op, [x], {"axes": axes, "keepdims": _keep(n, row.keepdim)})
    return as_dtype(n, y, n.out_dtype)


@rule(*ROWS)
def reduction(n: NodeCtx) -> Value:
    row = ROWS[n.op]
    x = n.tensor(0)
    if row.op in PROMOTED and n.out_dtype and n.dtype(x) in ("bool", "int32", "int16", "int8",
                                                               "uint8"):
        return promoted_sum(n, row, x)
    _same_dtype(n, x)
    if row.op in FLOAT_ONLY and not n.dtype(x).startswith(("float", "bfloat")) and not (
            row.op in INTEGER_TOO and n.dtype(x) in INTEGER_DTYPES):
        raise Unsupported(f"{n.op} (of {n.dtype(x)} tensors)")
    axes = reduced_axes(n, _dims(n, row.dim), len(n.shape(x)))
    from planner.importers.torch.rules_sort import ReadLater, max_with_index

    floats = n.dtype(x).startswith(("float", "bfloat"))
    if n.op in ("aten.max.default", "aten.min.default") and floats and n.shape(x):
        # torch's max() shares its gradient among the maxima, NaNs included (amax's gives NaN)
        from planner.importers.torch.rules_sort import evenly_distributed

        flat = n.emit1("Reshape", [x], {"shape": [math.prod(n.shape(x))]})
        return evenly_distributed(n, flat, n.emit1(row.op, [flat], {"axes": [0],
                                                                    "keepdims": False}))
    if row.values_and_indices and floats:
        # torch's max.dim backward gives dvalues to the returned index alone (a tie is no
        # share): the values gathered at it (planner/importers/torch/rules_sort.py)
        return max_with_index(n)
    if row.op == "ReduceLogSumExp" and not math.prod(n.shape(x)):
        return empty_logsumexp(n, x)
    y = n.emit1(row.op, [x], {"axes": axes, "keepdims": _keep(n, row.keepdim)})
    if not row.values_and_indices:
        return y
    # an integer max.dim: exact values, no gradient; its indices refused where a node reads them
    return ReadLater((y, UNAVAILABLE), {1: lambda: max_with_index(n)[1]})


def empty_logsumexp(n: NodeCtx, x: str | Const) -> Const:
    """logsumexp of a tensor of no elements: the log of an empty sum, -inf, where torch's result
    has elements (a reduced axis of size 0), a constant: no element of x to differentiate."""
    return n.const(np.full(tuple(n.out_shape or ()), -np.inf), n.dtype(x))


@rule("aten.linalg_vector_norm.default")
def vector_norm(n: NodeCtx) -> Value:
    """ord inf / -inf: the max / min of |x| (their gradient shared among ties, as torch's);
    any other ord the p-norm."""
    x = n.tensor(0)
    _same_dtype(n, x)
    order = float(n.arg(1, "ord", 2))
    attrs = {"axes": reduced_axes(n, n.arg(2, "dim"), len(n.shape(x))),
             "keepdims": bool(n.arg(3, "keepdim", False))}
    if math.isinf(order):
        return n.emit1("ReduceMax" if order > 0 else "ReduceMin", [n.emit1("Abs", [x])], attrs)
    if math.isnan(order):
        raise n.fail("ord is NaN")
    return n.emit1("ReduceNorm", [x], {**attrs, "p": order})


@rule("aten.var.correction", "aten.var_mean.correction")
def var(n: NodeCtx) -> Value:
    """sum((x - mean(x))^2) / (count - correction) (Bessel's correction 1 by default);
    var_mean also gives the mean."""
    x = n.tensor(0)
    shape = n.shape(x)
    axes = reduced_axes(n, n.arg(1, "dim"), len(shape))
    correction = n.kwargs.get("correction", n.arg(2, "correction"))
    correction = 1.0 if correction is None else float(correction)
    count = math.prod(shape[k] for k in (axes or range(len(shape))))
    if count - correction <= 0:
        raise n.fail(f"variance of {count} elements with correction {correction}")
    keep = bool(n.kwargs.get("keepdim", n.arg(3, "keepdim", False)))
    mean = n.emit1("ReduceMean", [x], {"axes": axes, "keepdims": True})
    d = n.emit1("Sub", [x, mean])
    total = n.emit1("ReduceSum", [n.emit1("Mul", [d, d])], {"axes": axes, "keepdims": keep})
    v = n.emit1("Scale", [total], {"factor": 1.0 / (count - correction)})
    if n.op == "aten.var.correction":
        return v
    return v, mean if keep else n.emit1("Reshape", [mean], {"shape": list(n.shape(v))})
