"""The reductions beyond ReduceSum and ReduceMean, as one family: a row per op (its numpy
reference, its output dtype, its gradient's formula), one gradient op for them all, and one
kernel per backend reading the same rows (templates/common/reductions.h).

    ReduceMax        max over axes (NaN propagates)
    ReduceMin        min over axes
    ReduceProd       product over axes
    ReduceNanSum     sum over axes, NaNs left out (0 for none)
    ReduceNanMean    mean of the non-NaN elements (NaN where every one is NaN)
    ReduceLogSumExp  log(sum(exp(x - m))) + m, m the max (0 where it is infinite), as torch
    ReduceNorm       vector p-norm (sum |x|^p)^(1/p) for any finite p (p = 0 counts the
                     nonzero elements; a negative p gives 0 where some element is 0);
                     the inf and -inf norms are ReduceMax / ReduceMin of |x|
    ReduceAny        bool: some element is nonzero (NaN is nonzero); no gradient
    ReduceAll        bool: every element is nonzero; no gradient

Every op takes `axes` and `keepdims` as ReduceSum does (empty axes: every axis; so a 0-d x
reduces nothing and y = f(x) of its one element). The float ones take float inputs; Max, Min
and Prod integers too (exact, the product wrapping as two's complement, as torch's);
Any and All any dtype. A max, min or log-sum-exp over no elements is refused (torch raises too).

ReduceGrad [dy, x, y] -> dx (attr `of`: the forward op) is the gradient of each, PyTorch's
formula with y and dy broadcast back over the reduced axes:

    Max, Min    dy / k at the k elements equal to y, 0 elsewhere (torch.amax shares ties)
    Prod        dy * y / x when no element of the group is 0; else the product of the others
                at the one zero (0 at the rest), or 0 everywhere for two zeros or more
    NanSum      dy where x is not NaN, else 0;  NanMean: dy / count there (NaN for an
                all-NaN group, whose dy / 0 torch multiplies by 0)
    LogSumExp   dy * exp(x - y)
    Norm        p = 0: 0;  p = 1: sign(x) dy;  p < 1: sign(x) |x|^(p-1) dy y^(1-p) (0 at x = 0);
                otherwise x |x|^(p-2) dy / y^(p-1), 0 where y = 0 (torch's subgradient)

FLOPs: one per input element (a compare, multiply or add; a transcendental counted as one more
for LogSumExp and Norm), ReduceGrad three per element.

Example:
    >>> import numpy as np
    >>> from planner.ops import get_op
    >>> x = np.array([[1.0, 0.0, 3.0], [2.0, 2.0, 1.0]])
    >>> get_op("ReduceProd").reference([x], {"axes": [1], "keepdims": False})[0]
    array([0., 4.])
    >>> dy = np.ones(2)
    >>> y = get_op("ReduceMax").reference([x], {"axes": [1], "keepdims": False})[0]
    >>> get_op("ReduceGrad").reference([dy, x, y], {"of": "ReduceMax", "axes": [1],
    ...                                             "keepdims": False, "p": 2.0})[0]
    array([[0. , 0. , 1. ],
           [0.5, 0.5, 0. ]])
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from planner.dtypes import INTEGER_DTYPES
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
from planner.ops.reduce import reduce_axes, reduced_shape

if TYPE_CHECKING:
    from planner.ir.graph import Node

Fold = Callable[[np.ndarray, tuple[int, ...], Attrs], np.ndarray]
Slope = Callable[[np.ndarray, np.ndarray, np.ndarray, tuple[int, ...], Attrs], np.ndarray]


@dataclass(frozen=True)
class Row:
    """One reduction: y = fold(x, axes, attrs) with keepdims=True; slope(dy, x, y, axes,
    attrs) its dx, dy and y broadcast to x (None: no gradient); flops per input element."""

    fold: Fold
    slope: Slope | None
    flops: int = 1
    boolean: bool = False  # bool output, any input dtype
    nonempty: bool = False  # refused over no elements
    integer: bool = False  # integers too (planner.dtypes.INTEGER_DTYPES: exact, wrapping)
    doc: str = ""


def _quiet(fn: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    """numpy's warnings for an all-NaN group or a 0 ** negative are the values torch gives."""
    def run(*args):
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore", RuntimeWarning)
            return fn(*args)

    return run


