"""ATen ops (the graph torch.export gives after `run_decompositions`, see convert.py) to
planner ops, one rule per op family.

Views and copies (view, reshape, flatten, squeeze, unsqueeze, clone, alias, ...) become a
Reshape to the node's own static shape, or nothing when the shape is unchanged. Linear layers
become MatMul with transpose_b (no Transpose of the weight) and a BiasAdd; convolutions Conv2D
(1-D ones over (N, C, 1, L)); BatchNorm in training mode the planner's BatchNorm with
training=True, whose running statistics make_training_graph turns into in-place updates
(PyTorch's momentum and unbiased running variance); Dropout in training mode the planner's
Dropout (its own counter-based mask, same rate and scaling); scaled_dot_product_attention
MatMul, Scale, CausalMask / Add of the mask, Softmax, Dropout, MatMul; torch.roll two Slices
and a Concat per rolled axis; torch.cumsum and torch.topk the planner's CumSum and TopK.
Arithmetic follows PyTorch's type promotion: an int or bool tensor meeting a float tensor or
number is cast to the node's float dtype first (a Cast op, or a constant made in that dtype).
The losses PyTorch traces with the model become the planner's in rules_losses.py.
torch.cumprod is CumProd (the cumsum rule); 3-D convolutions are one Conv2D per depth tap
(rules_conv.py); reductions and pools have rules_reduce.py and rules_pool.py.
"""

from __future__ import annotations

import math

import numpy as np

from planner.dtypes import INTEGER_DTYPES
from planner.importers.gather import gather_rows
from planner.importers.kit import Const, Unsupported
from planner.importers.torch.context import UNAVAILABLE, NodeCtx, Value, rule
from planner.importers.torch.norm_stats import group_norm_stats, layer_norm_stats
from planner.importers.torch.rules_bounded import masked_rows
from planner.importers.torch.rules_conv import conv3d, conv_transpose2d
from planner.importers.torch.rules_index import gather_positions, strided_positions
from planner.importers.torch.rules_pointwise import as_dtype, bool_product, cast, clamp_numbers
from planner.importers.torch.rules_products import scaled_sum
from planner.importers.torch.rules_views import padded_by_index
from planner.importers.torch.strided import VIEW_LIMIT, logical_index, view_ops


def _reshape_to(n: NodeCtx, x: str | Const, shape: tuple[int, ...]) -> Value:
    return x if n.shape(x) == tuple(shape) else n.emit1("Reshape", [x], {"shape": list(shape)})


def _axis(n: NodeCtx, axis: int, rank: int) -> int:
    if not -max(rank, 1) <= axis < max(rank, 1):
        raise n.fail(f"dim {axis} out of range for rank {rank}")
    return axis % max(rank, 1)


def _axes(n: NodeCtx, dims: object, rank: int) -> list[int]:
    """The axes a reduction over `dims` (an int, a list, or None/[]: every axis) covers. A 0-d
    tensor has none: torch accepts dim 0 or -1 for it and returns the value itself."""
    dims = [dims] if isinstance(dims, int) else list(dims or [])
    axes = sorted({_axis(n, d, rank) for d in dims}) if dims else list(range(rank))
    return axes if rank else []


# ---- views and copies ----------------------------------------------------------------------

@rule("aten.view.default", "aten._unsafe_view.default", "aten.reshape.default",
      "aten.flatten.using_ints", "aten.unsqueeze.default", "aten.squeeze.dims",
      "aten.squeeze.dim", "aten.squeeze.default", "aten.unflatten.int", "aten.view_as.default",
      "aten.view_copy.default")
def view(n: NodeCtx) -> Value:
    return _reshape_to(n, n.tensor(0), n.out_shape)


@rule("aten.clone.default", "aten.alias.default", "aten.contiguous.default",
      "aten.lift_fresh_copy.default", "aten._to_copy.default", "aten.to.dtype")
def copy(n: NodeCtx) -> Value:
    x = n.tensor(0)
    dtype = n.kwargs.get("dtype", n.arg(1, "dtype") if n.op == "aten.to.dtype" else None)
    if dtype is not None and _dtype_name(dtype) != n.dtype(x):
        return cast(n, x, _dtype_name(dtype))
    return x


@rule("aten.detach.default")
def detach(n: NodeCtx) -> Value:
    """torch's detach(): kept whole by the decomposition (it would become aten.alias, which
    passes the gradient on), a StopGradient."""
    x = n.tensor(0)
    return x if isinstance(x, Const) else n.emit1("StopGradient", [x])


@rule("aten._assert_tensor_metadata.default")
def assert_metadata(n: NodeCtx) -> Value:
    """The dtype check export writes before a `.to()`: the planner checks dtypes itself."""
    return UNAVAILABLE


def _dtype_name(dtype: object) -> str:
    return str(dtype).removeprefix("torch.")


@rule("aten.expand.default")
def expand(n: NodeCtx) -> Value:
    x = n.tensor(0)
    if n.shape(x) == n.out_shape:
        return x
    return n.emit1("Expand", [x], {"shape": list(n.out_shape)})


@rule("aten.permute.default", "aten.t.default", "aten.transpose.int", "aten.numpy_T.default",
      "aten.permute_copy.default")
def permute(n: NodeCtx) -> Value:
    x = n.tensor(0)
    rank = len(n.shape(x))
    if n.op in ("aten.permute.default", "aten.permute_copy.default"):
        perm = [_axis(n, a, rank) for a in n.ints(1, "dims")]
    else:
        a, b = ((0, 1) if n.op == "aten.t.default" and rank == 2 else
                (rank - 1, 0) if n.op == "aten.numpy_T.default" else
                (_axis(n, n.arg(1, "dim0", 0), rank), _axis(n, n.arg(2, "dim1", 1), rank)))
        perm = list(range(rank))
        if n.op == "aten.numpy_T.default":
            perm = perm[::-1]
        elif rank >= 2:
            perm[a], perm[b] = perm[b], perm[a]
    if perm == sorted(perm):
        return x
    return n.emit1("Transpose", [x], {"perm": perm})


