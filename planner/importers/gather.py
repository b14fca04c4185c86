"""Indexing one axis of a float tensor by integer ids, for both front ends (ONNX Gather, ATen
index.Tensor): an Embedding, whose gradient is a scatter-add (EmbeddingGrad), so repeated ids
accumulate as PyTorch's and onnxruntime's do. The indexed axis is moved first and the others
flattened into rows: a (D[axis], rest) table, whose (*ids, rest) lookup is reshaped and moved
back to D[:axis] + ids.shape + D[axis+1:].

    >>> emitted = []
    >>> def emit1(op, inputs, attrs=None):
    ...     emitted.append((op, attrs))
    ...     return op
    >>> gather_rows(emit1, "x", (2, 5, 3), 1, "ids", (4,))
    'Transpose'
    >>> [op for op, _ in emitted]
    ['Transpose', 'Reshape', 'Embedding', 'Reshape', 'Transpose']
    >>> [attrs.get("shape", attrs.get("perm")) for _, attrs in emitted if attrs]
    [[1, 0, 2], [5, 6], [4, 2, 3], [1, 0, 2]]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from math import prod
from typing import Any

Emit1 = Callable[..., Any]


def gather_rows(emit1: Emit1, data: Any, shape: Sequence[int], axis: int, ids: Any,
                ids_shape: Sequence[int], last: Emit1 | None = None) -> Any:
    """`data` (of `shape`) indexed on `axis` (non-negative) by `ids` (ids in [0, D[axis]):
    Embedding checks). `last` emits the final op (the ONNX importer names it after the node's
    output); the result is returned, `data`'s lookup itself when no op follows it."""
    last = last or emit1
    rank = len(shape)
    others = [k for k in range(rank) if k != axis]
    rest = [shape[k] for k in others]
    table = data
    if axis != 0:
        table = emit1("Transpose", [table], {"perm": [axis, *others]})
    if rank != 2:
        table = emit1("Reshape", [table], {"shape": [shape[axis], prod(rest)]})
    k = len(ids_shape)
    perm = [*(k + j for j in range(axis)), *range(k), *(k + j for j in range(axis, rank - 1))]
    grouped = [*ids_shape, *rest]
    if perm == list(range(len(perm))):
        if rank == 2:
            return last("Embedding", [table, ids])
        rows = emit1("Embedding", [table, ids])
        return last("Reshape", [rows], {"shape": grouped})
    rows = emit1("Embedding", [table, ids])
    if [*ids_shape, prod(rest)] != grouped:
        rows = emit1("Reshape", [rows], {"shape": grouped})
    return last("Transpose", [rows], {"perm": perm})
