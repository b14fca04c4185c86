"""Rules for data movement and reductions: Reshape, Flatten, Squeeze, Unsqueeze, Transpose,
Concat, Split, Slice, Pad, Tile, Expand, Gather, ReduceSum, ReduceMean, DepthToSpace,
SpaceToDepth, CumSum, TopK.

Shapes, axes, pads and repeats must be known at import time (initializers, Constant nodes or
folded shape computations); they become the planner op's attributes, fully resolved: Reshape
gets explicit extents (ONNX's 0 "copy this dim" and -1 worked out), Squeeze and Unsqueeze are
Reshapes, Slice gets clamped non-negative bounds, axes are non-negative. An op that changes
nothing (a Reshape to the same shape, an identity Transpose) binds its output to its input.

Tile is a Reshape that puts a 1 before every axis, an Expand of those 1s to the repeat counts,
and a Reshape merging each pair: (d0, d1) -> (1, d0, 1, d1) -> (r0, d0, r1, d1) -> (r0*d0, r1*d1).
Gather is a Slice (constant indices that are evenly spaced, or one index, followed by a
Reshape dropping the axis), an Embedding (computed int64 ids, or other constant ones: axis 0
of a 2-D table as it is, any other axis moved first and the rest flattened into rows,
planner/importers/gather.py), or is folded when data and indices are both known.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from planner.importers.gather import gather_rows
from planner.importers.kit import Const, Unsupported
from planner.importers.onnx.context import NodeCtx, Value, rule
from planner.importers.onnx.errors import OnnxImportError


def _prod(dims: Sequence[int]) -> int:
    return int(np.prod(dims, dtype=np.int64))


def _fail(n: NodeCtx, message: str) -> OnnxImportError:
    return OnnxImportError(f"node {n.label!r} ({n.op_type}): {message}")


def _axes(n: NodeCtx, axes: Sequence[int], rank: int) -> list[int]:
    out = []
    for a in axes:
        if not -rank <= a < max(rank, 1):
            raise _fail(n, f"axis {a} out of range for rank {rank}")
        out.append(int(a) % max(rank, 1))
    return out


def reshape_to(n: NodeCtx, x: Value, shape: Sequence[int]) -> None:
    """Bind output 0 to x reshaped to `shape` (x itself when that changes nothing)."""
    if tuple(shape) == n.type_of(x).shape:
        n.bind(0, x)
    else:
        n.emit1("Reshape", [x], {"shape": [int(d) for d in shape]}, output=0)


@rule("Reshape")
def reshape(n: NodeCtx) -> None:
    x, in_shape = n.value(0), n.shape(0)
    target = n.ints(1, "shape") if n.opset >= 5 else [int(d) for d in n.require_attr("shape")]
    allow_zero = bool(n.attr("allowzero", 0))
    out = []
    for k, d in enumerate(target):
        if d == 0 and not allow_zero:
            if k >= len(in_shape):
                raise _fail(n, f"shape {target} copies dim {k} (0), but the input has rank "
                               f"{len(in_shape)}")
            out.append(in_shape[k])
        else:
            out.append(d)
    if out.count(-1) > 1:
        raise _fail(n, f"shape {target} has more than one -1")
    if -1 in out:
        known = _prod([d for d in out if d != -1])
        size = _prod(in_shape)
        if known == 0 or size % known:
            raise _fail(n, f"cannot reshape {list(in_shape)} into {target}")
        out = [size // known if d == -1 else d for d in out]
    reshape_to(n, x, out)


@rule("Flatten")
def flatten(n: NodeCtx) -> None:
    x, shape = n.value(0), n.shape(0)
    axis = int(n.attr("axis", 1))
    if not -len(shape) <= axis <= len(shape):
        raise _fail(n, f"axis {axis} out of range for rank {len(shape)}")
    axis = axis + len(shape) if axis < 0 else axis
    out = (_prod(shape[:axis]), _prod(shape[axis:]))
    if out == shape:
        n.bind(0, x)
    else:
        n.emit1("Flatten", [x], {"axis": axis}, output=0)


def _axes_input(n: NodeCtx, what: str) -> list[int] | None:
    """The `axes` of Squeeze/Unsqueeze/Reduce*: an attribute in early opsets, input 1 later."""
    if n.has_input(1):
        return n.ints(1, what)
    axes = n.attr("axes")
    return None if axes is None else [int(a) for a in axes]


@rule("Squeeze")
def squeeze(n: NodeCtx) -> None:
    shape = n.shape(0)
    axes = _axes_input(n, "axes")
    if axes is None:
        drop = {k for k, d in enumerate(shape) if d == 1}
    else:
        drop = set(_axes(n, axes, len(shape)))
        bad = [k for k in drop if shape[k] != 1]
        if bad:
            raise _fail(n, f"cannot squeeze axes {sorted(bad)} of shape {list(shape)}: not 1")
    reshape_to(n, n.value(0), [d for k, d in enumerate(shape) if k not in drop])


@rule("Unsqueeze")
def unsqueeze(n: NodeCtx) -> None:
    shape = n.shape(0)
    axes = _axes_input(n, "axes")
    if axes is None:
        raise _fail(n, "missing axes")
    rank = len(shape) + len(axes)
    inserted = set(_axes(n, axes, rank))
    if len(inserted) != len(axes):
        raise _fail(n, f"axes {axes} repeat an axis")
    rest = iter(shape)
    reshape_to(n, n.value(0), [1 if k in inserted else next(rest) for k in range(rank)])


@rule("Transpose")
def transpose(n: NodeCtx) -> None:
    rank = len(n.shape(0))
    perm = [int(p) for p in n.attr("perm", list(reversed(range(rank))))]
    if sorted(perm) != list(range(rank)):
        raise _fail(n, f"perm {perm} is not a permutation of 0..{rank - 1}")
    if perm == list(range(rank)):
        n.bind(0, n.value(0))
    else:
        n.emit1("Transpose", [n.value(0)], {"perm": perm}, output=0)


@rule("Concat")
def concat(n: NodeCtx) -> None:
    values = [n.value(k) for k in range(n.n_inputs)]
    # Zero-size pieces (as some exporters leave in shape computations) add nothing.
    values = [v for v in values if _prod(n.type_of(v).shape) > 0] or values[:1]
    rank = len(n.type_of(values[0]).shape)
    # axis is required from opset 4; before, it defaulted to 1.
    axis = int(n.require_attr("axis") if n.opset >= 4 else n.attr("axis", 1))
    axis = _axes(n, [axis], rank)[0]
    if len(values) == 1:
        n.bind(0, values[0])
    else:
        n.emit1("Concat", values, {"axis": axis}, output=0)


@rule("Split")
def split(n: NodeCtx) -> None:
    shape = n.shape(0)
    axis = _axes(n, [int(n.attr("axis", 0))], len(shape))[0]
    count = len(n.node.output)
    if n.has_input(1):
        sizes = n.ints(1, "split")
    elif n.attr("split") is not None:
        sizes = [int(s) for s in n.attr("split")]
    elif n.attr("num_outputs") is not None:
        # Opset 18: equal pieces of ceil(dim / num_outputs), the last one smaller.
        piece = -(-shape[axis] // int(n.attr("num_outputs")))
        sizes = [min(piece, shape[axis] - piece * k) for k in range(count)]
    else:
        if shape[axis] % count:
            raise _fail(n, f"cannot split dim {shape[axis]} into {count} equal parts")
        sizes = [shape[axis] // count] * count
    if len(sizes) != count or sum(sizes) != shape[axis]:
        raise _fail(n, f"split sizes {sizes} do not cut dim {shape[axis]} into {count} outputs")
    n.emit("Split", [n.value(0)], {"axis": axis, "sizes": sizes}, outputs=list(range(count)))


def _slice_end(bound: tuple[int, int, int], extent: int) -> int:
    """The end of a normalised slice (start, stop, step) as the planner's Slice reads it: never
    before start for a forward step; for a backward one, "before the first element" (stop -1)
    spelled as an end below -extent, since numpy reads -1 as the last element.

    >>> _slice_end((3, -1, -1), 4), _slice_end((1, 3, 1), 4), _slice_end((2, 0, 1), 4)
    (-5, 3, 2)
    """
    start, stop, step = bound
    if step > 0:
        return max(stop, start)
    stop = min(stop, start)
    return stop if stop >= 0 else -extent - 1


@rule("Slice")
def slice_(n: NodeCtx) -> None:
    shape = n.shape(0)
    if n.opset < 10:
        starts = [int(v) for v in n.require_attr("starts")]
        ends = [int(v) for v in n.require_attr("ends")]
        axes = n.attr("axes")
        steps = None
    else:
        starts, ends = n.ints(1, "starts"), n.ints(2, "ends")
        axes = n.ints(3, "axes") if n.has_input(3) else None
        steps = n.ints(4, "steps") if n.has_input(4) else None
    axes = _axes(n, list(range(len(starts))) if axes is None else list(axes), len(shape))
    steps = steps or [1] * len(starts)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise _fail(n, f"starts {starts}, ends {ends}, axes {axes} and steps {steps} differ in "
                       f"length")
    if any(s == 0 for s in steps):
        raise _fail(n, f"steps {steps} hold a 0")
    bounds = [slice(s, e, st).indices(shape[a])
              for s, e, a, st in zip(starts, ends, axes, steps, strict=True)]
    if all(b == (0, shape[a], 1) for b, a in zip(bounds, axes, strict=True)):
        n.bind(0, n.value(0))
        return
    attrs = {"starts": [b[0] for b in bounds],
             "ends": [_slice_end(b, shape[a]) for b, a in zip(bounds, axes, strict=True)],
             "axes": axes, "steps": [] if all(s == 1 for s in steps) else steps}
    n.emit1("Slice", [n.value(0)], attrs, output=0)


@rule("Pad")
def pad(n: NodeCtx) -> None:
    shape = n.shape(0)
    rank = len(shape)
    mode = n.attr("mode", "constant")
    if n.opset < 11:
        pads = [int(p) for p in (n.attr("pads") or n.require_attr("paddings"))]
        value = float(n.attr("value", 0.0))
    else:
        pads = n.ints(1, "pads")
        value = float(n.const_array(2, "constant_value").reshape(())) if n.has_input(2) else 0.0
        if n.has_input(3):
            axes = _axes(n, n.ints(3, "axes"), rank)
            full = [0] * (2 * rank)
            for k, a in enumerate(axes):
                full[a], full[rank + a] = pads[k], pads[len(axes) + k]
            pads = full
    if mode not in ("constant", "reflect", "edge"):
        raise Unsupported(f"Pad (mode {mode})")
    if len(pads) != 2 * rank:
        raise _fail(n, f"pads {pads} must hold 2 * rank = {2 * rank} values")
    if any(p < 0 for p in pads):
        raise Unsupported("Pad (negative pads)")
    if not any(pads):
        n.bind(0, n.value(0))
        return
    n.emit1("Pad", [n.value(0)], {"pads": pads, "mode": mode, "value": value}, output=0)


@rule("Tile")
def tile(n: NodeCtx) -> None:
    shape = n.shape(0)
    repeats = n.ints(1, "repeats")
    if len(repeats) != len(shape) or any(r < 0 for r in repeats):
        raise _fail(n, f"repeats {repeats} must be {len(shape)} counts >= 0")
    if all(r == 1 for r in repeats):
        n.bind(0, n.value(0))
        return
    paired = n.emit1("Reshape", [n.value(0)], {"shape": [v for d in shape for v in (1, d)]})
    spread = n.emit1("Expand", [paired], {"shape": [v for r, d in zip(repeats, shape, strict=True)
                                                    for v in (r, d)]})
    n.emit1("Reshape", [spread], {"shape": [r * d for r, d in zip(repeats, shape, strict=True)]},
            output=0)


@rule("Expand")
def expand(n: NodeCtx) -> None:
    shape = n.shape(0)
    target = n.ints(1, "shape")
    try:
        out = np.broadcast_shapes(shape, tuple(target))
    except ValueError:
        raise _fail(n, f"shape {list(shape)} does not broadcast with {target}") from None
    if tuple(out) == shape:
        n.bind(0, n.value(0))
    else:
        n.emit1("Expand", [n.value(0)], {"shape": [int(d) for d in out]}, output=0)


@rule("Gather")
def gather(n: NodeCtx) -> None:
    data_shape = n.shape(0)
    axis = _axes(n, [int(n.attr("axis", 0))], len(data_shape))[0]
    data, ids = n.const(0), n.const(1)
    if data is not None and ids is not None:
        n.fold(0, np.take(data.value(), ids.value(), axis=axis))
        return
    if ids is not None:
        _gather_constant(n, axis, data_shape, ids.value())
        return
    if n.type(1).dtype != "int64":
        raise Unsupported(f"Gather ({n.type(1).dtype} indices)")
    _gather_rows(n, axis, data_shape, n.value(1), n.shape(1))


def _gather_rows(n: NodeCtx, axis: int, shape: Sequence[int], ids: Value,
                 ids_shape: Sequence[int]) -> None:
    """An Embedding of the axis (planner/importers/gather.py); negative computed ids are
    refused by Embedding's range check."""
    if not n.type(0).dtype.startswith("float"):
        raise Unsupported(f"Gather (of a computed {n.type(0).dtype} tensor)")

    def last(op: str, inputs: list, attrs: dict | None = None) -> Value:
        return n.emit1(op, inputs, attrs, output=0)

    out = gather_rows(n.emit1, n.value(0), shape, axis, ids, ids_shape, last)
    n.bind(0, out)


