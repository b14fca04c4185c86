"""Copy-views and windowed views of ATen (the `_copy` variants torch.export keeps, narrow,
unbind, Tensor.unfold, resize) and aten.copy, which decompositions write to fill a slice.

Views the planner has as ops (a Slice, a Split) become those; a view reading elements twice
or out of order (Tensor.unfold's overlapping windows) is a gather of the positions it reads,
known at import (planner/importers/torch/rules_index.py), whose gradient adds up the reads.
aten.copy(self, src) is src broadcast to self's shape in self's dtype: torch.export writes it
where a decomposition fills a slice of a tensor (F.pad's circular mode, torch.diff with
prepend, linalg.matrix_power(x, 0)), and only src's values (and gradient) reach the result.
An uninitialized tensor (empty_like, empty_permuted, new_empty_strided) is zeros.
"""

from __future__ import annotations

import numpy as np

from planner.dtypes import DTYPE_BYTES
from planner.importers.kit import Const
from planner.importers.torch.context import NodeCtx, Value, rule
from planner.importers.torch.rules_index import flat_positions, gather_positions
from planner.importers.torch.rules_pointwise import as_dtype


def _axis(n: NodeCtx, dim: object, rank: int) -> int:
    width = max(rank, 1)
    if not isinstance(dim, int) or not -width <= dim < width:
        raise n.fail(f"dim {dim} out of range for rank {rank}")
    return dim % width


def _shaped(n: NodeCtx, v, shape: tuple[int, ...]) -> Value:
    return v if n.shape(v) == tuple(shape) else n.emit1("Reshape", [v], {"shape": list(shape)})


@rule("aten.copy.default")
def copy(n: NodeCtx) -> Value:
    """self's values replaced by src's (broadcast, cast to self's dtype)."""
    self_, src = n.tensor(0), n.tensor(1, "src")
    want, have = n.shape(self_), n.shape(src)
    y = as_dtype(n, src, n.dtype(self_))
    if have == want:
        return y
    pairs = zip(have[::-1], want[::-1], strict=False)
    if len(have) > len(want) or any(a not in (1, b) for a, b in pairs):
        raise n.fail(f"src of shape {list(have)} does not broadcast to {list(want)}")
    return n.emit1("Expand", [y], {"shape": list(want)})


@rule("aten.narrow_copy.default")
def narrow_copy(n: NodeCtx) -> Value:
    """x.narrow(dim, start, length): a Slice."""
    x = n.tensor(0)
    shape = n.shape(x)
    axis = _axis(n, n.arg(1, "dim"), len(shape))
    start, length = int(n.arg(2, "start")), int(n.arg(3, "length"))
    start += shape[axis] if start < 0 else 0
    if not (0 <= start and length >= 0 and start + length <= shape[axis]):
        raise n.fail(f"start {start}, length {length} out of range for dim {axis} of size "
                     f"{shape[axis]}")
    if (start, length) == (0, shape[axis]):
        return x
    return n.emit1("Slice", [x], {"starts": [start], "ends": [start + length], "axes": [axis]})


@rule("aten.unbind_copy.int")
def unbind_copy(n: NodeCtx) -> Value:
    """x.unbind(dim): each index of dim a tensor of x's other axes (a Split of ones)."""
    x = n.tensor(0)
    shape = n.shape(x)
    axis = _axis(n, n.arg(1, "dim", 0), len(shape))
    rest = shape[:axis] + shape[axis + 1:]
    if shape[axis] == 1:
        return (_shaped(n, x, rest),)
    parts = n.emit("Split", [x], {"axis": axis, "sizes": [1] * shape[axis]},
                   n_out=shape[axis])
    return tuple(_shaped(n, p, rest) for p in parts)


