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

from planner.importers.kit import Const, Unsupported
from planner.importers.torch.context import UNAVAILABLE, NodeCtx, Value, rule
from planner.importers.torch.rules_pointwise import as_dtype
from planner.importers.torch.strided import VIEW_LIMIT, logical_index
from planner.ops.base import OpError
from planner.ops.index import check_range

# scatter.reduce's names for scatter_reduce's
SCATTER_REDUCE = {"add": "sum", "multiply": "prod"}


def _float(n: NodeCtx, x: str | Const) -> None:
    if not n.dtype(x).startswith(("float", "bfloat")):
        raise Unsupported(f"{n.op} (of a {n.dtype(x)} tensor)")


def _index(n: NodeCtx, index: object, x: str | Const, attrs: dict) -> str | Const:
    """An int64 index tensor (an int32 one cast, as PyTorch's kernels widen it); a constant
    one is checked against x now."""
    if not isinstance(index, (str, Const)):
        raise n.fail("the index is not a tensor")
    if n.dtype(index) == "int32":
        index = as_dtype(n, index, "int64")
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


def _indexed(n: NodeCtx, mode: str) -> tuple[str | Const, bool, dict, str | Const]:
    """(x, whether x is 0-d, where, index) of an op(x, dim, index, ...): a 0-d x and its
    index lifted to one element."""
    x = n.tensor(0)
    _float(n, x)
    scalar = not n.shape(x)
    x = _lifted(n, x)
    where = _where(n, x, int(n.arg(1, "dim")), mode, False)
    index = _index(n, n.arg(2, "index"), x, where)
    return x, scalar, where, _lifted(n, index) if scalar else index


@rule("aten.gather.default")
def gather(n: NodeCtx) -> Value:
    x, _, where, index = _indexed(n, "elements")
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
    x, scalar, where, index = _indexed(n, "elements")
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
    """index_put's indices: one computed tensor, on axis k (None on the axes before it)."""
    picked = [(k, v) for k, v in enumerate(indices) if v is not None]
    if len(picked) != 1:
        raise Unsupported(f"{n.op} (computed indices on {len(picked)} axes)")
    return picked[0]


def masked_put(n: NodeCtx, x: str | Const, axis: int, mask: str | Const) -> Value:
    """`x[..., mask] = values` (accumulate: +=) with a computed bool mask over x's axes from
    `axis`: a Where, when values broadcast to the slices the mask picks (a count-shaped
    values tensor would be a data-dependent shape, which the planner does not plan)."""
    shape, mshape = n.shape(x), n.shape(mask)
    rest = shape[axis + len(mshape):]
    if shape[axis:axis + len(mshape)] != mshape:
        raise n.fail(f"a mask of shape {list(mshape)} for dims {axis}.. of a tensor of shape "
                     f"{list(shape)}")
    values = n.tensor(2, "values")
    vs = n.shape(values)
    while len(vs) > len(rest) and vs[0] == 1:
        vs = vs[1:]
    if len(vs) > len(rest) or any(a not in (1, b) for a, b in
                                  zip(vs[::-1], rest[::-1], strict=False)):
        raise Unsupported(f"{n.op} (values of shape {list(n.shape(values))} for a computed "
                          f"mask: only values that broadcast to each picked slice)")
    values = n.emit1("Reshape", [values], {"shape": [1] * (len(shape) - len(vs)) + list(vs)})
    mask = n.emit1("Reshape", [mask], {"shape": [1] * axis + list(mshape) + [1] * len(rest)})
    mask = n.emit1("Expand", [mask], {"shape": list(shape)})
    values = n.emit1("Expand", [values], {"shape": list(shape)})
    if not n.arg(3, "accumulate", False):
        return n.emit1("Where", [mask, values, x])
    zero = n.const(np.zeros((1,) * len(shape)), n.dtype(x))
    return n.emit1("Add", [x, n.emit1("Where", [mask, values, zero])])


# counts and coordinates travel as float32, exact below 2^24
EXACT = 1 << 24


# ---- constant index maps ---------------------------------------------------------------------
# An op whose elements are named by constants (a slice, a strided view, a mask or index known at
# import) reads or writes x through the flat positions it names: an IndexGather (gradient: a
# scatter-add, so overlapping windows accumulate) or IndexScatter on x seen as one line.