def _gather_constant(n: NodeCtx, axis: int, shape: Sequence[int], ids: np.ndarray) -> None:
    """Constant indices: one index, or evenly spaced ones (a range, every k-th, reversed:
    torch.flip as the dynamo exporter writes it) is a Slice; any others (T5's and Swin's
    position-bias lookups) an Embedding reading them as a constant (negative ones wrapped)."""
    flat = [int(i) % shape[axis] if -shape[axis] <= int(i) < shape[axis] else None
            for i in ids.reshape(-1)]
    if None in flat:
        raise _fail(n, f"indices {ids.reshape(-1).tolist()} out of range for dim {shape[axis]}")
    step = flat[1] - flat[0] if len(flat) > 1 else 1
    if ids.ndim > 1 or not flat or step == 0 or \
            flat != list(range(flat[0], flat[0] + step * len(flat), step)):
        wrapped = np.asarray(flat, dtype=np.int64).reshape(ids.shape)
        const = Const.of(n.imp.fresh(f"{n.label}/indices"), wrapped, origin="constant")
        _gather_rows(n, axis, shape, const, ids.shape)
        return
    end = _slice_end((flat[0], flat[-1] + step, step), shape[axis])
    sliced = n.emit1("Slice", [n.value(0)], {"starts": [flat[0]], "ends": [end],
                                              "axes": [axis], "steps": [] if step == 1 else [step]},
                     output=None if ids.ndim == 0 else 0)
    if ids.ndim == 0:
        reshape_to(n, sliced, [d for k, d in enumerate(shape) if k != axis])


