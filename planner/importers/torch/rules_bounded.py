"""Sizes that depend on the data, planned at a bound: masked_select, nonzero (argwhere) and
boolean-mask indexing (`x[mask]`), whose torch.export output has an unbacked size `u0`.

The planner's arena is static, so such a value is planned at an upper bound B of its size,
which torch.export itself keeps for the symbol (record.py's `_bounds`): the input's numel for
masked_select, nonzero and `x[mask]` (torch's own range for them), or a tighter one the user
declares in forward with `torch._check(t.size(0) <= B)`. A size with no finite bound (an
`.item()` made a size) is refused in one line saying how to give one. The value holds its
selected rows first, in torch's order, and zeros past them; beside it the graph holds its
count (a float32 scalar: how many rows are real), one per symbol.

The zeros make a sum over the padded dim right with no more work, and nothing else is: a mean
must divide by the count, not the bound, and a pointwise op may turn a zero into something else
(exp(0) = 1). So every call reading a counted value is one of CONSUMERS' kinds, or refused in one
line naming it (never computed at the bound and silently wrong; planner/importers/torch/
bounded.py, which convert.py asks of every call):

    pointwise   an op torch tags pointwise (and casts, copies, views keeping the counted dim
                whole), or a row-wise one (bounded.ROWWISE: mm, addmm and linear of the rows,
                softmax over another dim): computed at the bound, its rows past the count
                put back to zero (a Where on `arange(B) < count`)
    sum         sum, sum over dims: as it is (the padded rows add zeros)
    mean        mean, mean over dims: the mean at the bound times B / count where the
                counted dim is reduced (torch's mean of nothing, 0/0 = nan, too); a mean
                over other dims is pointwise's case

A size read as a number (`t.numel()`, `t.shape[0]`) is refused where it is read
(record.py's DataSize), and so is a counted value the program returns (its caller would get
the bound's rows).

Each producer is a composition of ops the planner has, as nonzero_static is
(planner/importers/torch/rules_index.py): a kept row's place is the count of kept rows up to
it (a CumSum of the mask), and an IndexScatter writes each row there, every dropped row into
one extra row (row 0) that a Slice cuts off. Its gradient is the ops' own: the scatter's is a
gather of dy at those places, so d(masked_select) scatters back to the mask's positions and
gives zero elsewhere, as PyTorch's. No new kernel, so both executors run it. Where the data
hold more rows than a declared bound, a kept row's place is past the scatter's target: the
step refuses it as it refuses any index out of range (the CPU executor raises naming the
node; the CUDA one writes NaN, so the loss goes NaN), where torch's own check raises.

"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from planner.importers.kit import Const, Unsupported
from planner.importers.torch.context import NodeCtx, rule
from planner.importers.torch.record import Value as Traced

EXACT = 1 << 24  # float32 counts every row exactly below this (the CumSum of the mask)

PRODUCERS = frozenset({"aten.masked_select.default", "aten.nonzero.default",
                       "aten.index.Tensor"})


def _counted(n: NodeCtx) -> tuple[str, int]:
    """The symbol of the node's counted dim 0 and its bound."""
    out = n.node.out
    if not isinstance(out, Traced) or not out.counted or not out.counted[0] or \
            any(out.counted[1:]):
        raise Unsupported(f"{n.op} (its data-dependent size not the output's first dim)")
    return out.counted[0], out.shape[0]


def compacted(n: NodeCtx, rows: str | Const, keep: str | Const) -> str:
    """rows (N, *rest), float, with keep (N,) bool: the kept rows first, in order, then zeros,
    as (B, *rest), B the node's bound; its count (the rows kept) registered for the node's
    symbol. Row 0 of the scatter's target takes the dropped rows and is cut off; a kept row
    past a declared bound is an index past the target, which the step refuses (the CPU
    executor raises naming the node, the CUDA one writes NaN), as torch's check raises."""
    symbol, bound = _counted(n)
    shape = n.shape(rows)
    if max(shape[0], bound) >= EXACT:
        raise Unsupported(f"{n.op} (over {EXACT} rows)")
    kept = n.emit1("Cast", [keep], {"to": "float32"})
    after = n.emit1("CumSum", [kept], {"axis": 0})  # a kept row's place, from 1
    place = n.emit1("Cast", [n.emit1("Where", [keep, after, n.const(0, "float32")])],
                    {"to": "int64"})
    zeros = n.emit1("Zeros", [], {"shape": [bound + 1, *shape[1:]], "dtype": n.dtype(rows)})
    out = n.emit1("IndexScatter", [zeros, place, rows],
                  {"axis": 0, "mode": "rows", "reduce": "none", "wrap": False})
    n.counts[symbol] = n.emit1("ReduceSum", [kept], {"axes": [0], "keepdims": False})
    return n.emit1("Slice", [out], {"starts": [1], "ends": [bound + 1], "axes": [0]})


def _float(n: NodeCtx, x: str | Const) -> None:
    if not n.dtype(x).startswith(("float", "bfloat")):
        raise Unsupported(f"{n.op} (of a {n.dtype(x)} tensor)")


def _flat(n: NodeCtx, x: str | Const, shape: tuple[int, ...], lead: int) -> str | Const:
    """x broadcast to `shape` and its first `lead` dims merged into one."""
    if n.shape(x) != shape:
        x = n.emit1("Expand", [x], {"shape": list(shape)})
    want = [math.prod(shape[:lead]), *shape[lead:]]
    return x if list(n.shape(x)) == want else n.emit1("Reshape", [x], {"shape": want})


@rule("aten.masked_select.default")
def masked_select(n: NodeCtx) -> str:
    """x.masked_select(mask): x's elements where the mask (broadcast with x) holds, in C order,
    at the bound."""
    x, mask = n.tensor(0), n.tensor(1, "mask")
    _float(n, x)
    shape = tuple(np.broadcast_shapes(n.shape(x), n.shape(mask)))
    return compacted(n, _flat(n, x, shape, len(shape)), _flat(n, mask, shape, len(shape)))


@rule("aten.nonzero.default")
def nonzero(n: NodeCtx) -> str:
    """x.nonzero() (torch.argwhere): the coordinates of x's non-zero elements, C order, as
    int64 (B, rank) rows, zeros past the count."""
    x = n.tensor(0)
    shape = n.shape(x)
    if not shape:
        raise Unsupported(f"{n.op} (of a 0-d tensor)")
    keep = _flat(n, x, shape, len(shape))
    if n.dtype(x) != "bool":
        keep = n.emit1("NotEqual", [keep, n.const(0, n.dtype(x))])
    coords = np.stack(np.unravel_index(np.arange(math.prod(shape)), shape), axis=-1)
    rows = compacted(n, n.const(coords.astype(np.float32), "float32"), keep)
    return n.emit1("Cast", [rows], {"to": "int64"})


def masked_rows(n: NodeCtx, picked: list[tuple[int, Any]]) -> str:
    """x[mask] with a bool mask over x's leading dims: the rows where it holds, at the bound
    (aten.index.Tensor's rule hands a bool index here)."""
    x = n.tensor(0)
    _float(n, x)
    axis, mask = picked[0]
    lead = len(n.shape(mask))
    if len(picked) != 1 or axis != 0 or n.shape(x)[:lead] != n.shape(mask):
        raise Unsupported(f"{n.op} (a bool mask over other than x's leading dims)")
    return compacted(n, _flat(n, x, n.shape(x), lead), _flat(n, mask, n.shape(mask), lead))