def positions_of(n: NodeCtx, shape: tuple[int, ...], pick: object) -> np.ndarray:
    """The flat positions of x[pick] (numpy's indexing, which is PyTorch's: ints, slices,
    bool masks, broadcast int arrays with negative entries from the end) in x of `shape`, as
    an int64 array of x[pick]'s shape; out-of-range indices refused naming the node."""
    flat = flat_positions(n, shape)
    try:
        return np.asarray(flat[pick], dtype=np.int64)
    except (IndexError, ValueError) as e:  # out of range; shapes that do not broadcast
        raise n.fail(f"constant indices: {e}") from None


def _line(n: NodeCtx, x: str | Const) -> str | Const:
    size = math.prod(n.shape(x))
    return x if n.shape(x) == (size,) else n.emit1("Reshape", [x], {"shape": [size]})


def _limit(n: NodeCtx, size: int) -> None:
    # the map is a constant of the plan: a larger one is refused, not stored
    if size > VIEW_LIMIT:
        raise n.fail(f"{size} positions known at import: over {VIEW_LIMIT}")


def flat_positions(n: NodeCtx, shape: tuple[int, ...]) -> np.ndarray:
    """Each element's flat position in a tensor of `shape` (refused over VIEW_LIMIT)."""
    _limit(n, math.prod(shape))
    return np.arange(math.prod(shape), dtype=np.int64).reshape(shape)


def gather_positions(n: NodeCtx, x: str | Const, pos: np.ndarray) -> Value:
    """x's elements at the flat positions `pos`, in pos's shape."""
    _limit(n, pos.size)
    if not pos.size:
        return n.emit1("Zeros", [], {"shape": list(pos.shape), "dtype": n.dtype(x)})
    y = n.emit1("IndexGather", [_line(n, x), n.const(pos.reshape(-1), "int64")],
                {"axis": 0, "mode": "rows", "wrap": False})
    return y if pos.shape == (pos.size,) else n.emit1("Reshape", [y], {"shape": list(pos.shape)})


def scatter_positions(n: NodeCtx, x: str | Const, pos: np.ndarray, src: str | Const,
                      reduce: str = "none") -> Value:
    """x with src (broadcast to pos's shape) written (or combined by `reduce`) at the flat
    positions `pos`."""
    _limit(n, pos.size)
    if not pos.size:
        return x
    if n.shape(src) != pos.shape:
        src = _broadcast(n, src, pos.shape)
    y = n.emit1("IndexScatter", [_line(n, x), n.const(pos.reshape(-1), "int64"),
                                 _line(n, src)],
                {"axis": 0, "mode": "rows", "wrap": False, "reduce": reduce})
    return _out(n, y)


def _broadcast(n: NodeCtx, v: str | Const, want: tuple[int, ...]) -> str:
    vs = n.shape(v)
    pairs = zip(vs[::-1], want[::-1], strict=False)
    if len(vs) > len(want) or any(a not in (1, b) for a, b in pairs):
        raise n.fail(f"values of shape {list(vs)} do not broadcast to {list(want)}")
    return n.emit1("Expand", [v], {"shape": list(want)})


def _constant_pick(n: NodeCtx, indices: list) -> tuple | None:
    """index_put's indices as a numpy index when every given one is a constant."""
    if not all(v is None or (isinstance(v, Const) and v.foldable) for v in indices):
        return None
    return tuple(slice(None) if v is None else v.value() for v in indices)


@rule("aten.index_put.default")
def index_put(n: NodeCtx) -> Value:
    """x[..., idx] = values (accumulate: +=): index_put_, and torch.export's index_add,
    index_copy, index_fill. values broadcast to the slices written; a constant of one value
    (index_fill) becomes the op's value attribute. Constant indices (bool masks, several axes:
    `x[mask] = v`, `x[rows, cols] += v`) name their positions now."""
    x = n.tensor(0)
    _float(n, x)
    indices = list(n.arg(1, "indices"))
    picked = [v for v in indices if v is not None]
    pick = _constant_pick(n, indices)
    if pick is not None and (len(picked) != 1 or n.dtype(picked[0]) == "bool"):
        pos = positions_of(n, n.shape(x), pick)
        return scatter_positions(n, x, pos, n.tensor(2, "values"),
                                 "sum" if n.arg(3, "accumulate", False) else "none")
    axis, index = _one_index(n, indices)
    if n.dtype(index) == "bool":
        return masked_put(n, x, axis, index)
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
        values = _broadcast(n, values, want)
    return n.emit1("IndexScatter", [x, index, values], attrs)