@rule("aten.unfold.default", "aten.unfold_copy.default")
def unfold(n: NodeCtx) -> Value:
    """Tensor.unfold(dim, size, step): windows of `size` elements every `step` along dim, as
    a new last axis: the gather of each window's positions."""
    x = n.tensor(0)
    shape = n.shape(x)
    axis = _axis(n, n.arg(1, "dimension"), len(shape))
    size, step = int(n.arg(2, "size")), int(n.arg(3, "step"))
    line = shape or (1,)
    if not 0 <= size <= line[axis] or step < 1:
        raise n.fail(f"size {size}, step {step} for dim {axis} of size {line[axis]}")
    flat = flat_positions(n, line)
    windows = np.lib.stride_tricks.sliding_window_view(flat, size, axis=axis)
    pick = (slice(None),) * axis + (slice(None, None, step),)
    return gather_positions(n, x, np.ascontiguousarray(windows[pick]).reshape(n.out_shape))


@rule("aten.resize.default")
def resize(n: NodeCtx) -> Value:
    """x.resize_(size) / resize_as_: a reshape when the element count stays; a smaller count
    keeps the first elements (the storage's), a larger one would read uninitialized memory."""
    x = n.tensor(0)
    size = tuple(n.ints(1, "size"))
    have, want = int(np.prod(n.shape(x))), int(np.prod(size))
    if want > have:
        raise n.fail(f"resizing {have} elements to {want}: the new ones are uninitialized")
    if want < have:
        x = n.emit1("Slice", [_shaped(n, x, (have,))], {"starts": [0], "ends": [want],
                                                          "axes": [0]})
    return _shaped(n, x, size)


def padded_by_index(n: NodeCtx, x, before: list[int], after: list[int], mode: str,
                    value: float) -> Value:
    """F.pad with negative widths (cropping) too: per padded axis, the source index of each
    output position, torch's (constant: a crop, then the Pad of what is left; edge: the
    nearest element; reflect: mirrored at the ends) as an IndexGather of a constant index,
    whose gradient adds up the reads."""
    shape = list(n.shape(x))
    if mode == "constant":
        axes = [k for k in range(len(shape)) if before[k] < 0 or after[k] < 0]
        x = n.emit1("Slice", [x], {"starts": [max(-before[k], 0) for k in axes],
                                   "ends": [shape[k] - max(-after[k], 0) for k in axes],
                                   "axes": axes})
        pads = [max(p, 0) for p in before] + [max(p, 0) for p in after]
        return x if not any(pads) else \
            n.emit1("Pad", [x], {"pads": pads, "mode": "constant", "value": value})
    for k, (b, e) in enumerate(zip(before, after, strict=True)):
        if not (b or e):
            continue
        size = shape[k] + b + e
        if size < 0 or shape[k] == 0 or (mode == "reflect" and max(b, e) >= shape[k]):
            raise n.fail(f"padding ({b}, {e}) of dim {k} of size {shape[k]}")
        j = np.arange(size, dtype=np.int64) - b
        if mode == "reflect":
            j = np.abs(j)
            j = np.where(j >= shape[k], 2 * (shape[k] - 1) - j, j)
        src = n.const(np.clip(j, 0, shape[k] - 1), "int64")
        x = n.emit1("IndexGather", [x, src], {"axis": k, "mode": "rows", "wrap": False})
        shape[k] = size
    return x


# never evaluated by torch at import (convert.py folds constant ops): their values would be
# what memory held, and the plan's bytes with them
UNINITIALIZED = ("aten.empty_permuted.default", "aten.new_empty_strided.default",
                 "aten.empty_like.default", "aten.new_empty.default",
                 "aten.empty.memory_format", "aten.empty_strided.default")


@rule(*UNINITIALIZED)
def empty(n: NodeCtx) -> Value:
    """An uninitialized tensor (torch leaves its values undefined, and every use writes it
    first): zeros of the node's shape and dtype, so that a plan's bytes do not depend on
    memory. Its layout (physical order, strides) is torch's concern: the planner's tensors
    are contiguous."""
    if n.out_dtype not in DTYPE_BYTES:
        raise n.fail(f"an empty {n.out_dtype} tensor: the planner's dtypes are "
                     f"{', '.join(DTYPE_BYTES)}")
    return Const.of(n.imp.fresh(n.label), np.zeros(n.out_shape, dtype=n.out_dtype),
                    origin="constant")