@rule("aten.select.int")
def select(n: NodeCtx) -> Value:
    x = n.tensor(0)
    shape = n.shape(x)
    axis = _axis(n, n.arg(1, "dim"), len(shape))
    index = int(n.arg(2, "index"))
    index = index + shape[axis] if index < 0 else index
    if not 0 <= index < shape[axis]:
        raise n.fail(f"index {index} out of range for dim {axis} of size {shape[axis]}")
    y = n.emit1("Slice", [x], {"starts": [index], "ends": [index + 1], "axes": [axis]})
    return _reshape_to(n, y, n.out_shape)


@rule("aten.slice.Tensor")
def slice_(n: NodeCtx) -> Value:
    x = n.tensor(0)
    shape = n.shape(x)
    axis = _axis(n, n.arg(1, "dim", 0), len(shape))
    size = shape[axis]
    start, end, step = n.arg(2, "start"), n.arg(3, "end"), int(n.arg(4, "step", 1) or 1)
    start = 0 if start is None else int(start)
    end = size if end is None else int(end)
    start, end = (max(0, min(size, v + size if v < 0 else v)) for v in (start, end))
    if (start, end, step) == (0, size, 1):
        return x
    return n.emit1("Slice", [x], {"starts": [start], "ends": [end], "axes": [axis],
                                  "steps": [step]})


@rule("aten.as_strided.default", "aten.as_strided_copy.default")
def as_strided(n: NodeCtx) -> Value:
    """A strided view of known strides: the Reshape / Slice / Transpose chain reading the same
    elements (planner/importers/torch/strided.py), else (an overlapping or reordering view) a gather
    of the elements it reads, whose gradient adds up where the view reads an element twice."""
    x = n.tensor(0)
    source = n.traced(0, "self")
    if source is None or not hasattr(source, "strides"):
        raise n.fail("the input's strides are unknown")
    shape = n.shape(x)
    if max(math.prod(shape), math.prod(n.ints(1, "size"))) > VIEW_LIMIT:
        raise n.fail(f"a strided view of a tensor of shape {list(shape)}: over {VIEW_LIMIT} "
                     f"elements")
    offset = n.arg(3, "storage_offset")
    idx = logical_index(shape, source.strides, source.offset,
                        n.ints(1, "size"), n.ints(2, "stride"),
                        source.offset if offset is None else int(offset))
    ops = view_ops(idx, math.prod(shape)) if idx is not None else None
    if ops is None:
        return gather_positions(n, x, strided_positions(n, 0, n.ints(1, "size"),
                                                        n.ints(2, "stride"), offset))
    for op, attrs in ops:
        if op != "Reshape" or list(n.shape(x)) != attrs["shape"]:
            x = n.emit1(op, [x], attrs)
    return x


@rule("aten.index.Tensor")
def index(n: NodeCtx) -> Value:
    """x[..., ids, ...] with integer ids: computed ones an IndexGather (negative ids from the
    end); constant ones (a relative-position-bias table indexed by a buffer) a gather whose
    gradient is a scatter-add (planner/importers/gather.py), and on several adjacent axes
    (`table[rows, cols]`) an index of those axes merged into one: computed in the graph where
    some are computed (CLIP's `x[torch.arange(B), text.argmax(-1)]`, _merged_index)."""
    x = n.tensor(0)
    shape = n.shape(x)
    picked = [(k, v) for k, v in enumerate(n.arg(1, "indices")) if v is not None]
    axes = [k for k, _ in picked]
    if not picked or axes != list(range(axes[0], axes[0] + len(axes))):
        raise Unsupported(f"{n.op} (indices on non-adjacent axes {axes})")
    if any(n.dtype(v) == "bool" for _, v in picked):  # x[mask]: a size the data decide
        return masked_rows(n, picked)
    if any(not n.dtype(v).startswith(("int", "uint")) for _, v in picked):
        raise Unsupported(f"{n.op} ({', '.join(n.dtype(v) for _, v in picked)} indices)")
    if not n.dtype(x).startswith(("float", "bfloat")):
        raise Unsupported(f"{n.op} (of a computed {n.dtype(x)} tensor)")
    axis, ids = picked[0]
    if len(picked) > 1 and not all(isinstance(v, Const) for _, v in picked):
        ids = _merged_index(n, picked, shape)
        x = _reshape_to(n, x, (*shape[:axis], math.prod(shape[k] for k in axes),
                               *shape[axis + len(axes):]))
        return n.emit1("IndexGather", [x, ids], {"axis": axis, "mode": "rows", "wrap": False})
    if len(picked) > 1 or isinstance(ids, Const):
        ids = n.const(_flat_index(n, [(k, v.value()) for k, v in picked], shape), "int64")
        merged = math.prod(shape[k] for k in axes)
        shape = (*shape[:axis], merged, *shape[axis + len(axes):])
        x = _reshape_to(n, x, shape)
        return gather_rows(n.emit1, x, shape, axis, ids, n.shape(ids))
    # computed ids: negative ones count from the end, as PyTorch's (planner/ops/index.py)
    if n.dtype(ids) == "int32":
        ids = cast(n, ids, "int64")
    if n.dtype(ids) != "int64":
        raise Unsupported(f"{n.op} (computed {n.dtype(ids)} indices)")
    return n.emit1("IndexGather", [x, ids], {"axis": axis, "mode": "rows", "wrap": True})


def _merged_index(n: NodeCtx, picked: list, shape: tuple[int, ...]) -> str:
    """Indices on adjacent axes, some computed (CLIP's `x[torch.arange(B), text.argmax(-1)]`),
    as one int64 index into those axes merged, computed in the graph: each broadcast, taken
    from the end where negative, times its axis' stride. An index outside its own axis makes
    the merged one -1 (IndexGather refuses it at run time, as torch does) rather than a valid
    position of another row."""
    merged = math.prod(shape[k] for k, _ in picked)
    flat: str | Const | None = None
    bad: str | None = None
    stride = merged
    for k, v in picked:
        d = shape[k]
        stride //= d
        if n.dtype(v) != "int64":
            v = cast(n, v, "int64")
        out = n.emit1("Or", [n.emit1("Less", [v, n.const(-d, "int64")]),
                             n.emit1("GreaterOrEqual", [v, n.const(d, "int64")])])
        bad = out if bad is None else n.emit1("Or", [bad, out])
        v = n.emit1("Where", [n.emit1("Less", [v, n.const(0, "int64")]),
                              n.emit1("Add", [v, n.const(d, "int64")]), v])
        if stride != 1:
            v = n.emit1("Mul", [v, n.const(stride, "int64")])
        flat = v if flat is None else n.emit1("Add", [flat, v])
    return n.emit1("Where", [bad, n.const(-1, "int64"), flat])