@rule("aten.index_add.default")
def index_add(n: NodeCtx) -> Value:
    """x.index_add(dim, index, source, alpha): kept whole at import, so that torch's kernel's
    checks hold (its decomposition to index_put broadcasts a source of the wrong shape, where
    torch raises): source is x's shape but along dim, where it has one slice per index
    (index_func_meta_impl's rules), and an index out of [0, x.size(dim)) is refused as torch's
    kernel refuses it."""
    x, index, source = n.tensor(0), n.tensor(2, "index"), n.tensor(3, "source")
    _float(n, x)
    alpha = n.arg(4, "alpha", 1)
    xs, ss, count = n.shape(x), n.shape(source), math.prod(n.shape(index))
    where = _where(n, _lifted(n, x), int(n.arg(1, "dim")), "rows", False)
    axis = where["axis"]
    if len(n.shape(index)) > 1:
        raise n.fail(f"index of shape {list(n.shape(index))} (torch takes a vector)")
    if count != (ss[axis] if ss else 1):
        raise n.fail(f"{count} indices for a source of size {ss[axis] if ss else 1} along dim "
                     f"{axis} (torch raises: they must be equal)")
    if [d for k, d in enumerate(xs) if k != axis] != [d for k, d in enumerate(ss) if k != axis]:
        raise n.fail(f"source of shape {list(ss)} for self of shape {list(xs)}: they must match "
                     f"except along dim {axis} (torch raises)")
    if n.dtype(source) != n.dtype(x):
        raise n.fail(f"source is {n.dtype(source)}, self {n.dtype(x)} (torch raises)")
    scalar = not xs
    x = _lifted(n, x)
    index = _index(n, _lifted(n, index), x, where)
    values = _lifted(n, source) if scalar or not ss else source
    if alpha != 1:
        values = n.emit1("Scale", [values], {"factor": float(alpha)})
    y = n.emit1("IndexScatter", [x, index, values], {**where, "reduce": "sum"})
    return n.emit1("Reshape", [y], {"shape": []}) if scalar else y


@rule("aten.index_fill.int_Tensor", "aten.index_fill.int_Scalar")
def index_fill(n: NodeCtx) -> Value:
    """x.index_fill(dim, index, value): kept whole at import, so that a 0-d tensor value's
    gradient is torch's, the sum of dy over the places filled, each once (derivatives.yaml:
    over the unique indices; the decomposition to index_put counts a repeated index each
    time): a Where of the mask of filled places, value broadcast, x elsewhere."""
    x, index, value = n.tensor(0), n.tensor(2, "index"), n.arg(3, "value")
    _float(n, x)
    scalar = not n.shape(x)
    x = _lifted(n, x)
    where = _where(n, x, int(n.arg(1, "dim")), "rows", True)
    index = _index(n, _lifted(n, index), x, where)
    if not isinstance(value, (str, Const)) and math.isfinite(float(value)):
        # a number: no gradient to give (an attribute holds finite numbers only)
        y = n.emit1("IndexScatter", [x, index], {**where, "value": float(value)})
    else:
        if not isinstance(value, (str, Const)):  # inf or nan: a constant tensor of it
            value = n.const(np.array(float(value)), n.dtype(x))
        if n.shape(value):
            raise n.fail(f"value of shape {list(n.shape(value))} (torch takes a 0-d tensor)")
        shape, dtype = list(n.shape(x)), n.dtype(x)
        zeros = n.emit1("Fill", [], {"shape": shape, "value": 0.0, "dtype": dtype})
        filled = n.emit1("IndexScatter", [zeros, index], {**where, "value": 1.0})
        value = n.emit1("Expand", [as_dtype(n, value, dtype)], {"shape": shape})
        y = n.emit1("Where", [filled, value, x])
    return n.emit1("Reshape", [y], {"shape": []}) if scalar else y


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


# ---- flat, slice, strided and masked index ops -------------------------------------------------

