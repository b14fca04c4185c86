"""EmbeddingBag (nn.EmbeddingBag, F.embedding_bag): each bag, a run of ids, reduced to one row
of the table's width; EmbeddingBagGrad, its gradient into the table.

    EmbeddingBag [table (V, D), ids (N,), offsets (B,) or (B + 1,)[, weights (N,)]]
        -> y (B, D)[, argmax (B, D) int64 with mode "max"]
    EmbeddingBagGrad [ids, offsets, dy (B, D)[, weights (N,) | argmax]] -> dtable (V, D)
    EmbeddingBagWeightGrad [table, ids, offsets, dy (B, D)] -> dweights (N,), mode "sum"

Bag b holds the ids from offsets[b] up to offsets[b + 1], the last one up to N (with
`include_last_offset` offsets has B + 1 entries, the last one N in CSR form; it is not read,
as PyTorch's CPU kernel reads none). `mode`: "sum"
(each id's row times its per-sample weight, when given), "mean" (over the bag's ids), "max"
(per column; the first of equal values; argmax names the id chosen, -1 for an empty bag). An
empty bag is a row of zeros in each mode, as in PyTorch; ids equal to `padding_idx` (-1: none)
are left out of the bag (and of the mean's count). Ids outside [0, V), or offsets that do not
start at 0 and rise to at most N, are refused (by the reference and by the kernels, which read
nothing out of bounds).

The gradient: dtable[id] += dy[bag] (times the id's weight in "sum", over the bag's count in
"mean"); in "max" each column's dy goes to the id argmax names. A per-sample weight's is
EmbeddingBagWeightGrad: dweights[i] = dy[its bag] . table[ids[i]] (0 for a padding id), as
PyTorch's; D multiply-adds per id.

Example:
    >>> import numpy as np
    >>> from planner.ops import get_op
    >>> table = np.arange(8.0).reshape(4, 2)
    >>> get_op("EmbeddingBag").reference([table, np.array([1, 3, 0]), np.array([0, 2])],
    ...     {"mode": "mean", "include_last_offset": False, "padding_idx": -1})[0]
    array([[4., 5.],
           [0., 1.]])
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

MODES = ("sum", "mean", "max")
ATTRS = {"mode": Attr("str", "sum"), "include_last_offset": Attr("bool", False),
         "padding_idx": Attr("int", -1)}


def _check_inputs(op: str, ids: TensorType, offsets: TensorType, a: Attrs) -> int:
    """The number of bags."""
    if a["mode"] not in MODES:
        raise OpError(f"{op}: mode must be one of {list(MODES)}, got {a['mode']!r}")
    for what, t in (("ids", ids), ("offsets", offsets)):
        require_rank(op, t, 1, what)
        if t.dtype != "int64":
            raise OpError(f"{op}: {what} must be int64, got {t.dtype}")
    bags = offsets.shape[0] - (1 if a["include_last_offset"] else 0)
    if bags < 0:
        raise OpError(f"{op}: include_last_offset needs at least one offset")
    return bags


def _infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    if len(ins) not in (3, 4):
        raise OpError(f"EmbeddingBag takes 3 or 4 inputs, got {len(ins)}")
    table, ids, offsets = ins[:3]
    require_rank("EmbeddingBag", table, 2, "table")
    require_float("EmbeddingBag", table, "table")
    bags = _check_inputs("EmbeddingBag", ids, offsets, a)
    if len(ins) == 4:
        if a["mode"] != "sum":
            raise OpError("EmbeddingBag: per-sample weights only with mode 'sum' (as PyTorch)")
        if ins[3].shape != ids.shape or ins[3].dtype != table.dtype:
            raise OpError(f"EmbeddingBag: per-sample weights must be {table.dtype} of the ids' "
                          f"shape {list(ids.shape)}, got {ins[3].dtype} {list(ins[3].shape)}")
    y = TensorType((bags, table.shape[1]), table.dtype)
    return [y, TensorType(y.shape, "int64")] if a["mode"] == "max" else [y]


def bags(ids: np.ndarray, offsets: np.ndarray, vocab: int, a: Attrs) -> list[np.ndarray]:
    """Each bag's positions in ids (padding ids left out); OpError for bad ids or offsets."""
    n = len(ids)
    if ids.size and (ids.min() < 0 or ids.max() >= vocab):
        bad = ids[(ids < 0) | (ids >= vocab)][0]
        raise OpError(f"id {bad} out of range [0, {vocab})")
    starts = list(offsets[:len(offsets) - (1 if a["include_last_offset"] else 0)])
    ends = starts[1:] + [n]
    if starts and starts[0] != 0 or any(
            not 0 <= s <= e <= n for s, e in zip(starts, ends, strict=True)):
        raise OpError(f"offsets must start at 0 and rise to at most {n} (the ids' count), "
                      f"got {list(offsets)}")
    out = []
    for s, e in zip(starts, ends, strict=True):
        at = np.arange(s, e)
        out.append(at[ids[at] != a["padding_idx"]])
    return out


