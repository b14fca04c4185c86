"""Wide & Deep (Cheng et al. 2016) over Criteo-style inputs: 26 categorical, 13 dense features.

    ids1..ids26 (batch,) int64 -> embedding1..26 (vocab_k x dim) -> (batch, dim) each
    dense (batch, 13) float32
    features = Concat(embeddings, dense)                          (batch, 26 x dim + 13)
    deep: fc1 1024 relu -> fc2 512 relu -> fc3 256 relu -> deep_logit (1, no bias)
    wide: wide_logit = linear model of the same features (1, no bias)
    logits = Add(deep_logit, wide_logit) + bias                   (batch, 1)
    loss = SigmoidBCE(logits, labels (batch, 1) float32 click targets)

The 26 independent small Embedding lookups are the point of the model for the planner (seed
003): each has its own table, id input and node. The wide part reads the features through their
embeddings, so the graph keeps exactly one table per categorical feature. `vocab` is one size
for every table or one per table.

Example:
    >>> g = wide_deep(batch=4)
    >>> sum(n.op == "Embedding" for n in g.nodes), g.tensor("features").shape
    (26, (4, 429))
"""

from __future__ import annotations

from collections.abc import Sequence

from planner.graph import Graph, GraphBuilder
from planner.zoo.common import graph_name, require, require_positive
from planner.zoo.layers import bias_add, linear, relu


def wide_deep(*, batch: int = 256, tables: int = 26, vocab: Sequence[int] = (1000,),
              dim: int = 16, dense: int = 13, hidden: Sequence[int] = (1024, 512, 256),
              loss: bool = True) -> Graph:
    """Wide & Deep click-through model; graph outputs (logits, loss)."""
    name = graph_name(wide_deep, locals())
    require_positive("wide_deep", batch=batch, tables=tables, dim=dim)
    require(dense >= 0, "wide_deep", "dense", f"must be >= 0, got {dense}")
    vocab = list(vocab)
    require(len(vocab) in (1, tables), "wide_deep", "vocab",
            f"must give one size or {tables} sizes (one per table), got {len(vocab)}")
    require(all(v >= 1 for v in vocab), "wide_deep", "vocab", f"sizes must be >= 1, got {vocab}")
    require(all(h >= 1 for h in hidden), "wide_deep", "hidden", f"must be >= 1, got {hidden}")
    sizes = vocab * tables if len(vocab) == 1 else vocab
    b = GraphBuilder(name)
    columns = []
    for k, size in enumerate(sizes, start=1):
        ids = b.input(f"ids{k}", (batch,), dtype="int64")
        table = b.param(f"embedding{k}/table", (size, dim), init="embedding")
        columns.append(b.op("Embedding", [table, ids], name=f"embedding{k}"))
    if dense:
        columns.append(b.input("dense", (batch, dense)))
    x = features = b.op("Concat", columns, {"axis": 1}, name="features")
    with b.scope("deep"):
        for i, width in enumerate(hidden, start=1):
            x = relu(b, linear(b, x, width, name=f"fc{i}"), name=f"relu{i}")
        deep = linear(b, x, 1, name="logit", bias=False, init="glorot")
    with b.scope("wide"):
        wide = linear(b, features, 1, name="logit", bias=False, init="glorot")
    logits = bias_add(b, b.op("Add", [deep, wide], name="add"), "logits", output="logits")
    if not loss:
        return b.build([logits])
    labels = b.label("labels", (batch, 1), dtype="float32")
    return b.build([logits, b.op("SigmoidBCE", [logits, labels], name="loss")])