# kept whole by the decomposition: take's (`x.reshape(-1)[index]`) turns a 0-d index into a
# Python int, which torch.export cannot trace (GuardOnDataDependentSymNode)
INDEX_PRESERVED = ("take.default", "index_add.default", "index_fill.int_Tensor",
                   "index_fill.int_Scalar")
_FLAT = {"axis": 0, "mode": "rows", "wrap": True}


@rule("aten.take.default")
def take(n: NodeCtx) -> Value:
    """torch.take: x flattened, indexed by an index of any shape (negative from the end)."""
    x = n.tensor(0)
    _float(n, x)
    line = _line(n, x)
    index = _lifted(n, _index(n, n.tensor(1, "index"), line, _FLAT))
    return _out(n, n.emit1("IndexGather", [line, index], _FLAT))


@rule("aten.put.default")
def put(n: NodeCtx) -> Value:
    """torch.put: source written (accumulate: added) to x flattened at index (negative from
    the end)."""
    x = n.tensor(0)
    _float(n, x)
    line = _line(n, x)
    index = _line(n, _index(n, n.tensor(1, "index"), line, _FLAT))
    source = _line(n, n.tensor(2, "source"))
    if n.shape(source) != n.shape(index):
        raise n.fail(f"source of {n.shape(source)[0]} elements for {n.shape(index)[0]} indices")
    reduce = "sum" if n.arg(3, "accumulate", False) else "none"
    return _out(n, n.emit1("IndexScatter", [line, index, source], {**_FLAT, "reduce": reduce}))


@rule("aten.index_reduce.default")
def index_reduce(n: NodeCtx) -> Value:
    """torch.index_reduce: source's slices combined into x's at index along dim (prod, mean,
    amax, amin; with x's own value when include_self): IndexScatter's reductions."""
    x, scalar, where, index = _indexed(n, "rows")
    source = _lifted(n, n.tensor(3, "source")) if scalar else n.tensor(3, "source")
    reduce = str(n.arg(4, "reduce"))
    if reduce not in ("prod", "mean", "amax", "amin"):
        raise n.fail(f"reduce {reduce!r}: index_reduce takes prod, mean, amax or amin")
    attrs = {**where, "reduce": reduce, "include_self": bool(n.arg(5, "include_self", True))}
    return _out(n, n.emit1("IndexScatter", [x, index, source], attrs))


def _constant(n: NodeCtx, v: object, what: str) -> np.ndarray:
    if not (isinstance(v, Const) and v.foldable):
        raise Unsupported(f"{n.op} (a computed {what})")
    return v.value()


@rule("aten.masked_scatter.default")
def masked_scatter(n: NodeCtx) -> Value:
    """x with the elements where a mask (broadcast to x) holds taken from source's first
    elements in order: a constant mask names their positions now; a computed one counts the
    masked elements before each (an exclusive CumSum) to gather source's."""
    x = n.tensor(0)
    _float(n, x)
    shape = n.shape(x)
    if not (isinstance(n.tensor(1, "mask"), Const) and n.tensor(1, "mask").foldable):
        return _computed_masked_scatter(n, x)
    mask = np.broadcast_to(_constant(n, n.tensor(1, "mask"), "mask"), shape)
    pos = positions_of(n, shape, mask.astype(bool))
    source = _line(n, n.tensor(2, "source"))
    if n.shape(source)[0] < pos.size:
        raise n.fail(f"source has {n.shape(source)[0]} elements for {pos.size} masked ones")
    if n.shape(source)[0] > pos.size:
        source = n.emit1("Slice", [source], {"starts": [0], "ends": [pos.size], "axes": [0]})
    return scatter_positions(n, x, pos, source)


def _computed_masked_scatter(n: NodeCtx, x: str | Const) -> Value:
    shape, mask, source = n.shape(x), n.tensor(1, "mask"), _line(n, n.tensor(2, "source"))
    count = math.prod(shape)
    if count >= EXACT:
        raise Unsupported(f"{n.op} (a computed mask over {EXACT} elements or more)")
    ms = n.shape(mask)
    if len(ms) > len(shape) or any(a not in (1, b) for a, b in
                                   zip(ms[::-1], shape[::-1], strict=False)):
        raise n.fail(f"a mask of shape {list(ms)} for a tensor of shape {list(shape)}")
    if ms != shape:
        mask = n.emit1("Expand", [mask], {"shape": list(shape)})
    mask = _line(n, mask)
    before = n.emit1("CumSum", [n.emit1("Cast", [mask], {"to": "float32"})],
                     {"axis": 0, "exclusive": True})
    # unmasked places read source's first element, which Where drops; a masked one past
    # source's end is refused when the step runs (IndexGather's range check)
    index = n.emit1("Cast", [n.emit1("Where", [mask, before, n.const(0, "float32")])],
                    {"to": "int64"})
    taken = n.emit1("IndexGather", [source, index], {"axis": 0, "mode": "rows", "wrap": False})
    return _out(n, n.emit1("Where", [mask, taken, _line(n, x)]))