def _reference(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    table, ids, offsets = (np.asarray(x) for x in xs[:3])
    weights = np.asarray(xs[3]) if len(xs) == 4 else None
    groups = bags(ids, offsets, table.shape[0], a)
    y = np.zeros((len(groups), table.shape[1]), dtype=table.dtype)
    arg = np.full(y.shape, -1, dtype=np.int64)
    for b, at in enumerate(groups):
        if not at.size:
            continue
        rows = table[ids[at]]
        if a["mode"] == "max":
            first = rows.argmax(axis=0)  # the first of equal values
            y[b] = rows[first, np.arange(rows.shape[1])]
            arg[b] = ids[at][first]
            continue
        if weights is not None:
            rows = rows * weights[at][:, None]
        y[b] = rows.sum(axis=0) / (len(at) if a["mode"] == "mean" else 1)
    return [y, arg] if a["mode"] == "max" else [y]


def _gradient(g: GradBuilder, node: Node, grads: list[str | None]) -> list[str | None]:
    dy = grads[0]
    out: list[str | None] = [None] * len(node.inputs)
    if dy is None:
        return out
    table, ids, offsets = node.inputs[:3]
    if len(node.inputs) == 4 and node.attrs["mode"] != "max" and g.needs(node.inputs[3]):
        out[3] = g.emit("EmbeddingBagWeightGrad", [table, ids, offsets, dy], node.attrs)[0]
    if not g.needs(table):
        return out
    extra = node.outputs[1:] if node.attrs["mode"] == "max" else node.inputs[3:]
    out[0] = g.emit("EmbeddingBagGrad", [ids, offsets, dy, *extra],
                    {**node.attrs, "num_embeddings": g.type(table).shape[0]})[0]
    return out


def _grad_infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    if len(ins) not in (3, 4):
        raise OpError(f"EmbeddingBagGrad takes 3 or 4 inputs, got {len(ins)}")
    ids, offsets, dy = ins[:3]
    bags = _check_inputs("EmbeddingBagGrad", ids, offsets, a)
    require_float("EmbeddingBagGrad", dy, "dy")
    if dy.rank != 2 or dy.shape[0] != bags:
        raise OpError(f"EmbeddingBagGrad: dy must be ({bags}, D), got {list(dy.shape)}")
    if a["mode"] == "max":
        if len(ins) != 4 or ins[3].shape != dy.shape or ins[3].dtype != "int64":
            raise OpError(f"EmbeddingBagGrad: mode 'max' takes the forward's argmax, int64 "
                          f"of dy's shape {list(dy.shape)}")
    elif len(ins) == 4 and (ins[3].shape != ids.shape or ins[3].dtype != dy.dtype):
        raise OpError(f"EmbeddingBagGrad: per-sample weights must be {dy.dtype} of the ids' "
                      f"shape {list(ids.shape)}")
    if a["num_embeddings"] <= 0:
        raise OpError("EmbeddingBagGrad: num_embeddings must be positive")
    return [TensorType((a["num_embeddings"], dy.shape[1]), dy.dtype)]


def _grad_reference(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    ids, offsets, dy = (np.asarray(x) for x in xs[:3])
    extra = np.asarray(xs[3]) if len(xs) == 4 else None
    dtable = np.zeros((a["num_embeddings"], dy.shape[1]), dtype=dy.dtype)
    if a["mode"] == "max":
        bags(ids, offsets, a["num_embeddings"], a)
        chosen = extra >= 0
        cols = np.broadcast_to(np.arange(dy.shape[1]), dy.shape)
        np.add.at(dtable, (extra[chosen], cols[chosen]), dy[chosen])
        return [dtable]
    for b, at in enumerate(bags(ids, offsets, a["num_embeddings"], a)):
        if not at.size:
            continue
        rows = np.broadcast_to(dy[b], (len(at), dy.shape[1]))
        if extra is not None:
            rows = rows * extra[at][:, None]
        if a["mode"] == "mean":
            rows = rows / len(at)
        np.add.at(dtable, ids[at], rows)
    return [dtable]


def _bytes(ins: list[TensorType], outs: list[TensorType], a: Attrs) -> int:
    # the rows the ids select (one per id), not the whole table
    rows = ins[1].shape[0] * ins[0].nbytes // max(1, ins[0].shape[0])
    return sum(t.nbytes for t in ins[1:]) + rows + sum(t.nbytes for t in outs)


register(OpDef(
    name="EmbeddingBag", arity=None, min_inputs=3, attrs=ATTRS, cost_class="scatter",
    recompute="expensive", infer=_infer,
    flops=lambda ins, outs, a: ins[1].shape[0] * ins[0].shape[1],
    bytes_moved=_bytes, reference=_reference, gradient=_gradient, nondiff_inputs=(1, 2),
    doc="y[b] = the bag's table rows reduced (sum with per-sample weights, mean, max), bag b "
        "the ids from offsets[b] to the next offset (nn.EmbeddingBag).",
))

register(OpDef(
    name="EmbeddingBagGrad", arity=None, min_inputs=3,
    attrs={**ATTRS, "num_embeddings": Attr("int", required=True)}, cost_class="scatter",
    infer=_grad_infer, flops=lambda ins, outs, a: ins[0].shape[0] * ins[2].shape[1],
    reference=_grad_reference, nondiff_inputs=(0, 1, 3),
    doc="dtable: each bag's dy added to the rows of its ids (weighted, or over the count for "
        "mean; max: to the id argmax names per column).",
))


def _weight_grad_infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    if len(ins) != 4:
        raise OpError(f"EmbeddingBagWeightGrad takes [table, ids, offsets, dy], got {len(ins)}")
    table, ids, offsets, dy = ins
    if a["mode"] != "sum":
        raise OpError("EmbeddingBagWeightGrad: per-sample weights only with mode 'sum'")
    bags_ = _check_inputs("EmbeddingBagWeightGrad", ids, offsets, a)
    require_float("EmbeddingBagWeightGrad", dy, "dy")
    if table.rank != 2 or dy.shape != (bags_, table.shape[1]) or table.dtype != dy.dtype:
        raise OpError(f"EmbeddingBagWeightGrad: dy must be {dy.dtype} ({bags_}, D) of a (V, D) "
                      f"table, got {list(dy.shape)} and {table.dtype} {list(table.shape)}")
    return [TensorType(ids.shape, dy.dtype)]


def _weight_grad_reference(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    table, ids, offsets, dy = (np.asarray(x) for x in xs)
    dw = np.zeros(ids.shape, dtype=dy.dtype)
    for b, at in enumerate(bags(ids, offsets, table.shape[0], a)):
        dw[at] = table[ids[at]] @ dy[b]
    return [dw]


register(OpDef(
    name="EmbeddingBagWeightGrad", arity=4, attrs=ATTRS, cost_class="scatter",
    infer=_weight_grad_infer, flops=lambda ins, outs, a: 2 * ins[1].shape[0] * ins[0].shape[1],
    bytes_moved=lambda ins, outs, a: _bytes(ins[:3], outs, a) + ins[3].nbytes,
    reference=_weight_grad_reference, nondiff_inputs=(0, 1, 2, 3),
    doc="dweights[i] = dy[bag of i] . table[ids[i]] (0 for padding ids): the per-sample "
        "weights' gradient of a sum EmbeddingBag.",
))
