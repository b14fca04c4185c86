"""A small forward graph with both layers that train and evaluate differently (BatchNorm's batch
against running statistics, Dropout's mask against the identity): the evaluation graph's tests
and the executors' evaluate() tests start from it."""

from __future__ import annotations

from planner.graph import Graph, GraphBuilder
from planner.zoo.layers import batch_norm, dropout


def bn_dropout_net() -> Graph:
    """x -> MatMul -> BatchNorm -> Relu -> Dropout -> MatMul -> cross-entropy."""
    b = GraphBuilder("bn_dropout")
    x, y = b.input("x", (6, 5)), b.input("y", (6,), dtype="int64", role="label")
    h = b.op("MatMul", [x, b.param("w1", (5, 4), init="glorot")], name="fc1")
    h = b.op("Relu", [batch_norm(b, h, name="bn")], name="relu")
    h = dropout(b, h, rate=0.5, seed=3, name="drop")
    logits = b.op("MatMul", [h, b.param("w2", (4, 3), init="glorot")], name="fc2")
    loss = b.op("SoftmaxCrossEntropy", [logits, y], name="loss")
    return b.build(outputs=[logits, loss])
