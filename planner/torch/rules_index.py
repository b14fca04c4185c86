"""ATen index ops to the planner's IndexGather and IndexScatter (planner/ops/index.py).

torch.gather and torch.scatter / scatter_add / scatter_reduce name single elements (mode
"elements"); index_select, index_put and `x[idx]` name whole slices (mode "rows"). torch.export
decomposes index_add, index_copy and index_fill to index_put, and take to `x.view(-1)[idx]`.
Negative indices count from the end where PyTorch's op wraps them (index_put, and so the
decomposed index_add / index_copy / index_fill; take, `x[idx]`), and are refused where it
refuses them (gather, scatter, index_select). A constant index out of range is refused here,
naming the node; a computed one by the kernel when the step runs.
"""

from __future__ import annotations

import math

import numpy as np

from planner.importers.onnx.errors import Unsupported
from planner.importers.onnx.values import Const
from planner.ops.base import OpError
from planner.ops.index import check_range
from planner.torch.context import UNAVAILABLE, NodeCtx, Value, rule

# scatter.reduce's names for scatter_reduce's
SCATTER_REDUCE = {"add": "sum", "multiply": "prod"}


def _float(n: NodeCtx, x: str | Const) -> None:
    if not n.dtype(x).startswith(("float", "bfloat")):
        raise Unsupported(f"{n.op} (of a {n.dtype(x)} tensor)")


def _index(n: NodeCtx, index: object, x: str | Const, attrs: dict) -> str | Const:
    """An int64 index tensor; a constant one is checked against x now."""
    if not isinstance(index, (str, Const)):
        raise n.fail("the index is not a tensor")
    if n.dtype(index) != "int64":
        raise Unsupported(f"{n.op} ({n.dtype(index)} indices)")
    if isinstance(index, Const):
        try:
            axis = attrs["axis"]
            check_range(index.value(), axis, n.shape(x)[axis], attrs["wrap"])
        except OpError as e:
            raise n.fail(f"constant index tensor {index.name!r}: {e}") from None
    return index


def _where(n: NodeCtx, x: str | Const, dim: int, mode: str, wrap: bool) -> dict:
    rank = len(n.shape(x))
    if not -max(rank, 1) <= dim < max(rank, 1):
        raise n.fail(f"dim {dim} out of range for rank {rank}")
    return {"axis": dim % max(rank, 1), "mode": mode, "wrap": wrap}


def _lifted(n: NodeCtx, v: str | Const | None) -> str | Const | None:
    """A 0-d tensor as shape (1,) (PyTorch indexes a scalar as a 1-element line)."""
    if v is None or n.shape(v):
        return v
    return n.emit1("Reshape", [v], {"shape": [1]})


def _out(n: NodeCtx, y: str) -> str:
    return y if n.shape(y) == tuple(n.out_shape) else \
        n.emit1("Reshape", [y], {"shape": list(n.out_shape)})


def gather_rows_wrapped(n: NodeCtx, x: str | Const, axis: int, index: str | Const) -> str:
    """x indexed on `axis` by a computed int64 index, negative entries from the end (`x[idx]`,
    take)."""
    return n.emit1("IndexGather", [x, index], {"axis": axis, "mode": "rows", "wrap": True})


def gather_rows_checked(n: NodeCtx, x: str | Const, index: str | Const) -> str:
    """x's rows at an int64 index, negative or out-of-range entries refused (one_hot)."""
    where = {"axis": 0, "mode": "rows", "wrap": False}
    return n.emit1("IndexGather", [x, _index(n, index, x, where)], where)


@rule("aten.gather.default")
def gather(n: NodeCtx) -> Value:
    x = n.tensor(0)
    _float(n, x)
    scalar = not n.shape(x)
    x = _lifted(n, x)
    where = _where(n, x, int(n.arg(1, "dim")), "elements", False)
    index = _index(n, n.arg(2, "index"), x, where)
    index = _lifted(n, index) if scalar else index
    return _out(n, n.emit1("IndexGather", [x, index], where))


@rule("aten.index_select.default")
def index_select(n: NodeCtx) -> Value:
    x = _lifted(n, n.tensor(0))
    _float(n, x)
    where = _where(n, x, int(n.arg(1, "dim")), "rows", False)
    return _out(n, n.emit1("IndexGather", [x, _index(n, n.arg(2, "index"), x, where)], where))


@rule("aten.scatter.src", "aten.scatter.value", "aten.scatter.reduce",
      "aten.scatter.value_reduce", "aten.scatter_add.default", "aten.scatter_reduce.two")
