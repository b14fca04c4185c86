"""Embedding lookup (a row gather) and its gradient, a scatter-add into a dense table gradient.

    Embedding     [table (V, D), ids (int, any shape)] -> (*ids.shape, D)
    EmbeddingGrad [ids, dy (*ids.shape, D)] attrs num_embeddings=V -> dtable (V, D)

Repeated ids accumulate: dtable[v] = sum of dy over every position where ids == v. Ids outside
[0, V) are an error (no wrap-around for negative ids, unlike numpy indexing).

Example:
    >>> import numpy as np
    >>> from planner.ops.base import get_op
    >>> ids = np.array([[0, 2], [2, 2]])
    >>> dy = np.ones((2, 2, 1))
    >>> get_op("EmbeddingGrad").reference([ids, dy], {"num_embeddings": 3})[0].ravel()
    array([1., 0., 3.])
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from planner.dtypes import INTEGER_DTYPES
from planner.ops.base import (
    Attr,
    Attrs,
    GradBuilder,
    OpDef,
    OpError,
    TensorType,
    register,
    require_float,
    require_rank,
    zero_flops,
)

if TYPE_CHECKING:
    from planner.ir.graph import Node


def _require_ids(op: str, ids: TensorType) -> None:
    if ids.dtype not in INTEGER_DTYPES:
        raise OpError(f"{op}: ids must be an integer tensor (int64, int32, int16, int8 or "
                      f"uint8), got {ids.dtype}")


def _check_range(op: str, ids: np.ndarray, num_embeddings: int) -> None:
    if ids.size and (ids.min() < 0 or ids.max() >= num_embeddings):
        raise OpError(f"{op}: ids must lie in [0, {num_embeddings}), got values from "
                      f"{ids.min()} to {ids.max()}")


def _embedding_infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    table, ids = ins
    require_rank("Embedding", table, 2, "table")
    require_float("Embedding", table, "table")
    _require_ids("Embedding", ids)
    return [TensorType((*ids.shape, table.shape[1]), table.dtype)]


def _embedding_reference(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    table, ids = xs
    _check_range("Embedding", ids, table.shape[0])
    return [table[ids]]


def _embedding_bytes(ins: list[TensorType], outs: list[TensorType], a: Attrs) -> int:
    # A gather reads the ids and only the rows they select (one output's worth), not the table.
    return ins[1].nbytes + 2 * outs[0].nbytes


def _embedding_gradient(g: GradBuilder, node: Node,
                        grad_outputs: list[str | None]) -> list[str | None]:
    table, ids = node.inputs
    dy = grad_outputs[0]
    if dy is None or not g.needs(table):
        return [None, None]
    num_embeddings = g.type(table).shape[0]
    return [g.emit("EmbeddingGrad", [ids, dy], {"num_embeddings": num_embeddings})[0], None]


register(OpDef(
    name="Embedding",
    cost_class="scatter",
    recompute="expensive",
    arity=2,
    infer=_embedding_infer,
    flops=zero_flops,
    bytes_moved=_embedding_bytes,
    reference=_embedding_reference,
    gradient=_embedding_gradient,
    nondiff_inputs=(1,),
    doc="y[..., :] = table[ids[...], :] (torch.nn.functional.embedding).",
))


def _embedding_grad_infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    ids, dy = ins
    num_embeddings = a["num_embeddings"]
    _require_ids("EmbeddingGrad", ids)
    require_float("EmbeddingGrad", dy, "dy")
    if num_embeddings <= 0:
        raise OpError(f"EmbeddingGrad: num_embeddings must be positive, got {num_embeddings}")
    if dy.rank != ids.rank + 1 or dy.shape[:-1] != ids.shape:
        raise OpError(f"EmbeddingGrad: dy has shape {list(dy.shape)}, expected ids' shape "
                      f"{list(ids.shape)} plus the embedding dim")
    return [TensorType((num_embeddings, dy.shape[-1]), dy.dtype)]


def _embedding_grad_reference(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    ids, dy = xs
    num_embeddings, dim = a["num_embeddings"], dy.shape[-1]
    _check_range("EmbeddingGrad", ids, num_embeddings)
    dtable = np.zeros((num_embeddings, dim), dtype=dy.dtype)
    # np.add.at accumulates repeated ids (plain fancy-index += would keep only the last).
    # (ids.size, dim), not (-1, dim): numpy cannot infer -1 when dim is 0 (an empty batch).
    np.add.at(dtable, ids.reshape(-1), dy.reshape(ids.size, dim))
    return [dtable]


register(OpDef(
    name="EmbeddingGrad",
    cost_class="scatter",
    arity=2,
    attrs={"num_embeddings": Attr("int", required=True)},
    infer=_embedding_grad_infer,
    # One add per element of dy scattered into the table.
    flops=lambda ins, outs, a: ins[1].size,
    reference=_embedding_grad_reference,
    nondiff_inputs=(0,),
    doc="dtable = zeros (V, D), then dtable[ids[i]] += dy[i] for every position i.",
))
