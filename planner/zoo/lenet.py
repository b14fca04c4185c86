"""LeNet-5 (LeCun et al. 1998, with Relu and max pooling as commonly trained today).

    image >= 12:  conv1 5x5 (6), pad 2 -> relu -> maxpool 2 -> conv2 5x5 (16), no pad -> relu
                  -> maxpool 2 -> fc1 120 -> relu -> fc2 84 -> relu -> fc3 = logits
    4 <= image < 12 (e.g. 8x8 scikit-learn digits): the same with both convolutions 3x3, pad 1,
                  so that two 2x2 poolings still fit (8 -> 8 -> 4 -> 4 -> 2).

Convolutions and linear layers carry biases; `width` scales 6, 16, 120 and 84.

Example:
    >>> g = lenet(batch=1)
    >>> g.tensor("flatten").shape
    (1, 400)
    >>> lenet(batch=1, image=8).tensor("flatten").shape
    (1, 64)
"""

from __future__ import annotations

from planner.graph import Graph, GraphBuilder
from planner.zoo.common import graph_name, require, require_positive, scaled
from planner.zoo.layers import conv2d, head, linear, max_pool, relu

# Below this size the 5x5 valid convolution of the second stage leaves nothing to pool.
SMALL_IMAGE = 12


def lenet(*, batch: int = 64, image: int = 28, in_channels: int = 1, width: float = 1.0,
          classes: int = 10, loss: bool = True) -> Graph:
    """LeNet-5 on (batch, in_channels, image, image) inputs."""
    name = graph_name(lenet, locals())
    require(image >= 4, "lenet", "image", f"must be >= 4, got {image}")
    require_positive("lenet", batch=batch, in_channels=in_channels, width=width, classes=classes)
    b = GraphBuilder(name)
    x = b.input("images", (batch, in_channels, image, image))
    k, pad2 = (5, 0) if image >= SMALL_IMAGE else (3, 1)
    x = relu(b, conv2d(b, x, scaled(6, width), k, name="conv1", bias=True), name="relu1")
    x = max_pool(b, x, 2, 2, name="pool1")
    x = relu(b, conv2d(b, x, scaled(16, width), k, pad=pad2, name="conv2", bias=True),
             name="relu2")
    x = max_pool(b, x, 2, 2, name="pool2")
    x = b.op("Flatten", [x], {"axis": 1}, name="flatten")
    x = relu(b, linear(b, x, scaled(120, width), name="fc1"), name="relu3")
    x = relu(b, linear(b, x, scaled(84, width), name="fc2"), name="relu4")
    return b.build(head(b, x, classes, loss, name="fc3"))
