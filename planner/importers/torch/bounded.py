"""The calls that read a value whose size depends on the data (planner/importers/torch/
rules_bounded.py: planned at a bound, zeros past its count): which kind each is, or a one-line
refusal naming it, and its result as the count makes it. convert.py asks `consumer` of every
call before its rule runs and hands the rule's result to `respected`.

    >>> CONSUMERS["aten.mean.default"], CONSUMERS["aten.sum.dim_IntList"]
    ('mean', 'sum')
"""

from __future__ import annotations

from typing import Any

import numpy as np

from planner.importers.torch.context import NodeCtx, TorchImportError, _in
from planner.importers.torch.record import Call
from planner.importers.torch.record import Value as Traced
from planner.importers.torch.rules_bounded import PRODUCERS

CONSUMERS = {"aten.sum.default": "sum", "aten.sum.dim_IntList": "sum",
             "aten.mean.default": "mean", "aten.mean.dim": "mean",
             # pointwise, though torch does not tag them so
             "aten._to_copy.default": "pointwise", "aten.clone.default": "pointwise",
             "aten.alias.default": "pointwise", "aten.detach.default": "pointwise",
             # views keeping the counted dim whole: its rows move, each whole
             "aten.permute.default": "pointwise", "aten.transpose.int": "pointwise",
             "aten.unsqueeze.default": "pointwise", "aten.expand.default": "pointwise",
             # reads only the dtype and device: no value
             "aten._assert_tensor_metadata.default": "check"}


def consumer(call: Call, metas: dict[str, Any]) -> str:
    """The kind of a call that reads or makes a counted value ("" for none): producer,
    pointwise, sum or mean; TorchImportError, in one line naming the call, for any other."""
    read = [(r, metas[r]) for r in call.reads()
            if isinstance(metas.get(r), Traced) and any(metas[r].counted)]
    outs = call.out if isinstance(call.out, tuple) else (call.out,)
    made = [v for v in outs if isinstance(v, Traced) and any(v.counted)]
    where = f"node {call.name!r}{_in(call.place or call.module)} ({call.target})"
    if not read and not made:
        return ""
    if not read and call.target in PRODUCERS:
        return "producer"
    if not read:
        raise TorchImportError(
            f"{where}: its output size depends on the data; the planner bounds masked_select, "
            f"nonzero (argwhere) and x[mask] only: use a fixed-size form (torch.where with a "
            f"mask, nonzero_static)")
    symbols = {s for _, v in read for s in v.counted if s}
    kind = CONSUMERS.get(call.target) or \
        ("pointwise" if _pointwise(call.target) or _rowwise(call, read) else "")
    name, value = read[0]
    if not kind or len(symbols) > 1 or any(v.dtype.startswith("complex") for v in made):
        raise TorchImportError(
            f"{where}: reads {name!r}, whose size {dims_of(value)} depends on the data (planned "
            f"at its bound {list(value.shape)}, zeros past the count); only pointwise and "
            f"row-wise ops, sum and mean of one such size respect the count: reduce it with "
            f"sum() or mean() first")
    return kind


def dims_of(value: Traced) -> str:
    """[u0, 3]: a counted value's dims, each data-dependent one by its symbol."""
    return "[" + ", ".join(s or str(d) for s, d in zip(value.counted, value.shape,
                                                       strict=True)) + "]"


# Ops whose every output row along the counted dim is computed from that row alone (of the
# argument at this position, the only counted one), where it is a row: a product's rows (mm,
# addmm, linear's input but its last dim), a softmax over another dim. Their rows past the
# count are set back to zero as a pointwise op's are (linear's bias, softmax of zeros).
ROWWISE = {"aten.mm.default": 0, "aten.addmm.default": 1, "aten.linear.default": 0,
           "aten._log_softmax.default": 0, "aten._softmax.default": 0}


def _rowwise(call: Call, read: list[tuple[str, Traced]]) -> bool:
    at = ROWWISE.get(call.target)
    rows = call.args[at] if at is not None and at < len(call.args) else None
    if len(read) != 1 or read[0][0] != getattr(rows, "name", None):
        return False
    value = read[0][1]
    rank = len(value.shape)
    axis = next(k for k, s in enumerate(value.counted) if s)
    if call.target.startswith("aten._log_softmax") or call.target.startswith("aten._softmax"):
        return int(call.args[1]) % rank != axis
    return axis != rank - 1 if call.target == "aten.linear.default" else axis == 0


def _pointwise(target: str) -> bool:
    import torch

    from planner.importers.torch.targets import resolve

    op = resolve(target)
    return op is not None and torch.Tag.pointwise in op.tags


def respected(n: NodeCtx, call: Call, value: Any, kind: str) -> Any:
    """The call's result as the count makes it: a mean over the counted dim rescaled from the
    bound to the count, a counted result's rows past the count put back to zero."""
    out = call.out
    if not isinstance(value, str) or not isinstance(out, Traced) or kind == "producer":
        return value
    if any(out.counted):
        return _zeroed(n, value, out)
    if kind != "mean":
        return value
    value_in = n.traced(0, "self")
    symbol, = {s for s in value_in.counted if s}
    bound = value_in.shape[value_in.counted.index(symbol)]
    dtype = n.dtype(value)
    wide = "float64" if dtype == "float64" else "float32"  # a bound bfloat16 cannot hold
    count, mean = n.counts[symbol], value
    if wide != "float32":
        count = n.emit1("Cast", [count], {"to": wide})
    if dtype != wide:
        mean = n.emit1("Cast", [value], {"to": wide})
    mean = n.emit1("Div", [n.emit1("Mul", [mean, n.const(bound, wide)]), count])
    return mean if dtype == wide else n.emit1("Cast", [mean], {"to": dtype})


def _zeroed(n: NodeCtx, value: str, out: Traced) -> str:
    """value with the rows of its counted dim past the count zero."""
    axis = next(k for k, s in enumerate(out.counted) if s)
    bound = out.shape[axis]
    alive = n.emit1("Less", [n.const(np.arange(bound, dtype=np.float32), "float32"),
                             n.counts[out.counted[axis]]])
    if axis < len(out.shape) - 1:
        alive = n.emit1("Reshape", [alive],
                        {"shape": [bound] + [1] * (len(out.shape) - axis - 1)})
    return n.emit1("Where", [alive, value, n.const(0, n.dtype(value))])