def _logsumexp(x: np.ndarray, axes: tuple[int, ...], a: Attrs) -> np.ndarray:
    m = np.max(x, axis=axes, keepdims=True)
    m = np.where(np.isinf(m), np.zeros_like(m), m)
    return np.log(np.sum(np.exp(x - m), axis=axes, keepdims=True)) + m


def _norm(x: np.ndarray, axes: tuple[int, ...], a: Attrs) -> np.ndarray:
    p, ax = a["p"], np.abs(x)
    if p == 0:
        return np.sum(x != 0, axis=axes, keepdims=True).astype(x.dtype)
    if p == 1:
        return np.sum(ax, axis=axes, keepdims=True)
    if p == 2:
        return np.sqrt(np.sum(x * x, axis=axes, keepdims=True))
    return np.sum(ax ** x.dtype.type(p), axis=axes, keepdims=True) ** x.dtype.type(1 / p)


def _extremum_slope(dy, x, y, axes, a):
    hit = (x == y).astype(x.dtype)
    return dy * hit / np.sum(hit, axis=axes, keepdims=True)


def _prod_slope(dy, x, y, axes, a):
    zero = x == 0
    zeros = np.sum(zero, axis=axes, keepdims=True)
    # the product of the others at a lone zero: the product of the group with that 0 as a 1
    others = np.prod(np.where(zero, np.ones_like(x), x), axis=axes, keepdims=True)
    return np.where(zeros == 0, dy * y / x,
                    np.where((zeros == 1) & zero, dy * others, np.zeros_like(x)))


def _nansum_slope(dy, x, y, axes, a):
    return np.where(np.isnan(x), np.zeros_like(x), dy)


def _nanmean_slope(dy, x, y, axes, a):
    # as torch's nansum / count: an all-NaN group's dy / 0 times 0 is NaN there
    count = np.sum(~np.isnan(x), axis=axes, keepdims=True).astype(x.dtype)
    return dy / count * (~np.isnan(x)).astype(x.dtype)


def _norm_slope(dy, x, y, axes, a):
    p = a["p"]
    t = x.dtype.type
    if p == 0:
        return np.zeros_like(x)
    if p == 1:
        return np.sign(x) * dy
    if p < 1:
        scaled = np.where(x == 0, np.zeros_like(x), np.sign(x) * np.abs(x) ** t(p - 1))
        return scaled * dy * y ** t(1 - p)
    scaled = np.sign(x) * np.abs(x) ** t(p - 1) if p < 2 else x * np.abs(x) ** t(p - 2)
    return scaled * np.where(y == 0, np.zeros_like(y), dy / y ** t(p - 1))


def _fold(fn) -> Fold:
    return lambda x, axes, a: fn(x, axis=axes, keepdims=True)


ROWS: dict[str, Row] = {
    "ReduceMax": Row(_fold(np.max), _extremum_slope, nonempty=True, integer=True,
                     doc="y = max of x"),
    "ReduceMin": Row(_fold(np.min), _extremum_slope, nonempty=True, integer=True,
                     doc="y = min of x"),
    "ReduceProd": Row(_fold(np.prod), _prod_slope, integer=True, doc="y = product of x"),
    "ReduceNanSum": Row(_fold(np.nansum), _nansum_slope, doc="y = sum of x's non-NaN elements"),
    "ReduceNanMean": Row(_fold(np.nanmean), _nanmean_slope,
                         doc="y = mean of x's non-NaN elements"),
    "ReduceLogSumExp": Row(_logsumexp, lambda dy, x, y, axes, a: dy * np.exp(x - y), flops=3,
                           nonempty=True, doc="y = log(sum(exp(x)))"),
    "ReduceNorm": Row(_norm, _norm_slope, flops=2, doc="y = (sum |x|^p)^(1/p), p finite"),
    "ReduceAny": Row(_fold(np.any), None, boolean=True, doc="y = some element of x is nonzero"),
    "ReduceAll": Row(_fold(np.all), None, boolean=True, doc="y = every element of x is nonzero"),
}


