"""AlexNet, the one-tower variant of torchvision (Krizhevsky 2014's "one weird trick" widths),
with the local response normalisation of the original paper (size 5, alpha 1e-4, beta 0.75,
k = 2) after the first two Relus, and Dropout 0.5 before the first two linear layers.

    conv1 11x11/4 (64) relu lrn maxpool3/2 -> conv2 5x5 (192) relu lrn maxpool3/2
    -> conv3 3x3 (384) relu -> conv4 3x3 (256) relu -> conv5 3x3 (256) relu maxpool3/2
    -> flatten -> dropout fc6 4096 relu -> dropout fc7 4096 relu -> fc8 = logits

torchvision's adaptive average pooling to 6x6 is the identity at 224x224 and is left out, so at
other sizes the classifier sees the feature map as it is. The smallest image is 63.

Example:
    >>> alexnet(batch=1).tensor("flatten").shape
    (1, 9216)
"""

from __future__ import annotations

from planner.graph import Graph, GraphBuilder
from planner.zoo.common import graph_name, require, require_positive, scaled
from planner.zoo.layers import conv2d, dropout, head, linear, max_pool, relu

LRN = {"size": 5, "alpha": 1e-4, "beta": 0.75, "bias": 2.0}


def feature_size(image: int) -> int:
    """Spatial size after the last pooling (0 when the image is too small)."""
    s = (image + 2 * 2 - 11) // 4 + 1
    for _ in range(3):  # three 3x3/2 poolings; the convolutions between keep the size
        s = (s - 3) // 2 + 1 if s >= 3 else 0
    return s


def alexnet(*, batch: int = 128, image: int = 224, width: float = 1.0, classes: int = 1000,
            loss: bool = True) -> Graph:
    """AlexNet on (batch, 3, image, image) inputs."""
    name = graph_name(alexnet, locals())
    require_positive("alexnet", batch=batch, width=width, classes=classes)
    require(feature_size(image) >= 1, "alexnet", "image", f"must be >= 63, got {image}")
    b = GraphBuilder(name)
    x = b.input("images", (batch, 3, image, image))
    x = relu(b, conv2d(b, x, scaled(64, width), 11, stride=4, pad=2, name="conv1", bias=True),
             name="relu1")
    x = b.op("LRN", [x], LRN, name="lrn1")
    x = max_pool(b, x, 3, 2, name="pool1")
    x = relu(b, conv2d(b, x, scaled(192, width), 5, name="conv2", bias=True), name="relu2")
    x = b.op("LRN", [x], LRN, name="lrn2")
    x = max_pool(b, x, 3, 2, name="pool2")
    for i, c in ((3, 384), (4, 256), (5, 256)):
        x = relu(b, conv2d(b, x, scaled(c, width), 3, name=f"conv{i}", bias=True),
                 name=f"relu{i}")
    x = max_pool(b, x, 3, 2, name="pool5")
    x = b.op("Flatten", [x], {"axis": 1}, name="flatten")
    for i, seed in ((6, 1), (7, 2)):
        x = dropout(b, x, 0.5, seed, name=f"dropout{i}")
        x = relu(b, linear(b, x, scaled(4096, width), name=f"fc{i}"), name=f"relu{i}")
    return b.build(head(b, x, classes, loss, name="fc8"))
