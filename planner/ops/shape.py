"""Shape ops: Reshape, Flatten, Transpose, Concat, Split, Slice and their gradient helpers
SliceGrad and Zeros.

All are pure data movement: 0 FLOPs. Bytes moved default to reading every input and writing every
output once (a copy); an executor may alias Reshape/Flatten outputs instead, which the memory
planner decides, not the op. Slice reads only the elements it selects.

Gradients stay within this family:

    Reshape, Flatten  -> Reshape back to the input shape
    Transpose(perm)   -> Transpose(inverse perm)
    Concat(axis)      -> Split(axis, sizes = the inputs' extents)
    Split(axis)       -> Concat(axis) of the output gradients, a missing one replaced by Zeros
    Slice             -> SliceGrad (scatter dy into zeros of the input shape)
    SliceGrad         -> Slice (the same elements read back)

Example:
    >>> import numpy as np
    >>> from planner.ops.base import TensorType, get_op
    >>> get_op("Reshape").infer([TensorType((2, 3, 4))], {"shape": [-1, 4]})
    [TensorType(shape=(6, 4), dtype='float32')]
    >>> get_op("Slice").reference([np.arange(10)], {"starts": [-3], "ends": [100], "axes": [0],
    ...                                             "steps": []})[0].tolist()
    [7, 8, 9]
    >>> get_op("Slice").reference([np.arange(4)], {"starts": [-1], "ends": [-5], "axes": [0],
    ...                                            "steps": [-1]})[0].tolist()
    [3, 2, 1, 0]
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from planner.dtypes import DTYPE_BYTES
from planner.ops.base import (
    Attr,
    Attrs,
    GradBuilder,
    OpDef,
    OpError,
    TensorType,
    norm_axis,
    register,
    reorder_scratch,
    zero_flops,
)

if TYPE_CHECKING:
    from planner.ir.graph import Node

# One gradient tensor name, or None, per node output (incoming) or input (returned).
Grads = list[str | None]


def _prod(dims: list[int] | tuple[int, ...]) -> int:
    return int(np.prod(dims, dtype=np.int64))


# ---- Reshape ------------------------------------------------------------------------------------

def reshape_target(op: str, shape: tuple[int, ...], target: list[int]) -> tuple[int, ...]:
    """The output shape of reshaping `shape` to `target` (at most one -1, inferred; 0 is an
    ordinary zero extent, not "copy this dim" as in ONNX).

    >>> reshape_target("Reshape", (2, 3, 4), [4, -1])
    (4, 6)
    """
    size = _prod(shape)
    if any(d < -1 for d in target) or target.count(-1) > 1:
        raise OpError(f"{op}: shape {target} may hold non-negative extents and at most one -1")
    if -1 not in target:
        if _prod(target) != size:
            raise OpError(f"{op}: cannot reshape {list(shape)} ({size} elements) into {target} "
                          f"({_prod(target)} elements)")
        return tuple(target)
    known = _prod([d for d in target if d != -1])
    if known == 0 or size % known:
        raise OpError(f"{op}: cannot reshape {list(shape)} ({size} elements) into {target}: "
                      f"no extent for -1 fits")
    return tuple(size // known if d == -1 else d for d in target)


def _reshape_infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    return [TensorType(reshape_target("Reshape", ins[0].shape, a["shape"]), ins[0].dtype)]


def _reshape_reference(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    return [xs[0].reshape(reshape_target("Reshape", xs[0].shape, a["shape"]))]


def _reshape_back(g: GradBuilder, node: Node, grad_outputs: Grads) -> Grads:
    """Gradient of any op that only reinterprets its input's shape (Reshape, Flatten)."""
    x, dy = node.inputs[0], grad_outputs[0]
    if dy is None or not g.needs(x):
        return [None]
    return g.emit("Reshape", [dy], {"shape": list(g.type(x).shape)})


register(OpDef(
    name="Reshape",
    cost_class="data-movement",
    view=True,
    attrs={"shape": Attr("ints", required=True)},
    infer=_reshape_infer,
    flops=zero_flops,
    reference=_reshape_reference,
    gradient=_reshape_back,
    doc="y = x with shape `shape` (row-major order kept; one -1 is inferred; 0 is not special).",
))


# ---- StopGradient -------------------------------------------------------------------------------
# PyTorch's `t.detach()` (exported as aten.detach, decomposed to aten.alias, which passes the
# gradient on): the same bytes forward, and no gradient to its input, so what reads a detached
# value trains as torch does.

def _no_gradient(g: GradBuilder, node: Node, grad_outputs: Grads) -> Grads:
    return [None]