def _axes(op: str, x: TensorType | np.ndarray, a: Attrs) -> tuple[int, ...]:
    return reduce_axes(op, a["axes"], len(x.shape))


def _count(shape: tuple[int, ...], axes: tuple[int, ...]) -> int:
    return int(np.prod([shape[k] for k in axes], dtype=np.int64))


def _infer(op: str):
    row = ROWS[op]

    def infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
        x = ins[0]
        if not row.boolean and not (row.integer and x.dtype in INTEGER_DTYPES):
            require_float(op, x)
        axes = _axes(op, x, a)
        if row.nonempty and _count(x.shape, axes) == 0:
            raise OpError(f"{op}: reduces no elements (axes {list(axes)} of shape "
                          f"{list(x.shape)})")
        return [TensorType(reduced_shape(x.shape, axes, a["keepdims"]),
                           "bool" if row.boolean else x.dtype)]

    return infer


def _reference(op: str):
    row = ROWS[op]

    def reference(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
        x = np.asarray(xs[0])
        axes = _axes(op, x, a)
        y = _quiet(row.fold)(x, axes, a)
        y = y if row.boolean else y.astype(x.dtype, copy=False)
        # (np.ascontiguousarray would make a 0-d result 1-d)
        return [np.array(y if a["keepdims"] else np.squeeze(y, axis=axes), order="C")]

    return reference


def _gradient(g: GradBuilder, node: Node, grads: list[str | None]) -> list[str | None]:
    dy, x = grads[0], node.inputs[0]
    if dy is None or not g.needs(x):
        return [None]
    attrs = {"of": node.op, "axes": node.attrs["axes"], "keepdims": node.attrs["keepdims"]}
    if "p" in node.attrs:
        attrs["p"] = node.attrs["p"]
    return [g.emit("ReduceGrad", [dy, x, node.outputs[0]], attrs)[0]]


_ATTRS = {"axes": Attr("ints", []), "keepdims": Attr("bool", False)}

for _name, _row in ROWS.items():
    register(OpDef(
        name=_name, arity=1, cost_class="reduction",
        attrs={**_ATTRS, "p": Attr("float", 2.0)} if _name == "ReduceNorm" else _ATTRS,
        infer=_infer(_name),
        flops=lambda ins, outs, a, k=_row.flops: k * ins[0].size,
        reference=_reference(_name),
        gradient=_gradient if _row.slope is not None else None,
        doc=f"{_row.doc} over axes (all when empty); keepdims keeps them with size 1.",
    ))


def _grad_infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    dy, x, y = ins
    row = ROWS.get(a["of"])
    if row is None or row.slope is None:
        raise OpError(f"ReduceGrad: 'of' = {a['of']!r} is not one of "
                      f"{sorted(k for k, r in ROWS.items() if r.slope is not None)}")
    require_float("ReduceGrad", x, "input x")
    want = TensorType(reduced_shape(x.shape, _axes("ReduceGrad", x, a), a["keepdims"]), x.dtype)
    if dy != want or y != want:
        raise OpError(f"ReduceGrad: dy {dy.dtype} {list(dy.shape)} and y {y.dtype} "
                      f"{list(y.shape)} must both be {want.dtype} {list(want.shape)}")
    return [x]


def _grad_reference(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    dy, x, y = (np.asarray(v) for v in xs)
    axes = _axes("ReduceGrad", x, a)
    kept = reduced_shape(x.shape, axes, True)
    dy, y = dy.reshape(kept), y.reshape(kept)
    dx = _quiet(ROWS[a["of"]].slope)(dy, x, y, axes, a)
    return [np.array(np.broadcast_to(dx, x.shape), dtype=x.dtype, order="C")]


register(OpDef(
    name="ReduceGrad", arity=3, cost_class="reduction",
    attrs={**_ATTRS, "of": Attr("str", required=True), "p": Attr("float", 2.0)},
    infer=_grad_infer,
    # a pass for the group's statistic (ties, zeros, NaNs), one for dx
    flops=lambda ins, outs, a: 3 * ins[1].size,
    reference=_grad_reference,
    doc="Gradient of a ReduceMax/Min/Prod/NanSum/NanMean/LogSumExp/Norm (attr `of`): "
        "[dy, x, y] -> dx.",
))