def scatter(n: NodeCtx) -> Value:
    x = n.tensor(0)
    _float(n, x)
    scalar = not n.shape(x)
    x = _lifted(n, x)
    where = _where(n, x, int(n.arg(1, "dim")), "elements", False)
    index = _index(n, n.arg(2, "index"), x, where)
    index = _lifted(n, index) if scalar else index
    attrs = dict(where)
    if n.op == "aten.scatter_add.default":
        attrs["reduce"] = "sum"
    elif n.op == "aten.scatter_reduce.two":
        attrs["reduce"] = str(n.arg(4, "reduce"))
        attrs["include_self"] = bool(n.arg(5, "include_self", True))
    elif n.op.endswith("reduce"):
        reduce = str(n.arg(4, "reduce"))
        if reduce not in SCATTER_REDUCE:
            raise n.fail(f"reduce {reduce!r}: torch.scatter takes 'add' or 'multiply'")
        attrs["reduce"] = SCATTER_REDUCE[reduce]
    src = n.arg(3, "src" if "value" not in n.op else "value")
    if isinstance(src, (int, float)) and math.isfinite(src):
        return _out(n, n.emit1("IndexScatter", [x, index], {**attrs, "value": float(src)}))
    if isinstance(src, (int, float)):  # an infinity or NaN: as a tensor (attrs are finite)
        src = n.const(np.full(n.shape(index), src), n.dtype(x))
    else:
        src = _lifted(n, n.tensor(3, "src")) if scalar else n.tensor(3, "src")
    want = n.shape(index)
    if n.shape(src) != want:
        # torch reads src's leading part of index's shape
        if len(n.shape(src)) != len(want) or \
                any(s < i for s, i in zip(n.shape(src), want, strict=True)):
            raise n.fail(f"src of shape {list(n.shape(src))} for an index of shape "
                         f"{list(want)}")
        axes = [k for k, (s, i) in enumerate(zip(n.shape(src), want, strict=True)) if s != i]
        src = n.emit1("Slice", [src], {"starts": [0] * len(axes),
                                       "ends": [want[k] for k in axes], "axes": axes})
    return _out(n, n.emit1("IndexScatter", [x, index, src], attrs))


def _one_index(n: NodeCtx, indices: list) -> tuple[int, str | Const]:
    """index_put's indices: one tensor, on axis k (None on the axes before it)."""
    picked = [(k, v) for k, v in enumerate(indices) if v is not None]
    if len(picked) != 1:
        raise Unsupported(f"{n.op} (indices on {len(picked)} axes)")
    return picked[0]


@rule("aten.index_put.default")
def index_put(n: NodeCtx) -> Value:
    """x[..., idx] = values (accumulate: +=): index_put_, and torch.export's index_add,
    index_copy, index_fill. values broadcast to the slices written; a constant of one value
    (index_fill) becomes the op's value attribute."""
    x = n.tensor(0)
    _float(n, x)
    axis, index = _one_index(n, list(n.arg(1, "indices")))
    where = _where(n, x, axis, "rows", True)
    index = _index(n, index, x, where)
    values = n.tensor(2, "values")
    attrs = {**where, "reduce": "sum" if n.arg(3, "accumulate", False) else "none"}
    shape = n.shape(x)
    want = (*shape[:axis], *n.shape(index), *shape[axis + 1:])
    if isinstance(values, Const):
        v = values.value()
        if v.size and (v == v.reshape(-1)[0]).all() and np.isfinite(v.reshape(-1)[0]):
            return n.emit1("IndexScatter", [x, index], {**attrs, "value": float(v.reshape(-1)[0])})
    if n.shape(values) != want:
        vs = n.shape(values)
        pairs = zip(vs[::-1], want[::-1], strict=False)
        if len(vs) > len(want) or any(a not in (1, b) for a, b in pairs):
            raise n.fail(f"values of shape {list(vs)} do not broadcast to {list(want)}")
        values = n.emit1("Expand", [values], {"shape": list(want)})
    return n.emit1("IndexScatter", [x, index, values], attrs)


BAG_MODES = {0: "sum", 1: "mean", 2: "max"}


@rule("aten._embedding_bag.default", "aten._embedding_bag_forward_only.default")
def embedding_bag(n: NodeCtx) -> Value:
    """nn.EmbeddingBag: the planner's EmbeddingBag (planner/ops/embedding_bag.py); of the four
    ATen outputs, the bags' rows and (mode max) the ids chosen."""
    table, ids, offsets = n.tensor(0), n.tensor(1), n.tensor(2)
    _float(n, table)
    if n.arg(3, "scale_grad_by_freq", False):
        raise Unsupported(f"{n.op} (scale_grad_by_freq)")
    if n.arg(5, "sparse", False):
        raise Unsupported(f"{n.op} (sparse gradients)")
    for v in (ids, offsets):
        if n.dtype(v) != "int64":
            raise Unsupported(f"{n.op} ({n.dtype(v)} ids or offsets)")
    weights = n.arg(6, "per_sample_weights")
    padding = n.arg(8, "padding_idx")
    attrs = {"mode": BAG_MODES[int(n.arg(4, "mode", 0))],
             "include_last_offset": bool(n.arg(7, "include_last_offset", False)),
             "padding_idx": -1 if padding is None or padding < 0 else int(padding)}
    if padding is not None and padding < -1:
        attrs["padding_idx"] = int(padding) + n.shape(table)[0]
    inputs = [table, ids, offsets] + ([weights] if weights is not None else [])
    if attrs["mode"] == "max":
        y, arg = n.emit("EmbeddingBag", inputs, attrs, n_out=2)
        return (y, UNAVAILABLE, UNAVAILABLE, arg)
    return (n.emit1("EmbeddingBag", inputs, attrs), UNAVAILABLE, UNAVAILABLE, UNAVAILABLE)