def reduce_attrs(n: NodeCtx) -> dict | None:
    """The planner attrs of a Reduce* node (axes non-negative, sorted; [] for all), or None
    when it reduces nothing (no axes and noop_with_empty_axes)."""
    axes = _axes_input(n, "axes") or []
    if not axes and n.attr("noop_with_empty_axes", 0):
        return None
    return {"axes": sorted(_axes(n, axes, len(n.shape(0)))),
            "keepdims": bool(n.attr("keepdims", 1))}


@rule("ReduceSum", "ReduceMean")
def reduce(n: NodeCtx) -> None:
    attrs = reduce_attrs(n)
    if attrs is None:
        n.bind(0, n.value(0))
    else:
        n.emit1(n.op_type, [n.value(0)], attrs, output=0)


@rule("DepthToSpace", "SpaceToDepth")
def depth_to_space(n: NodeCtx) -> None:
    """The planner's ops of the same names (mode DCR unless the node says CRD)."""
    if len(n.shape(0)) != 4:
        raise Unsupported(f"{n.op_type} (rank {len(n.shape(0))})")
    mode = n.attr("mode", "DCR")
    n.emit1(n.op_type, [n.value(0)], {"blocksize": int(n.require_attr("blocksize")),
                                      "mode": mode}, output=0)


@rule("CumSum")
def cumsum(n: NodeCtx) -> None:
    """The planner's CumSum; the axis (an input) must be known at import time, as exporters
    write it (torch.cumsum's dim)."""
    (axis,) = n.ints(1, "axis")
    if not n.type(0).dtype.startswith(("float", "bfloat")):
        raise Unsupported(f"CumSum (of {n.type(0).dtype} tensors)")
    n.emit1("CumSum", [n.value(0)], {"axis": axis, "exclusive": bool(n.attr("exclusive", 0)),
                                     "reverse": bool(n.attr("reverse", 0))}, output=0)


@rule("TopK")
def topk(n: NodeCtx) -> None:
    """The planner's TopK (always sorted: also a valid answer for sorted=0); k (an input from
    opset 10) must be known at import time."""
    k = n.ints(1, "k")[0] if n.opset >= 10 else int(n.require_attr("k"))
    if not n.type(0).dtype.startswith(("float", "bfloat")):
        raise Unsupported(f"TopK (of {n.type(0).dtype} tensors)")
    n.emit("TopK", [n.value(0)], {"k": k, "axis": int(n.attr("axis", -1)),
                                  "largest": bool(n.attr("largest", 1))}, outputs=[0, 1])
