"""ATen rules of multi_margin_loss and multilabel_margin_loss, kept whole at import: torch's
decompositions of both differ from its kernels (the decomposition's clamp_min passes a gradient
where the margin term is exactly 0, which the kernel's `z > 0` does not: planner/ops/kinks.py;
multilabel_margin_loss's decomposition reads targets past the first -1, which the kernel stops
at).

    multi_margin_loss(x, y, p, margin, weight)        per sample: sum over i != y of
        w[y] * relu(margin - x[y] + x[i])^p / C
    multilabel_margin_loss(x, t)                       per sample: the targets t[j] before the
        first -1, sum over them and over the non-target classes i of relu(1 - x[t[j]] + x[i]) / C

Relu's gradient is 0 at 0, the kernels' rule. The input is (N, C), (C,) (one sample) or a
scalar (one class); reduction='none' gives torch's shape: (N,) of (N, C), and for one sample
a 0-d loss (multi_margin_loss: (1,) when its target is (1,), as torch's kernel).
"""

from __future__ import annotations

import numpy as np

from planner.importers.kit import Const
from planner.importers.torch.context import NodeCtx, Value, rule
from planner.importers.torch.rules_losses import NONE, _float, _label, _reduce, _reduction

MARGIN_PRESERVED = ("multi_margin_loss.default", "multilabel_margin_loss.default")


def _rows(n: NodeCtx, x: str | Const) -> tuple[str | Const, int, int]:
    """x as (N, C), with N and C; a (C,) or 0-d input is one sample."""
    shape = n.shape(x)
    if len(shape) > 2 or (len(shape) >= 1 and shape[-1] == 0):
        raise n.fail(f"input of shape {list(shape)} (torch takes (N, C) with C > 0, (C,) or a "
                     f"scalar)")
    rows, classes = (shape[0], shape[1]) if len(shape) == 2 else (1, shape[0] if shape else 1)
    if len(shape) != 2:
        x = n.emit1("Reshape", [x], {"shape": [rows, classes]})
    return x, rows, classes


def _index(n: NodeCtx, t: str | Const, shape: list[int]) -> str | Const:
    """An integer target as int64 of `shape` (IndexGather's index)."""
    if n.dtype(t) != "int64":
        t = n.emit1("Cast", [t], {"to": "int64"})
    return n.emit1("Reshape", [t], {"shape": shape}) if list(n.shape(t)) != shape else t


def _finish(n: NodeCtx, per: str, reduction: int, shape: list[int]) -> Value:
    if reduction == NONE:
        return n.emit1("Reshape", [per], {"shape": shape})
    return _reduce(n, per, reduction)


@rule("aten.multi_margin_loss.default")
def multi_margin(n: NodeCtx) -> Value:
    x0, y0 = n.tensor(0), n.tensor(1)
    p, margin = n.arg(2, "p", 1), float(n.arg(3, "margin", 1.0))
    weight, reduction = n.arg(4, "weight"), _reduction(n, 5)
    if p not in (1, 2):
        raise n.fail(f"p={p} (torch takes 1 or 2)")
    _label(n, y0)
    x, rows, classes = _rows(n, x0)
    if int(np.prod(n.shape(y0), dtype=np.int64)) != rows or len(n.shape(y0)) > 1:
        raise n.fail(f"target of shape {list(n.shape(y0))} for {rows} sample(s)")
    dtype = n.dtype(x)
    y = _index(n, y0, [rows, 1])
    picked = n.emit1("IndexGather", [x, y], {"axis": 1, "mode": "elements", "wrap": False})
    z = n.emit1("Add", [n.emit1("Sub", [n.const(margin, dtype), picked]), x])
    h = n.emit1("Relu", [z])  # the kernel's z > 0: no gradient at the margin
    if p == 2:
        h = n.emit1("Mul", [h, h])
    if weight is not None:
        w = _float(n, weight, x)
        wy = n.emit1("IndexGather", [w, n.emit1("Reshape", [y], {"shape": [rows]})],
                     {"axis": 0, "mode": "rows", "wrap": False})
        h = n.emit1("Mul", [h, n.emit1("Reshape", [wy], {"shape": [rows, 1]})])
    others = n.emit1("NotEqual", [n.const(np.arange(classes)[None, :], "int64"), y])
    h = n.emit1("Where", [others, h, n.const(0.0, dtype)])
    per = n.emit1("Scale", [n.emit1("ReduceSum", [h], {"axes": [1], "keepdims": False})],
                  {"factor": 1.0 / classes})
    # torch's kernel: (N,) when the target has a dimension, else 0-d
    return _finish(n, per, reduction, [rows] if n.shape(y0) else [])


@rule("aten.multilabel_margin_loss.default")
def multilabel_margin(n: NodeCtx) -> Value:
    x0, t0 = n.tensor(0), n.tensor(1)
    reduction = _reduction(n, 2)
    _label(n, t0)
    if n.shape(t0) != n.shape(x0):
        raise n.fail(f"target of shape {list(n.shape(t0))} for an input of shape "
                     f"{list(n.shape(x0))} (torch takes the same shape)")
    x, rows, classes = _rows(n, x0)
    dtype = n.dtype(x)
    t = _index(n, t0, [rows, classes])
    # j is a target slot while no -1 came at or before it: the count of -1s in slots k <= j
    ended = n.emit1("Cast", [n.emit1("Equal", [t, n.const(-1, "int64")])], {"to": dtype})
    upto = n.const(np.tril(np.ones((classes, classes))), dtype)  # [j, k]: k <= j
    seen = n.emit1("ReduceMax", [n.emit1("Mul", [
        n.emit1("Reshape", [ended], {"shape": [rows, 1, classes]}), upto])],
        {"axes": [2], "keepdims": False})
    valid = n.emit1("Equal", [seen, n.const(0.0, dtype)])                        # [N, j]
    slot = n.emit1("Where", [valid, t, n.const(0, "int64")])
    # class i is a target when some valid slot names it
    names = n.emit1("And", [n.emit1("Equal", [
        n.emit1("Reshape", [slot], {"shape": [rows, classes, 1]}),
        n.const(np.arange(classes)[None, None, :], "int64")]),
        n.emit1("Reshape", [valid], {"shape": [rows, classes, 1]})])            # [N, j, i]
    is_target = n.emit1("ReduceAny", [names], {"axes": [1], "keepdims": True})   # [N, 1, i]
    picked = n.emit1("IndexGather", [x, slot], {"axis": 1, "mode": "elements", "wrap": False})
    z = n.emit1("Add", [n.emit1("Sub", [n.const(1.0, dtype), n.emit1(
        "Reshape", [picked], {"shape": [rows, classes, 1]})]),
        n.emit1("Reshape", [x], {"shape": [rows, 1, classes]})])                # [N, j, i]
    h = n.emit1("Relu", [z])  # the kernel's z > 0: no gradient at the margin
    keep = n.emit1("And", [n.emit1("Reshape", [valid], {"shape": [rows, classes, 1]}),
                           n.emit1("Not", [is_target])])
    h = n.emit1("Where", [keep, h, n.const(0.0, dtype)])
    per = n.emit1("Scale", [n.emit1("ReduceSum", [h], {"axes": [1, 2], "keepdims": False})],
                  {"factor": 1.0 / classes})
    # torch's kernel: (N,) of an (N, C) input, else 0-d
    return _finish(n, per, reduction, [rows] if len(n.shape(x0)) == 2 else [])
