"""Multi-layer perceptron: (Linear -> Relu) per hidden layer, then a Linear to the classes.

    x (batch, in_features) -> fc1 -> relu1 -> ... -> fc<k+1> = logits -> SoftmaxCrossEntropy

Example:
    >>> g = mlp(batch=2, hidden=[4], in_features=3, classes=2)
    >>> g.name
    'mlp_batch2_in_features3_hidden4_classes2'
    >>> [n.name for n in g.nodes][:3], g.outputs
    (['fc1', 'fc1/bias_add', 'relu1'], ('logits', 'loss'))
"""

from __future__ import annotations

from collections.abc import Sequence

from planner.graph import Graph, GraphBuilder
from planner.zoo.common import graph_name, require, require_positive
from planner.zoo.layers import classify, linear, relu


def mlp(*, batch: int = 32, in_features: int = 784, hidden: Sequence[int] = (256, 128),
        classes: int = 10, loss: bool = True) -> Graph:
    """MLP over flat features (MNIST-sized by default)."""
    name = graph_name(mlp, locals())
    require_positive("mlp", batch=batch, in_features=in_features, classes=classes)
    require(all(h >= 1 for h in hidden), "mlp", "hidden", f"sizes must be >= 1, got {hidden}")
    b = GraphBuilder(name)
    x = b.input("x", (batch, in_features))
    for i, width in enumerate(hidden, start=1):
        x = relu(b, linear(b, x, width, name=f"fc{i}"), name=f"relu{i}")
    logits = linear(b, x, classes, name=f"fc{len(hidden) + 1}", init="glorot", output="logits")
    return b.build(classify(b, logits, loss))
