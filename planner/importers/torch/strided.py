"""`aten.as_strided` as planner views: which elements of its input a strided view reads, and
the Reshape / Slice / Transpose chain that reads them.

torch.export writes as_strided where a decomposition restrides a tensor (a permute before an
adaptive pooling gives one). It addresses the input's storage, so the input's own strides
(its FakeTensor's) say which logical element each output element is: `logical_index` works
that out. The planner's tensors are contiguous; a view whose logical indices are affine with
positive, nested strides (index = base + sum(i_j * t_j), each t_j a multiple of the next
smaller one and its extent inside the larger one's step) is the flat input reshaped to
(N / t_1, t_1 / t_2, ..., t_k), sliced at base's digits, merged and transposed to the
output's order (`view_ops`). Anything else (an overlapping or broadcast view, a reversed
one) is refused by the caller.

    >>> import numpy as np
    >>> idx = np.arange(12).reshape(3, 4).T[1:3]        # rows 1, 2 of a transposed (3, 4)
    >>> [(op, a.get("shape", a.get("perm"))) for op, a in view_ops(idx, 12)]
    ... # doctest: +NORMALIZE_WHITESPACE
    [('Reshape', [3, 4]), ('Slice', None), ('Reshape', [3, 2]), ('Transpose', [1, 0]),
     ('Reshape', [2, 3])]
"""

from __future__ import annotations

from collections.abc import Sequence
from math import prod
from typing import Any

import numpy as np

Op = tuple[str, dict[str, Any]]

# Elements of a view (and of its input) worked out element by element: a strided view in a
# real model is a small tensor (a pooled output); a larger one is refused, not allocated.
VIEW_LIMIT = 1 << 25


def logical_index(shape: Sequence[int], strides: Sequence[int], offset: int,
                  size: Sequence[int], stride: Sequence[int], storage_offset: int
                  ) -> np.ndarray | None:
    """For each element of the view (size, stride, storage_offset) of a tensor of `shape`
    laid out with `strides` from `offset`, the flat logical (C-order) index of the input
    element it reads; None when the input's layout overlaps itself, the view reads storage
    the input does not cover, or either has more than VIEW_LIMIT elements."""
    if any(d == 0 for d in (*shape, *size)) or max(prod(shape), prod(size)) > VIEW_LIMIT:
        return None

    def positions(dims: Sequence[int], steps: Sequence[int], start: int) -> np.ndarray:
        pos = np.full(tuple(dims), start, dtype=np.int64)
        for k, (d, s) in enumerate(zip(dims, steps, strict=True)):
            pos += (np.arange(d, dtype=np.int64) * s).reshape((d,) + (1,) * (len(dims) - k - 1))
        return pos.reshape(-1)

    held = positions(shape, strides, offset)
    if held.min() < 0 or held.max() >= 2 * VIEW_LIMIT or np.unique(held).size != held.size:
        return None
    owner = np.full(int(held.max()) + 1, -1, dtype=np.int64)
    owner[held] = np.arange(held.size)
    read = positions(size, stride, storage_offset)
    if read.min() < 0 or read.max() >= owner.size or (owner[read] < 0).any():
        return None
    return owner[read].reshape(tuple(size))


def view_ops(idx: np.ndarray, numel: int) -> list[Op] | None:
    """The ops taking a contiguous tensor of `numel` elements to `idx`'s values (its flat
    indices, idx.shape the result's), or None when no Reshape / Slice / Transpose chain
    gives them. A Reshape may leave the shape as it is (the caller skips it)."""
    size = list(idx.shape)
    flat = idx.reshape(-1)
    base = int(flat[0])
    dims = [j for j, d in enumerate(size) if d > 1]
    steps = {j: int(idx[tuple(int(k == j) for k in range(len(size)))]) - base for j in dims}
    affine = np.full(flat.shape, base, dtype=np.int64)
    if dims:
        grid = np.indices(size, dtype=np.int64).reshape(len(size), -1)
        affine += sum(grid[j] * steps[j] for j in dims)
    if not np.array_equal(affine, flat) or any(t <= 0 for t in steps.values()):
        return None
    order = sorted(dims, key=lambda j: -steps[j])  # the output's dims by stride, largest first
    strides = [steps[j] for j in order]
    if any(a <= b or a % b for a, b in zip(strides, strides[1:], strict=False)):
        return None
    used = numel - numel % (strides[0] if strides else 1)
    if int(flat.max()) >= used:
        return None
    if not strides or strides[-1] > 1:
        strides.append(1)  # an axis for the offset inside the smallest stride
    extents = [used // strides[0]] + [a // b for a, b in zip(strides, strides[1:], strict=False)]
    counts = [size[j] for j in order] + [1] * (len(strides) - len(order))
    digits, rest = [], base
    for t in strides:
        digits.append(rest // t)
        rest %= t
    if any(d + c > e for d, c, e in zip(digits, counts, extents, strict=True)):
        return None
    ops: list[Op] = []
    if used != numel:
        ops += [("Reshape", {"shape": [numel]}),
                ("Slice", {"starts": [0], "ends": [used], "axes": [0]})]
    ops.append(("Reshape", {"shape": extents}))
    cut = [k for k, (d, c, e) in enumerate(zip(digits, counts, extents, strict=True))
           if (d, c) != (0, e)]
    if cut:
        ops.append(("Slice", {"starts": [digits[k] for k in cut],
                              "ends": [digits[k] + counts[k] for k in cut], "axes": cut}))
    perm = [order.index(j) for j in dims]  # each output dim from its place in `order`
    if perm != sorted(perm):
        ops += [("Reshape", {"shape": [size[j] for j in order]}),
                ("Transpose", {"perm": perm})]
    ops.append(("Reshape", {"shape": size}))
    # A Reshape depends on its target only: of consecutive ones, the last.
    return [op for op, after in zip(ops, [*ops[1:], None], strict=True)
            if not (op[0] == "Reshape" and after is not None and after[0] == "Reshape")]