def _flat_index(n: NodeCtx, picked: list, shape: tuple[int, ...]) -> object:
    """Constant indices on adjacent axes (broadcast together; negative ones count from the
    end, as PyTorch's) as one index into those axes merged."""
    import numpy as np

    dims = [shape[k] for k, _ in picked]
    try:
        arrays = np.broadcast_arrays(*(v for _, v in picked))
    except ValueError:
        raise n.fail(f"indices of shapes {[list(v.shape) for _, v in picked]} do not "
                     f"broadcast") from None
    for (k, _), a, d in zip(picked, arrays, dims, strict=True):
        if a.size and (a.min() < -d or a.max() >= d):
            raise n.fail(f"indices from {a.min()} to {a.max()} out of range for dim {k} of "
                         f"size {d}")
    return np.ravel_multi_index(tuple(a % max(d, 1) for a, d in zip(arrays, dims, strict=True)),
                                dims).astype(np.int64)


@rule("aten.flip.default")
def flip(n: NodeCtx) -> Value:
    """A Slice walking each flipped axis backwards (step -1 from the last element to before the
    first, whose numpy spelling is an end below -extent)."""
    x = n.tensor(0)
    shape = n.shape(x)
    axes = sorted({_axis(n, a, len(shape)) for a in n.ints(1, "dims")})
    axes = [a for a in axes if shape[a] > 1]
    if not axes:
        return x
    return n.emit1("Slice", [x], {"starts": [-1] * len(axes),
                                  "ends": [-shape[a] - 1 for a in axes], "axes": axes,
                                  "steps": [-1] * len(axes)})


@rule("aten.roll.default")
def roll(n: NodeCtx) -> Value:
    """torch.roll: along each rolled axis, the last `shift` elements then the others (two
    Slices and a Concat, whose gradients are exact); with no dims, the flattened tensor."""
    x = n.tensor(0)
    shape = n.shape(x)
    shifts, dims = n.ints(1, "shifts"), n.ints(2, "dims", [])
    if not dims:
        if len(shifts) != 1:
            raise n.fail(f"{len(shifts)} shifts without dims")
        shape, dims = (math.prod(shape),), [0]
        x = _reshape_to(n, x, shape)
    if len(shifts) != len(dims):
        raise n.fail(f"{len(shifts)} shifts for {len(dims)} dims")
    for shift, dim in zip(shifts, dims, strict=True):
        axis = _axis(n, dim, len(shape))
        size = shape[axis]
        s = shift % size if size else 0
        if s == 0:
            continue
        tail = n.emit1("Slice", [x], {"starts": [size - s], "ends": [size], "axes": [axis]})
        head = n.emit1("Slice", [x], {"starts": [0], "ends": [size - s], "axes": [axis]})
        x = n.emit1("Concat", [tail, head], {"axis": axis})
    return _reshape_to(n, x, n.out_shape)


@rule("aten.split_with_sizes.default", "aten.split.Tensor")
def split(n: NodeCtx) -> Value:
    x = n.tensor(0)
    shape = n.shape(x)
    axis = _axis(n, n.arg(2, "dim", 0), len(shape))
    if n.op == "aten.split.Tensor":
        each = int(n.arg(1, "split_size"))
        sizes = [min(each, shape[axis] - s) for s in range(0, shape[axis], max(each, 1))]
    else:
        sizes = n.ints(1, "split_sizes")
    if len(sizes) == 1:
        return (x,)
    return tuple(n.emit("Split", [x], {"axis": axis, "sizes": sizes}, n_out=len(sizes)))


@rule("aten.repeat.default")
def repeat(n: NodeCtx) -> Value:
    """x.repeat(r0, r1, ...): each axis i becomes (r_i, s_i) by an Expand of (1, s_i), then the
    pairs merge (x's shape padded with leading 1s to the repeats' length)."""
    x = n.tensor(0)
    reps = n.ints(1, "repeats")
    shape = n.shape(x)
    if len(reps) < len(shape) or any(r < 0 for r in reps):
        raise n.fail(f"repeats {reps} for a tensor of shape {list(shape)}")
    padded = (1,) * (len(reps) - len(shape)) + tuple(shape)
    if all(r == 1 for r in reps):
        return _reshape_to(n, x, padded)
    pairs = [d for s in padded for d in (1, s)]
    y = n.emit1("Expand", [_reshape_to(n, x, tuple(pairs))],
                {"shape": [d for r, s in zip(reps, padded, strict=True) for d in (r, s)]})
    return _reshape_to(n, y, n.out_shape)


@rule("aten.constant_pad_nd.default", "aten.reflection_pad1d.default",
      "aten.reflection_pad2d.default", "aten.replication_pad1d.default",
      "aten.replication_pad2d.default")