@rule("aten.slice_scatter.default")
def slice_scatter(n: NodeCtx) -> Value:
    """x with src written to x[..., start:end:step, ...] on dim."""
    x, src = n.tensor(0), n.tensor(1, "src")
    _float(n, x)
    shape = n.shape(x)
    dim = _where(n, x, int(n.arg(2, "dim", 0)), "rows", False)["axis"]
    start, end, step = n.arg(3, "start"), n.arg(4, "end"), int(n.arg(5, "step", 1) or 1)
    if step < 1:
        raise n.fail(f"step {step} must be positive")
    pos = positions_of(n, shape, (slice(None),) * dim + (slice(start, end, step),))
    if n.shape(src) != pos.shape:
        raise n.fail(f"src of shape {list(n.shape(src))} for a slice of shape "
                     f"{list(pos.shape)}")
    return scatter_positions(n, x, pos, src)


def strided_positions(n: NodeCtx, k: int, size: list[int], stride: list[int],
                      offset: object) -> np.ndarray:
    """The flat positions in tensor argument k that its strided view (size, stride,
    storage_offset) reads (planner/importers/torch/strided.py), or refused."""
    x = n.tensor(k)
    source = n.traced(k, "self")
    if source is None or not hasattr(source, "strides"):
        raise n.fail("the input's strides are unknown")
    shape, want = n.shape(x), tuple(size)
    if 0 in want:
        return np.zeros(want, dtype=np.int64)
    start = source.offset if offset is None else int(offset)
    # a 0-d view reads the element at the offset
    idx = logical_index(shape, source.strides, source.offset, size or [1], stride or [1], start)
    if idx is None:
        raise n.fail(f"size {size}, stride {stride} reads outside the input of shape "
                     f"{list(shape)} (strides {list(source.strides)}), or over "
                     f"{VIEW_LIMIT} elements")
    return idx.reshape(want)


@rule("aten.as_strided_scatter.default")
def as_strided_scatter(n: NodeCtx) -> Value:
    """x with src written to the elements of its strided view (size, stride, offset)."""
    x, src = n.tensor(0), n.tensor(1, "src")
    _float(n, x)
    pos = strided_positions(n, 0, n.ints(2, "size"), n.ints(3, "stride"),
                            n.arg(4, "storage_offset"))
    if n.shape(src) != pos.shape:
        raise n.fail(f"src of shape {list(n.shape(src))} for a view of shape {list(pos.shape)}")
    return scatter_positions(n, x, pos, src)


SEGMENT_REDUCE = {"sum": ("sum", 0.0), "mean": ("sum", 0.0), "prod": ("prod", 1.0),
                  "max": ("amax", -math.inf), "min": ("amin", math.inf)}