register(OpDef(
    name="StopGradient",
    cost_class="data-movement",
    view=True,
    infer=lambda ins, a: [ins[0]],
    flops=zero_flops,
    reference=lambda xs, a: [xs[0].copy()],
    gradient=_no_gradient,
    nondiff_inputs=(0,),
    doc="y = x, with no gradient flowing back to x (torch's detach()).",
))


# ---- Flatten ------------------------------------------------------------------------------------

def _flatten_shape(shape: tuple[int, ...], axis: int) -> tuple[int, int]:
    rank = len(shape)
    if not -rank <= axis <= rank:
        raise OpError(f"Flatten: axis {axis} out of range for input shape {list(shape)} "
                      f"(valid: {-rank}..{rank})")
    if axis < 0:
        axis += rank
    return _prod(shape[:axis]), _prod(shape[axis:])


def _flatten_infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    return [TensorType(_flatten_shape(ins[0].shape, a["axis"]), ins[0].dtype)]


def _flatten_reference(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    return [xs[0].reshape(_flatten_shape(xs[0].shape, a["axis"]))]


register(OpDef(
    name="Flatten",
    cost_class="data-movement",
    view=True,
    attrs={"axis": Attr("int", 1)},
    infer=_flatten_infer,
    flops=zero_flops,
    reference=_flatten_reference,
    gradient=_reshape_back,
    doc="2-D view (prod(shape[:axis]), prod(shape[axis:])), as ONNX Flatten; axis in [-r, r].",
))


# ---- Transpose ----------------------------------------------------------------------------------

def _check_perm(shape: tuple[int, ...], perm: list[int]) -> None:
    if sorted(perm) != list(range(len(shape))):
        raise OpError(f"Transpose: perm {perm} is not a permutation of 0..{len(shape) - 1} "
                      f"for input shape {list(shape)}")


def _transpose_infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    x, perm = ins[0], a["perm"]
    _check_perm(x.shape, perm)
    return [TensorType(tuple(x.shape[p] for p in perm), x.dtype)]


def _transpose_reference(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    _check_perm(xs[0].shape, a["perm"])
    return [np.transpose(xs[0], a["perm"])]


def _transpose_gradient(g: GradBuilder, node: Node, grad_outputs: Grads) -> Grads:
    x, dy = node.inputs[0], grad_outputs[0]
    if dy is None or not g.needs(x):
        return [None]
    perm = node.attrs["perm"]
    inverse = [perm.index(k) for k in range(len(perm))]
    return g.emit("Transpose", [dy], {"perm": inverse})


register(OpDef(
    name="Transpose",
    cost_class="data-movement",
    attrs={"perm": Attr("ints", required=True)},
    infer=_transpose_infer,
    flops=zero_flops,
    reference=_transpose_reference,
    gradient=_transpose_gradient,
    doc="y.shape[i] = x.shape[perm[i]] (numpy.transpose); perm is required, never implied.",
))


# ---- Concat -------------------------------------------------------------------------------------

def _concat_infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    first = ins[0]
    if first.rank == 0:
        raise OpError("Concat: inputs must have rank >= 1, got a scalar")
    axis = norm_axis("Concat", a["axis"], first.rank)
    for k, t in enumerate(ins[1:], start=1):
        if t.dtype != first.dtype:
            raise OpError(f"Concat: input {k} is {t.dtype} but input 0 is {first.dtype}")
        if t.rank != first.rank:
            raise OpError(f"Concat: input {k} has shape {list(t.shape)}, rank {t.rank}, but "
                          f"input 0 has shape {list(first.shape)}, rank {first.rank}")
        for d in range(first.rank):
            if d != axis and t.shape[d] != first.shape[d]:
                raise OpError(f"Concat: input {k} has shape {list(t.shape)} but input 0 has "
                              f"{list(first.shape)}: they differ in dim {d}, and only the "
                              f"concatenation axis {axis} may differ")
    shape = list(first.shape)
    shape[axis] = sum(t.shape[axis] for t in ins)
    return [TensorType(tuple(shape), first.dtype)]


def _concat_reference(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    return [np.concatenate(xs, axis=a["axis"])]


def _concat_gradient(g: GradBuilder, node: Node, grad_outputs: Grads) -> Grads:
    dy = grad_outputs[0]
    wanted = [g.needs(x) for x in node.inputs]
    if dy is None or not any(wanted):
        return [None] * len(node.inputs)
    types = [g.type(x) for x in node.inputs]
    axis = norm_axis("Concat", node.attrs["axis"], types[0].rank)
    parts = g.emit("Split", [dy], {"axis": axis, "sizes": [t.shape[axis] for t in types]})
    return [p if w else None for p, w in zip(parts, wanted, strict=True)]


register(OpDef(
    name="Concat",
    scratch=reorder_scratch(1),
    cost_class="data-movement",
    arity=None,
    min_inputs=1,
    attrs={"axis": Attr("int", required=True)},
    infer=_concat_infer,
    flops=zero_flops,
    reference=_concat_reference,
    gradient=_concat_gradient,
    doc="Join inputs along `axis`; every other dim and the dtype must agree.",
))


# ---- Split --------------------------------------------------------------------------------------

def _split_infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    x, sizes = ins[0], a["sizes"]
    if x.rank == 0:
        raise OpError("Split: input must have rank >= 1, got a scalar")
    axis = norm_axis("Split", a["axis"], x.rank)
    if not sizes or any(s < 0 for s in sizes):
        raise OpError(f"Split: sizes {sizes} must be a non-empty list of non-negative extents")
    if sum(sizes) != x.shape[axis]:
        raise OpError(f"Split: sizes {sizes} sum to {sum(sizes)}, but axis {axis} of input "
                      f"shape {list(x.shape)} has extent {x.shape[axis]}")
    outs = []
    for s in sizes:
        shape = list(x.shape)
        shape[axis] = s
        outs.append(TensorType(tuple(shape), x.dtype))
    return outs


def _split_reference(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    cuts = np.cumsum(a["sizes"])[:-1]
    return list(np.split(xs[0], cuts, axis=a["axis"]))


def _split_gradient(g: GradBuilder, node: Node, grad_outputs: Grads) -> Grads:
    x = node.inputs[0]
    if not g.needs(x) or all(d is None for d in grad_outputs):
        return [None]
    parts = []
    for out, dy in zip(node.outputs, grad_outputs, strict=True):
        if dy is None:
            t = g.type(out)
            dy = g.emit("Zeros", [], {"shape": list(t.shape), "dtype": t.dtype})[0]
        parts.append(dy)
    return g.emit("Concat", parts, {"axis": node.attrs["axis"]})


register(OpDef(
    name="Split",
    cost_class="data-movement",
    attrs={"axis": Attr("int", 0), "sizes": Attr("ints", required=True)},
    infer=_split_infer,
    flops=zero_flops,
    reference=_split_reference,
    gradient=_split_gradient,
    doc="Cut x along `axis` into len(sizes) pieces of the given extents (they must sum to it).",
))


# ---- Slice and SliceGrad ------------------------------------------------------------------------

def slice_index(op: str, shape: tuple[int, ...], a: Attrs) -> tuple[slice, ...]:
    """The numpy index that Slice attrs select from a tensor of `shape`: one slice per dim.

    starts and ends count from the end when negative and are clamped to the extent, as numpy
    does (so ONNX's INT64_MAX "to the end" works); steps are non-zero, empty meaning all 1. A
    negative step walks the axis backwards (numpy's x[::-1], torch.flip); its "before the first
    element" end is any end below -extent, as numpy has no other spelling for it.

    >>> slice_index("Slice", (4, 5), {"starts": [1], "ends": [-1], "axes": [-1], "steps": []})
    (slice(None, None, None), slice(1, -1, 1))
    """
    starts, ends, axes = a["starts"], a["ends"], a["axes"]
    steps = a["steps"] or [1] * len(axes)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise OpError(f"{op}: starts {starts}, ends {ends}, axes {axes} and steps {a['steps']} "
                      f"must have the same length (steps may be empty)")
    if any(s == 0 for s in steps):
        raise OpError(f"{op}: steps {steps} hold a 0")
    index = [slice(None)] * len(shape)
    seen: set[int] = set()
    for start, end, axis, step in zip(starts, ends, axes, steps, strict=True):
        d = norm_axis(op, axis, len(shape))
        if d in seen:
            raise OpError(f"{op}: axis {axis} appears twice in axes {axes}")
        seen.add(d)
        index[d] = slice(start, end, step)
    return tuple(index)


def _sliced_shape(shape: tuple[int, ...], index: tuple[slice, ...]) -> tuple[int, ...]:
    return tuple(len(range(*s.indices(n))) for s, n in zip(index, shape, strict=True))


def _slice_infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    x = ins[0]
    return [TensorType(_sliced_shape(x.shape, slice_index("Slice", x.shape, a)), x.dtype)]


def _slice_reference(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    return [xs[0][slice_index("Slice", xs[0].shape, a)]]


def _slice_bytes(ins: list[TensorType], outs: list[TensorType], a: Attrs) -> int:
    # Reads only the selected elements and writes them once.
    return 2 * outs[0].nbytes


def _slice_gradient(g: GradBuilder, node: Node, grad_outputs: Grads) -> Grads:
    x, dy = node.inputs[0], grad_outputs[0]
    if dy is None or not g.needs(x):
        return [None]
    attrs = {k: node.attrs[k] for k in ("starts", "ends", "axes", "steps")}
    return g.emit("SliceGrad", [dy], {**attrs, "input_shape": list(g.type(x).shape)})


_SLICE_ATTRS = {
    "starts": Attr("ints", required=True),
    "ends": Attr("ints", required=True),
    "axes": Attr("ints", required=True),
    "steps": Attr("ints", []),
}

def slice_geometry(full: tuple[int, ...], a: Attrs) -> Attrs:
    """Per-axis first index and step of the slice of a tensor of shape `full` (numpy's
    clamping): what a kernel needs to walk it.

    >>> slice_geometry((4, 6), {"starts": [1], "ends": [100], "axes": [1], "steps": [2]})
    {'begin': [0, 1], 'step': [1, 2]}
    >>> slice_geometry((4, 6), {"starts": [-1], "ends": [-7], "axes": [0], "steps": [-1]})
    {'begin': [3, 0], 'step': [-1, 1]}
    """
    rank = len(full)
    begin, step = [0] * rank, [1] * rank
    steps = a["steps"] or [1] * len(a["axes"])
    for s, e, ax, st in zip(a["starts"], a["ends"], a["axes"], steps, strict=True):
        k = ax % rank
        begin[k], _, step[k] = slice(s, e, st).indices(full[k])
    return {"begin": begin, "step": step}


register(OpDef(
    name="Slice",
    cost_class="data-movement",
    attrs=_SLICE_ATTRS,
    infer=_slice_infer,
    flops=zero_flops,
    bytes_moved=_slice_bytes,
    reference=_slice_reference,
    gradient=_slice_gradient,
    kernel_attrs=lambda ins, a: slice_geometry(ins[0].shape, a),
    doc="x[starts:ends:steps] on the listed axes, numpy clamping; other axes whole.",
))


def _slice_grad_infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    dy, shape = ins[0], tuple(a["input_shape"])
    if any(n < 0 for n in shape):
        raise OpError(f"SliceGrad: input_shape {list(shape)} has a negative extent")
    expected = _sliced_shape(shape, slice_index("SliceGrad", shape, a))
    if dy.shape != expected:
        raise OpError(f"SliceGrad: dy has shape {list(dy.shape)}, but the slice of input_shape "
                      f"{list(shape)} has shape {list(expected)}")
    return [TensorType(shape, dy.dtype)]


def _slice_grad_reference(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    shape = tuple(a["input_shape"])
    dx = np.zeros(shape, dtype=xs[0].dtype)
    dx[slice_index("SliceGrad", shape, a)] = xs[0]
    return [dx]


def _slice_grad_gradient(g: GradBuilder, node: Node, grad_outputs: Grads) -> Grads:
    # SliceGrad places dy in zeros: its own gradient reads the same elements back
    ddx = grad_outputs[0]
    if ddx is None or not g.needs(node.inputs[0]):
        return [None]
    return g.emit("Slice", [ddx], {k: node.attrs[k] for k in ("starts", "ends", "axes", "steps")})


register(OpDef(
    name="SliceGrad",
    cost_class="data-movement",
    attrs={**_SLICE_ATTRS, "input_shape": Attr("ints", required=True)},
    infer=_slice_grad_infer,
    flops=zero_flops,
    reference=_slice_grad_reference,
    gradient=_slice_grad_gradient,
    kernel_attrs=lambda ins, a: slice_geometry(tuple(a["input_shape"]), a),
    doc="dx of Slice: zeros of input_shape with dy written where the slice selected.",
))


# ---- Zeros --------------------------------------------------------------------------------------

def _zeros_infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    shape, dtype = a["shape"], a["dtype"]
    if any(n < 0 for n in shape):
        raise OpError(f"Zeros: shape {shape} has a negative extent")
    if dtype not in DTYPE_BYTES:
        raise OpError(f"Zeros: dtype {dtype!r} is not one of {sorted(DTYPE_BYTES)}")
    return [TensorType(tuple(shape), dtype)]


register(OpDef(
    name="Zeros",
    cost_class="elementwise",
    recompute="never",
    arity=0,
    min_inputs=0,
    attrs={"shape": Attr("ints", required=True), "dtype": Attr("str", "float32")},
    infer=_zeros_infer,
    flops=zero_flops,
    reference=lambda xs, a: [np.zeros(a["shape"], dtype=a["dtype"])],
    doc="A tensor of zeros (stands in for a missing gradient, e.g. of an unused Split output).",
))