def pad(n: NodeCtx) -> Value:
    """F.pad: PyTorch lists (before, after) pairs from the last axis backwards; the planner's
    Pad all befores, then all afters, from the first axis (numpy's modes: reflect, edge)."""
    x = n.tensor(0)
    rank = len(n.shape(x))
    flat = n.ints(1, "padding" if "constant" not in n.op else "pad")
    if len(flat) % 2 or len(flat) // 2 > rank:
        raise Unsupported(f"{n.op} (padding {flat})")
    before, after = [0] * rank, [0] * rank
    for k in range(len(flat) // 2):
        before[rank - 1 - k], after[rank - 1 - k] = flat[2 * k], flat[2 * k + 1]
    if not any(flat):
        return x
    mode = "constant" if "constant" in n.op else "reflect" if "reflection" in n.op else "edge"
    if any(p < 0 for p in flat):
        # negative padding crops (planner/importers/torch/rules_views.py)
        return padded_by_index(n, x, before, after, mode, float(n.arg(2, "value", 0.0)))
    value = float(n.arg(2, "value", 0.0)) if mode == "constant" else 0.0
    return n.emit1("Pad", [x], {"pads": before + after, "mode": mode, "value": value})


@rule("aten.cat.default")
def cat(n: NodeCtx) -> Value:
    """torch.cat: parts of other dtypes are cast to the node's, torch.result_type of them all
    (float32 with float64 is float64); empty parts add nothing (torch skips a 1-D empty one
    whatever the others' rank), and when every part is empty so is the result."""
    tensors = n.arg(0, "tensors")
    dtype = n.out_dtype or n.dtype(tensors[0])
    parts = [as_dtype(n, v, dtype) for v in tensors if 0 not in n.shape(v)]
    if not parts:
        return n.const(np.zeros(n.out_shape, dtype), dtype)
    if len(parts) == 1:
        return parts[0]
    axis = _axis(n, n.arg(1, "dim", 0), len(n.out_shape))
    return n.emit1("Concat", parts, {"axis": axis})


@rule("aten.stack.default")
def stack(n: NodeCtx) -> Value:
    """torch.stack: each part gets a new axis of one, then a Concat (promoting as cat)."""
    axis = _axis(n, n.arg(1, "dim", 0), len(n.out_shape))
    dtype = n.out_dtype or n.dtype(n.arg(0, "tensors")[0])
    parts = []
    for v in n.arg(0, "tensors"):
        shape = list(n.shape(v))
        parts.append(_reshape_to(n, as_dtype(n, v, dtype), tuple(shape[:axis] + [1] +
                                                                shape[axis:])))
    return parts[0] if len(parts) == 1 else n.emit1("Concat", parts, {"axis": axis})


# ---- element-wise ----------------------------------------------------------------------------

UNARY = {"relu": "Relu", "sigmoid": "Sigmoid", "tanh": "Tanh", "neg": "Neg", "exp": "Exp",
         "log": "Log", "sqrt": "Sqrt", "abs": "Abs", "erf": "Erf"}


@rule(*(f"aten.{k}.default" for k in UNARY))
def unary(n: NodeCtx) -> Value:
    return n.emit1(UNARY[n.op.split(".")[1]], [n.tensor(0)])


@rule("aten.prelu.default")
def prelu(n: NodeCtx) -> Value:
    """nn.PReLU: one slope, or one per channel (axis 1), broadcast as PRelu's slope."""
    x, w = n.tensor(0), n.tensor(1)
    rank, size = len(n.shape(x)), n.shape(w)
    if size not in ((1,), ()) and (rank < 2 or size != (n.shape(x)[1],)):
        raise n.fail(f"slope of shape {list(size)} for an input of shape {list(n.shape(x))}")
    if size == (n.shape(x)[1:2]) and rank > 2:
        w = _reshape_to(n, w, size + (1,) * (rank - 2))
    elif size == (1,) and rank == 0:  # a 0-d x keeps its rank (torch's result is 0-d)
        w = _reshape_to(n, w, ())
    return n.emit1("PRelu", [x, w])


@rule("aten.softplus.default")
def softplus(n: NodeCtx) -> Value:
    """log(1 + exp(beta x)) / beta, x itself where beta x > threshold; at the default threshold
    20 the two are equal to float32, so the switch is kept only below 15."""
    x = n.tensor(0)
    beta, threshold = float(n.arg(1, "beta", 1.0)), float(n.arg(2, "threshold", 20.0))
    bx = x if beta == 1.0 else n.emit1("Scale", [x], {"factor": beta})
    y = n.emit1("Softplus", [bx])
    if beta != 1.0:
        y = n.emit1("Scale", [y], {"factor": 1.0 / beta})
    if threshold >= 15.0:
        return y
    above = n.emit1("Greater", [bx, n.const(threshold, n.dtype(x))])
    return n.emit1("Where", [above, x, y])


def _number(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _promoted(n: NodeCtx, k: int, name: str) -> str | Const:
    """Tensor argument k in the node's own dtype: PyTorch computes an int or bool tensor met by
    a float one (or a float number) in the float dtype, and an int32 or bool one met by an
    int64 one in int64, so it is cast first."""
    v = n.tensor(k, name)
    want = n.out_dtype or n.dtype(v)
    if n.dtype(v) == want:
        return v
    if isinstance(v, Const):
        return n.const(v.value(), want)
    if not want.startswith(("float", "bfloat")) and want not in INTEGER_DTYPES:
        raise Unsupported(f"{n.op} ({n.dtype(v)} to {want})")
    return n.emit1("Cast", [v], {"to": want})


def _times(n: NodeCtx, v: str | Const, factor: float | int) -> str | Const:
    """v * factor, a number: Scale of a float tensor, Mul by a constant of an integer one
    (Scale is float: int64 * 3 must stay exact)."""
    dtype = n.dtype(v)
    if dtype in INTEGER_DTYPES:
        return n.emit1("Mul", [v, n.const(factor, dtype)])
    return n.emit1("Scale", [v], {"factor": float(factor)})


@rule("aten.add.Tensor", "aten.sub.Tensor", "aten.add.Scalar", "aten.sub.Scalar",
      "aten.rsub.Scalar", "aten.rsub.Tensor")
def add_sub(n: NodeCtx) -> Value:
    first = n.arg(0, "self")
    if _number(first) and n.op in ("aten.sub.Tensor", "aten.add.Tensor"):
        # `1 - t` (torch.rsub too) exports as sub.Tensor(1, t): first - alpha * t.
        b = _promoted(n, 1, "other")
        alpha = n.arg(2, "alpha", 1)
        if alpha != 1:
            b = _times(n, b, alpha)
        return n.emit1("Sub" if n.op == "aten.sub.Tensor" else "Add",
                       [n.const(first, n.dtype(b)), b])
    a = _promoted(n, 0, "self")
    dtype = n.dtype(a)
    other, alpha = n.arg(1, "other"), n.arg(2, "alpha", 1)
    b = n.const(other, dtype) if _number(other) else _promoted(n, 1, "other")
    if n.op.startswith("aten.rsub"):  # other - alpha * a
        if alpha != 1:
            a = _times(n, a, alpha)
        return n.emit1("Sub", [b, a])
    if _number(other) and other * alpha == 0:
        return a
    if _number(other):
        b = n.const(other * alpha, dtype)
    elif alpha != 1:
        b = _times(n, b, alpha)
    return n.emit1("Sub" if n.op.startswith("aten.sub") else "Add", [a, b])


@rule("aten.mul.Tensor", "aten.mul.Scalar", "aten.div.Tensor", "aten.div.Scalar")
def mul_div(n: NodeCtx) -> Value:
    if n.out_dtype == "bool":  # bool * bool: torch's logical and (isfinite decomposes to it)
        return bool_product(n)
    div = n.op.startswith("aten.div")
    if div and n.kwargs.get("rounding_mode") is not None:
        raise Unsupported(f"{n.op} (rounding_mode)")
    first = n.arg(0, "self")
    if _number(first) and n.op in ("aten.mul.Tensor", "aten.div.Tensor"):
        b = _promoted(n, 1, "other")  # `2 / t` as div.Tensor(2, t)
        if not div:
            return _times(n, b, first)
        return n.emit1("Div", [n.const(first, n.dtype(b)), b])
    a, other = _promoted(n, 0, "self"), n.arg(1, "other")
    if _number(other):
        if div and not n.dtype(a).startswith(("float", "bfloat")):
            raise Unsupported(f"{n.op} (of {n.dtype(a)} tensors)")
        return _times(n, a, 1.0 / other if div else other)
    return n.emit1("Div" if div else "Mul", [a, _promoted(n, 1, "other")])


@rule("aten.pow.Tensor_Scalar")
def pow_(n: NodeCtx) -> Value:
    x, e = n.tensor(0), n.arg(1, "exponent")
    if e == 1:
        return x
    if e == 2:
        return n.emit1("Mul", [x, x])
    return n.emit1("Pow", [x, n.const(e, n.dtype(x))])


@rule("aten.rsqrt.default")
def rsqrt(n: NodeCtx) -> Value:
    x = n.tensor(0)
    return n.emit1("Pow", [x, n.const(-0.5, n.dtype(x))])


@rule("aten.where.self")
def where(n: NodeCtx) -> Value:
    """The branches promoted to one dtype as torch.where does (heaviside's int64 0 / 1 beside
    a float tensor)."""
    from planner.importers.torch.rules_pointwise import as_dtype, promoted

    a, b = n.tensor(1), n.tensor(2)
    dtype = n.out_dtype or promoted(n, [a, b])
    return n.emit1("Where", [n.tensor(0), as_dtype(n, a, dtype), as_dtype(n, b, dtype)])


@rule("aten.masked_fill.Scalar")
def masked_fill(n: NodeCtx) -> Value:
    x = n.tensor(0)
    return n.emit1("Where", [n.tensor(1), n.const(n.arg(2, "value"), n.dtype(x)), x])


# ---- activations -----------------------------------------------------------------------------

@rule("aten.gelu.default")
def gelu(n: NodeCtx) -> Value:
    return n.emit1("Gelu", [n.tensor(0)], {"approximate": n.arg(1, "approximate", "none")})


@rule("aten.hardtanh.default")
def hardtanh(n: NodeCtx) -> Value:
    """HardTanh (relu6 is hardtanh(x, 0, 6)): its gradient is 0 at both corners
    (planner/ops/kinks.py), where clamp's passes."""
    x = n.tensor(0)
    if n.dtype(x) in INTEGER_DTYPES:
        raise n.fail(f"hardtanh of {n.dtype(x)} tensors (torch takes floats)")
    low, high = float(n.arg(1, "min_val", -1.0)), float(n.arg(2, "max_val", 1.0))
    return n.emit1("HardTanh", [x, n.const(low, n.dtype(x)), n.const(high, n.dtype(x))])


@rule("aten.clamp.default", "aten.clamp_min.default")
def clamp(n: NodeCtx) -> Value:
    low, high = n.arg(1, "min"), n.arg(2, "max")
    x = n.tensor(0)
    if n.dtype(x) in INTEGER_DTYPES:
        return clamp_numbers(n, x, low, high)  # Max / Min of integers, or a float Clip
    bounds = {"min": None if low is None else float(low),
              "max": None if high is None else float(high)}
    return n.emit1("Clip", [x], bounds)


@rule("aten.leaky_relu.default")
def leaky_relu(n: NodeCtx) -> Value:
    return n.emit1("LeakyRelu", [n.tensor(0)], {"alpha": float(n.arg(1, "negative_slope", 0.01))})


@rule("aten.elu.default")
def elu(n: NodeCtx) -> Value:
    scale, alpha = float(n.arg(2, "scale", 1)), float(n.arg(1, "alpha", 1.0))
    if n.arg(3, "input_scale", 1) != 1:
        raise Unsupported(f"{n.op} (input_scale)")
    if scale != 1:  # selu: scale * elu(x, alpha)
        return n.emit1("Selu", [n.tensor(0)], {"alpha": alpha, "gamma": scale})
    return n.emit1("Elu", [n.tensor(0)], {"alpha": alpha})


@rule("aten.silu.default")
def silu(n: NodeCtx) -> Value:
    x = n.tensor(0)
    return n.emit1("Mul", [x, n.emit1("Sigmoid", [x])])


@rule("aten._softmax.default", "aten._log_softmax.default", "aten.softmax.int",
      "aten.log_softmax.int")
def softmax(n: NodeCtx) -> Value:
    x = n.tensor(0)
    op = "LogSoftmax" if "log_softmax" in n.op else "Softmax"
    return n.emit1(op, [x], {"axis": _axis(n, n.arg(1, "dim"), len(n.shape(x)))})


@rule("aten._safe_softmax.default")
def safe_softmax(n: NodeCtx) -> Value:
    """Softmax whose rows masked to -inf whole give zeros (attention over padding). Kept whole
    (convert.PRESERVED): torch's decomposition takes the softmax of the -inf row (NaN) and
    then masks it, so its gradient is 0 * NaN; here the masked rows are zeroed before the
    softmax too, and the gradient there is torch's, 0."""
    x = n.tensor(0)
    dtype = n.arg(2, "dtype", None)
    if dtype is not None and _dtype_name(dtype) != n.dtype(x):  # computed in dtype, as torch
        x = cast(n, x, _dtype_name(dtype))
    axis = _axis(n, n.arg(1, "dim"), len(n.shape(x)))
    top = n.emit1("ReduceMax", [x], {"axes": [axis], "keepdims": True})
    masked = n.emit1("Equal", [top, n.const(-math.inf, n.dtype(x))])
    zero = n.const(0.0, n.dtype(x))
    y = n.emit1("Softmax", [n.emit1("Where", [masked, zero, x])], {"axis": axis})
    return n.emit1("Where", [masked, zero, y])


@rule("aten.upsample_nearest2d.vec", "aten.upsample_bilinear2d.vec",
      "aten.upsample_nearest2d.default", "aten.upsample_bilinear2d.default")
def upsample(n: NodeCtx) -> Value:
    """nn.Upsample / F.interpolate on (N, C, H, W): the planner's Resize. PyTorch's nearest is
    ONNX's asymmetric floor; bilinear without align_corners is half_pixel (with the planner's
    clamp of a negative coordinate to 0; not pytorch_half_pixel, whose output of length 1 reads
    x[0] where PyTorch reads (in - 1) / 2). A given
    scale factor is used as given (PyTorch samples with 1 / scale, not in / out), except with
    align_corners, where PyTorch ignores it."""
    x = n.tensor(0)
    bilinear = "bilinear" in n.op
    if n.op.endswith(".vec"):
        scales = n.arg(3 if bilinear else 2, "scale_factors")
    else:
        scales = [n.arg(3 if bilinear else 2, "scales_h"), n.arg(4 if bilinear else 3, "scales_w")]
        scales = None if None in scales else scales
    align = bool(n.arg(2, "align_corners", False)) if bilinear else False
    if align:  # PyTorch maps corners to corners, (in - 1) / (out - 1), whatever the scale
        scales = None
    sizes = list(n.out_shape[2:])
    if sizes == list(n.shape(x)[2:]) and (not scales or list(scales) == [1.0, 1.0]):
        return x
    return n.emit1("Resize", [x], {
        "sizes": sizes, "scales": [float(s) for s in scales] if scales else [],
        "mode": "linear" if bilinear else "nearest",
        "coordinate_mode": ("align_corners" if align else "half_pixel") if bilinear
        else "asymmetric",
        "nearest_mode": "floor"})


# torch's enums of grid_sampler_2d: GridSamplerInterpolation and GridSamplerPadding
GRID_MODES = {0: "bilinear", 1: "nearest"}
GRID_PADDINGS = {0: "zeros", 1: "border", 2: "reflection"}


@rule("aten.grid_sampler_2d.default", "aten.grid_sampler_3d.default")
def grid_sampler(n: NodeCtx) -> Value:
    """F.grid_sample of an (N, C, H, W) or (N, C, D, H, W) image: the planner's GridSample
    (planner/ops/grid_sample.py), modes as attrs; bicubic is refused. (F.affine_grid
    decomposes into arithmetic on a constant base grid, which imports as it is.)"""
    x, grid = n.tensor(0), n.tensor(1)
    mode, padding = int(n.arg(2, "interpolation_mode")), int(n.arg(3, "padding_mode"))
    if mode not in GRID_MODES:
        raise Unsupported(f"{n.op} (bicubic interpolation)" if mode == 2 else
                          f"{n.op} (interpolation mode {mode})")
    if padding not in GRID_PADDINGS:
        raise n.fail(f"padding mode {padding} is none of torch's (0 zeros, 1 border, "
                     f"2 reflection)")
    if n.dtype(x) != n.dtype(grid):
        grid = cast(n, grid, n.dtype(x))
    return n.emit1("GridSample", [x, grid], {"mode": GRID_MODES[mode],
                                            "padding_mode": GRID_PADDINGS[padding],
                                            "align_corners": bool(n.arg(4, "align_corners"))})


# ---- scans (the reductions are rules_reduce.py's) ---------------------------------------------

@rule("aten.cumsum.default", "aten.cumprod.default")
def cumsum(n: NodeCtx) -> Value:
    """A running sum or product; torch sums a bool or int32 tensor in int64 (its result's
    dtype, as a `dtype` argument's), exactly (planner/ops/cumsum.py)."""
    x = n.tensor(0)
    dtype = n.kwargs.get("dtype")
    want = n.out_dtype or (_dtype_name(dtype) if dtype is not None else n.dtype(x))
    integer = n.op == "aten.cumsum.default" and want in INTEGER_DTYPES
    if dtype is not None and _dtype_name(dtype) != n.dtype(x) and not integer:
        raise Unsupported(f"{n.op} (cast to {_dtype_name(dtype)})")
    if integer:
        x = cast(n, x, want)
    elif not n.dtype(x).startswith(("float", "bfloat")):
        raise Unsupported(f"{n.op} (of {n.dtype(x)} tensors)")
    shape = n.shape(x)
    if not shape:
        return x
    return n.emit1("CumProd" if n.op == "aten.cumprod.default" else "CumSum", [x],
                   {"axis": _axis(n, n.arg(1, "dim"), len(shape))})


@rule("aten.topk.default")
def topk(n: NodeCtx) -> Value:
    """torch.topk: the planner's TopK (values and int64 indices; always sorted, a valid answer
    for sorted=False too)."""
    x = n.tensor(0)
    shape = n.shape(x)
    if not n.dtype(x).startswith(("float", "bfloat")):
        raise Unsupported(f"{n.op} (of {n.dtype(x)} tensors)")
    if not shape:
        raise Unsupported(f"{n.op} (of a scalar)")
    attrs = {"k": int(n.arg(1, "k")), "axis": _axis(n, n.arg(2, "dim", -1), len(shape)),
             "largest": bool(n.arg(3, "largest", True))}
    return tuple(n.emit("TopK", [x], attrs, n_out=2))


# ---- dense layers ----------------------------------------------------------------------------

def _matmul_rank(n: NodeCtx, *vs: str | Const) -> None:
    if any(len(n.shape(v)) < 2 for v in vs):
        raise Unsupported(f"{n.op} (rank-1 operand)")


@rule("aten.addmm.default")
def addmm(n: NodeCtx) -> Value:
    bias, a, b = n.tensor(0), n.tensor(1), n.tensor(2)
    return scaled_sum(n, bias, n.emit1("MatMul", [a, b]), n.kwargs.get("beta", 1),
                      n.kwargs.get("alpha", 1))


@rule("aten.mm.default", "aten.bmm.default", "aten.matmul.default")
def matmul(n: NodeCtx) -> Value:
    a, b = n.tensor(0), n.tensor(1)
    _matmul_rank(n, a, b)
    return n.emit1("MatMul", [a, b])


@rule("aten.embedding.default")
def embedding(n: NodeCtx) -> Value:
    """A row gather; with padding_idx (nn.Embedding normalises a negative one first), the
    positions reading that row pass no gradient (torch's embedding_backward skips them), so
    its row's gradient is 0: a Where picking the detached rows there (the same values)."""
    table, ids = n.tensor(0), n.tensor(1)
    y = n.emit1("Embedding", [table, ids])
    padding = n.arg(2, "padding_idx", -1)
    if padding in (-1, None):
        return y
    rows = n.shape(table)[0]
    if not isinstance(padding, int) or not 0 <= padding < rows:
        raise n.fail(f"padding_idx {padding!r} for a table of {rows} rows")
    mask = n.emit1("Equal", [ids, n.const(padding, n.dtype(ids))])
    mask = n.emit1("Reshape", [mask], {"shape": [*n.shape(ids), 1]})
    return n.emit1("Where", [mask, n.emit1("StopGradient", [y]), y])


# ---- convolution and pooling -----------------------------------------------------------------

def _pair(n: NodeCtx, k: int, name: str, default: list[int], dims: int) -> list[int]:
    v = n.ints(k, name, default) or default
    v = v * dims if len(v) == 1 else v
    if len(v) != dims:
        raise n.fail(f"{name} {v} does not fit a {dims}-D window")
    return v


@rule("aten.convolution.default")
def convolution(n: NodeCtx) -> Value:
    x, w, b = n.tensor(0), n.tensor(1), n.arg(2, "bias")
    rank = len(n.shape(x))
    if rank not in (3, 4, 5):
        raise Unsupported(f"{n.op} ({rank - 2}-D)")
    dims = rank - 2
    strides = _pair(n, 3, "stride", [1], dims)
    pads = _pair(n, 4, "padding", [0], dims)
    dilations = _pair(n, 5, "dilation", [1], dims)
    transposed, groups = bool(n.arg(6, "transposed", False)), int(n.arg(8, "groups", 1))
    out_pad = _pair(n, 7, "output_padding", [0], dims)
    if dims == 3:
        return conv3d(n, x, w, b, strides, pads, dilations, groups,
                      out_pad if transposed else None)
    if dims == 1:
        xs, ws = n.shape(x), n.shape(w)
        x = _reshape_to(n, x, (xs[0], xs[1], 1, xs[2]))
        w = _reshape_to(n, w, (ws[0], ws[1], 1, ws[2]))
        strides, pads, dilations, out_pad = ([1, *strides], [0, *pads], [1, *dilations],
                                             [0, *out_pad])
    attrs = {"strides": strides, "pads": pads + pads, "dilations": dilations, "groups": groups}
    if transposed:
        y = conv_transpose2d(n, x, w, {**attrs, "output_padding": out_pad})
    else:
        if any(out_pad):
            raise n.fail("output_padding on a convolution that is not transposed")
        y = n.emit1("Conv2D", [x, w], attrs)
    if dims == 1:
        ys = n.shape(y)
        y = _reshape_to(n, y, (ys[0], ys[1], ys[3]))
    return y if b is None else n.emit1("BiasAdd", [y, b], {"axis": 1})


# ---- normalization and dropout ---------------------------------------------------------------

def _affine(n: NodeCtx, v: object, shape: tuple[int, ...], fill: float, like: str) -> str | Const:
    """An optional scale/shift: absent (affine=False) is a constant of ones / zeros."""
    return v if v is not None else filled(n, shape, fill, n.dtype(like),  # type: ignore
                                          f"{n.label}/const")


@rule("aten._native_batch_norm_legit_functional.default",
      "aten._native_batch_norm_legit_no_training.default")
def batch_norm(n: NodeCtx) -> Value:
    x = n.tensor(0)
    channels = (n.shape(x)[1],)
    w = _affine(n, n.arg(1, "weight"), channels, 1.0, x)
    b = _affine(n, n.arg(2, "bias"), channels, 0.0, x)
    mean, var = n.tensor(3, "running_mean"), n.tensor(4, "running_var")
    functional = n.op.startswith("aten._native_batch_norm_legit_functional")
    training = bool(n.arg(5, "training")) if functional else False
    momentum = n.arg(6 if functional else 5, "momentum")
    eps = n.arg(7 if functional else 6, "eps")
    attrs = {"epsilon": float(eps), "momentum": float(momentum), "training": training}
    if not training:
        y = n.emit1("BatchNorm", [x, w, b, mean, var], attrs)
        return (y, UNAVAILABLE, UNAVAILABLE) + ((mean, var) if functional else ())
    # Planner outputs: y, new running mean, new running var, saved mean, saved invstd.
    y, new_mean, new_var, _, _ = n.emit("BatchNorm", [x, w, b, mean, var], attrs, n_out=5)
    return (y, UNAVAILABLE, UNAVAILABLE, new_mean, new_var)


@rule("aten.native_group_norm.default")
def group_norm(n: NodeCtx) -> Value:
    """nn.GroupNorm: the planner's GroupNorm (statistics of the batch, as PyTorch always)."""
    x = n.tensor(0)
    channels = (n.shape(x)[1],)
    w = _affine(n, n.arg(1, "weight"), channels, 1.0, x)
    b = _affine(n, n.arg(2, "bias"), channels, 0.0, x)
    attrs = {"groups": int(n.arg(6, "group")), "epsilon": float(n.arg(7, "eps"))}
    y = n.emit("GroupNorm", [x, w, b], attrs, n_out=3)[0]
    return group_norm_stats(n, y, x, attrs["groups"], attrs["epsilon"])


@rule("aten._native_batch_norm_legit.no_stats")
def batch_norm_no_stats(n: NodeCtx) -> Value:
    """Batch statistics without running ones. nn.InstanceNorm decomposes to this over
    (1, N * C, ...) (its affine weight repeated N times), which is GroupNorm with a group per
    channel, as there is one sample; BatchNorm(track_running_stats=False) over (N, C, ...),
    in train() and eval() alike, is the same with the batch moved inside the one sample:
    (C, N, ...) as (1, C, N * ...), normalised, and moved back (no BatchNorm op, so the
    evaluation graph cannot switch it to running statistics it does not have)."""
    x = n.tensor(0)
    shape = n.shape(x)
    if len(shape) < 2 or not n.arg(3, "training", True):
        raise Unsupported(f"{n.op} (without batch statistics)")
    w = _affine(n, n.arg(1, "weight"), shape[1:2], 1.0, x)
    b = _affine(n, n.arg(2, "bias"), shape[1:2], 0.0, x)
    attrs = {"groups": shape[1], "epsilon": float(n.arg(5, "eps"))}
    if len(shape) >= 3 and shape[0] == 1:
        y = n.emit("GroupNorm", [x, w, b], attrs, n_out=3)[0]
        return (y, UNAVAILABLE, UNAVAILABLE)
    perm = [1, 0, *range(2, len(shape))]  # its own inverse
    rows = math.prod(shape) // shape[1]
    inside = _reshape_to(n, n.emit1("Transpose", [x], {"perm": perm}), (1, shape[1], rows))
    y = n.emit("GroupNorm", [inside, w, b], attrs, n_out=3)[0]
    back = _reshape_to(n, y, (shape[1], shape[0], *shape[2:]))
    return (n.emit1("Transpose", [back], {"perm": perm}), UNAVAILABLE, UNAVAILABLE)


@rule("aten.native_layer_norm.default")
def layer_norm(n: NodeCtx) -> Value:
    x = n.tensor(0)
    shape = tuple(n.ints(1, "normalized_shape"))
    w = _affine(n, n.arg(2, "weight"), shape, 1.0, x)
    b = n.arg(3, "bias")
    low = n.dtype(x)
    # Mixed types (autocast: a bfloat16 or float16 input, the module's float32 affine): torch
    # normalizes in float32 and rounds the output once to the input's type, as these casts do.
    mixed = low in ("bfloat16", "float16") and n.dtype(w) == "float32"
    if mixed:
        x = n.emit1("Cast", [x], {"to": "float32"})
    inputs = [x, w] if b is None else [x, w, b]
    attrs = {"axis": len(n.shape(x)) - len(shape), "epsilon": float(n.arg(4, "eps"))}
    outs = n.emit("LayerNorm", inputs, attrs, n_out=3)
    if mixed:
        outs = [n.emit1("Cast", [outs[0]], {"to": low}), *outs[1:]]
    return layer_norm_stats(n, outs, attrs["epsilon"])


@rule("aten.native_dropout.default", "aten.dropout.default")
def dropout(n: NodeCtx) -> Value:
    x, p, train = n.tensor(0), float(n.arg(1, "p")), n.arg(2, "train")
    y = x if not train or p == 0 else _dropout(n, x, p)
    return (y, UNAVAILABLE) if n.op.startswith("aten.native_dropout") else y


def _dropout(n: NodeCtx, x: str | Const, p: float) -> str:
    if not 0 <= p <= 1:
        raise n.fail(f"dropout probability {p} is not in [0, 1] (torch refuses it too)")
    if p == 1:
        # torch's x * mask * scale with an all-zero mask and scale 0: zeros, NaN where x is not
        # finite; the gradient dy * 0 is zero
        return n.emit1("Mul", [x, n.const(0.0, n.dtype(x))])
    return n.emit1("Dropout", [x], {"rate": p, "seed": n.next_dropout_seed()})


@rule("aten.scaled_dot_product_attention.default")
def attention(n: NodeCtx) -> Value:
    q, k, v = n.tensor(0), n.tensor(1), n.tensor(2)
    mask, p = n.arg(3, "attn_mask"), float(n.arg(4, "dropout_p", 0.0))
    causal, scale = bool(n.arg(5, "is_causal", False)), n.arg(6, "scale")
    if n.kwargs.get("enable_gqa") and n.shape(q)[-3:-2] != n.shape(k)[-3:-2]:
        raise Unsupported(f"{n.op} (grouped-query heads)")
    scale = 1.0 / math.sqrt(n.shape(q)[-1]) if scale is None else float(scale)
    scores = n.emit1("MatMul", [q, k], {"transpose_a": False, "transpose_b": True})
    scores = n.emit1("Scale", [scores], {"factor": scale})
    if causal:
        scores = n.emit1("CausalMask", [scores])
    if mask is not None:
        if n.dtype(mask) == "bool":
            raise Unsupported(f"{n.op} (boolean attn_mask)")
        scores = n.emit1("Add", [scores, mask])
    weights = n.emit1("Softmax", [scores], {"axis": -1})
    # PyTorch applies dropout_p whenever it is given (nn.MultiheadAttention passes 0 in eval).
    if p > 0:
        weights = _dropout(n, weights, p)
    return n.emit1("MatMul", [weights, v])


# ---- constants -------------------------------------------------------------------------------

@rule("aten.full.default", "aten.zeros.default", "aten.ones.default", "aten.scalar_tensor.default",
      "aten.full_like.default", "aten.zeros_like.default", "aten.ones_like.default")
def full(n: NodeCtx) -> Value:

    name = n.op.split(".")[1]
    value = {"zeros": 0, "ones": 1, "zeros_like": 0, "ones_like": 1}.get(name)
    if value is None:
        value = n.arg(0 if name == "scalar_tensor" else 1, "fill_value")
    dtype = n.kwargs.get("dtype")
    if dtype is None and name.endswith("_like"):
        dtype = n.dtype(n.tensor(0))
    dtype = _dtype_name(dtype) if dtype is not None else "float32"
    return filled(n, tuple(n.out_shape or ()), value, dtype)


def filled(n: NodeCtx, shape: tuple[int, ...], value: object, dtype: str,
           name: str | None = None) -> Value:
    """A tensor of `shape` holding `value`: a constant made now up to FOLD_OUTPUT_LIMIT
    elements (the cap on every constant an import materialises: a 9 KB file may declare
    zeros of 2^29 elements), a Fill op the step computes past it. `name`: the constant's
    (else the node's)."""
    import numpy as np

    from planner.importers.onnx.fold import FOLD_OUTPUT_LIMIT

    count = math.prod(shape)
    if count <= FOLD_OUTPUT_LIMIT:
        return Const.of(n.imp.fresh(name or n.label), np.full(shape, value, dtype=dtype),
                        origin="constant")
    exact = isinstance(value, (bool, int, float)) and float(value) == value
    if dtype not in ("float32", "int64") or not exact:
        raise n.fail(f"a constant {dtype} tensor of {count} elements, more than the "
                     f"{FOLD_OUTPUT_LIMIT} an import makes, and not one the step can fill "
                     "(float32 or int64 of one exact value)")
    return n.emit1("Fill", [], {"shape": list(shape), "value": float(value), "dtype": dtype})