@rule("aten.segment_reduce.default")
def segment_reduce(n: NodeCtx) -> Value:
    """torch.segment_reduce with constant lengths or offsets: each segment of data along axis
    combined (sum, mean, prod, max, min) with `initial` (else the reduction's identity; an
    empty segment's mean is NaN, as torch's), an IndexScatter of data into those starting
    values at each element's segment."""
    data = n.tensor(0)
    _float(n, data)
    reduce = str(n.arg(1, "reduce"))
    if reduce not in SEGMENT_REDUCE:
        raise n.fail(f"reduce {reduce!r}: segment_reduce takes {', '.join(SEGMENT_REDUCE)}")
    shape = n.shape(data)
    axis = _where(n, data, int(n.arg(5, "axis", 0)), "rows", False)["axis"]
    if n.arg(3, "indices") is not None:
        raise Unsupported(f"{n.op} (indices)")
    lengths, offsets = n.arg(2, "lengths"), n.arg(4, "offsets")
    if lengths is not None:
        lengths = _constant(n, lengths, "lengths")
    elif offsets is not None:
        offsets = np.asarray(_constant(n, offsets, "offsets"), dtype=np.int64)
        # torch reads segment k at [offsets[k], offsets[k + 1]): they must start at 0 (the
        # lengths below must then add up to the dim, so no segment ends past it)
        if offsets.ndim == 0 or offsets.shape[-1] == 0 or (offsets[..., 0] != 0).any():
            raise n.fail(f"offsets of shape {list(offsets.shape)} do not start at 0")
        lengths = np.diff(offsets, axis=-1)
    else:
        raise n.fail("neither lengths nor offsets given")
    lengths = np.asarray(lengths, dtype=np.int64)
    outer, inner = shape[:axis], shape[axis + 1:]
    if lengths.shape[:-1] != outer or (lengths < 0).any() or \
            (lengths.sum(axis=-1) != shape[axis]).any():
        raise n.fail(f"lengths of shape {list(lengths.shape)} do not split dim {axis} of "
                     f"data of shape {list(shape)}")
    count = lengths.shape[-1]
    rows = lengths.reshape(-1, count)
    segment = np.stack([np.repeat(np.arange(count), r) for r in rows]) if rows.size else \
        np.zeros((rows.shape[0], shape[axis]), dtype=np.int64)
    size = math.prod(inner)
    pos = ((np.arange(rows.shape[0])[:, None] * count + segment)[:, :, None] * size
           + np.arange(size)[None, None, :]).reshape(shape)
    combine, identity = SEGMENT_REDUCE[reduce]
    initial = n.arg(7, "initial")
    start = np.full((*outer, count, *inner), identity if initial is None else float(initial))
    empty = (lengths == 0).reshape((*outer, count) + (1,) * len(inner))
    if reduce == "mean" and initial is None:
        start = np.where(empty, np.nan, start)
    y = scatter_positions(n, n.const(start, n.dtype(data)), pos, data, combine)
    if reduce != "mean":
        return y
    divisor = np.broadcast_to(np.maximum(lengths, 1).reshape(empty.shape), start.shape)
    return n.emit1("Div", [y, n.const(divisor, n.dtype(data))])


@rule("aten.nonzero_static.default")
def nonzero_static(n: NodeCtx) -> Value:
    """torch.nonzero_static(x, size, fill_value): the coordinates of x's first `size` non-zero
    elements in C order, as an int64 (size, rank) tensor, rows past the count fill_value. Each
    non-zero element's row is the count of those before it (an exclusive CumSum); the rows
    are scattered into fill_value's, the elements past `size` into a row cut off after."""
    x = n.tensor(0)
    size, fill = int(n.arg(1, "size")), int(n.arg(2, "fill_value", -1))
    shape = n.shape(x)
    count = math.prod(shape)
    if size < 0:
        raise n.fail(f"size {size} must be >= 0")
    if not shape:
        return n.emit1("Zeros", [], {"shape": [size, 0], "dtype": "int64"})
    if max(count, size, abs(fill)) >= EXACT:
        raise Unsupported(f"{n.op} (over {EXACT} elements, or a fill_value beyond it)")
    line = _line(n, x)
    nonzero = n.emit1("NotEqual", [line, n.const(0, n.dtype(x))])
    before = n.emit1("CumSum", [n.emit1("Cast", [nonzero], {"to": "float32"})],
                     {"axis": 0, "exclusive": True})
    kept = n.emit1("And", [nonzero, n.emit1("Less", [before, n.const(size, "float32")])])
    row = n.emit1("Cast", [n.emit1("Where", [kept, before, n.const(size, "float32")])],
                  {"to": "int64"})
    coords = np.stack(np.unravel_index(np.arange(count), shape), axis=-1).astype(np.float32)
    rows = n.emit1("IndexScatter", [n.const(np.full((size + 1, len(shape)), fill), "float32"),
                                    row, n.const(coords, "float32")],
                   {"axis": 0, "mode": "rows", "wrap": False})
    rows = n.emit1("Slice", [rows], {"starts": [0], "ends": [size], "axes": [0]})
    return n.emit1("Cast", [rows], {"to": "int64"})
