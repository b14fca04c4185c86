"""DenseNet-BC (Huang et al. 2017) as torchvision builds it, with full concatenation joins.

    stem: conv0 7x7/2 (2 x growth) norm0 relu0 pool0 3x3/2
    denseblock1..4, with transition1..3 between them:
        layer k of a block reads Concat(block input, outputs of layers 1..k-1) over channels
        (a fresh Concat per layer: the memory-hungry join the paper's shared-memory version
        avoids) and runs norm1 relu1 conv1 1x1 (4 x growth) norm2 relu2 conv2 3x3 (growth)
        transition: Concat of the block's features, norm relu conv 1x1 (half the channels)
        pool 2x2/2 (average)
    head: norm5 relu5, GlobalAvgPool, flatten, fc = logits

Depths: 121 [6, 12, 24, 16], 169 [6, 12, 32, 32], 201 [6, 12, 48, 32], 264 [6, 12, 64, 48]
with growth 32, and 161 [6, 12, 36, 24] with growth 48. `width` scales the growth rate (and
with it every channel count). The image must be at least 32 (five halvings).

Example:
    >>> g = densenet(batch=1)
    >>> g.tensor("denseblock4/layer16/conv2").shape, g.tensor("relu5").shape
    ((1, 32, 7, 7), (1, 1024, 7, 7))
"""

from __future__ import annotations

from planner.graph import Graph, GraphBuilder
from planner.zoo.common import graph_name, require, require_positive, scaled
from planner.zoo.layers import avg_pool, batch_norm, conv2d, head, max_pool, relu

# depth -> (growth rate, layers per dense block)
CONFIGS = {121: (32, (6, 12, 24, 16)), 161: (48, (6, 12, 36, 24)),
           169: (32, (6, 12, 32, 32)), 201: (32, (6, 12, 48, 32)), 264: (32, (6, 12, 64, 48))}
BN_SIZE = 4  # bottleneck width, in multiples of the growth rate


def densenet(*, batch: int = 32, image: int = 224, width: float = 1.0, depth: int = 121,
             classes: int = 1000, loss: bool = True) -> Graph:
    """DenseNet-`depth` on (batch, 3, image, image) inputs."""
    name = graph_name(densenet, locals())
    require_positive("densenet", batch=batch, width=width, classes=classes)
    require(depth in CONFIGS, "densenet", "depth",
            f"must be one of {sorted(CONFIGS)}, got {depth}")
    require(image >= 32, "densenet", "image", f"must be >= 32, got {image}")
    growth, blocks = CONFIGS[depth]
    growth = scaled(growth, width)
    b = GraphBuilder(name)
    x = b.input("images", (batch, 3, image, image))
    x = conv2d(b, x, 2 * growth, 7, stride=2, name="conv0")
    x = max_pool(b, relu(b, batch_norm(b, x, name="norm0"), name="relu0"), 3, 2, 1, name="pool0")
    for i, layers in enumerate(blocks, start=1):
        with b.scope(f"denseblock{i}"):
            x = dense_block(b, x, layers, growth)
        if i < len(blocks):
            with b.scope(f"transition{i}"):
                x = transition(b, x)
    x = relu(b, batch_norm(b, x, name="norm5"), name="relu5")
    x = b.op("GlobalAvgPool", [x], name="avgpool")
    return b.build(head(b, x, classes, loss, name="classifier"))


def dense_block(b: GraphBuilder, x: str, layers: int, growth: int) -> str:
    """The block's output: Concat of its input and every layer's new features."""
    features = [x]
    for k in range(1, layers + 1):
        with b.scope(f"layer{k}"):
            y = features[0] if k == 1 else b.op("Concat", features, {"axis": 1}, name="concat")
            y = relu(b, batch_norm(b, y, name="norm1"), name="relu1")
            y = conv2d(b, y, BN_SIZE * growth, 1, name="conv1")
            y = relu(b, batch_norm(b, y, name="norm2"), name="relu2")
            features.append(conv2d(b, y, growth, 3, name="conv2"))
    return b.op("Concat", features, {"axis": 1}, name="concat")


def transition(b: GraphBuilder, x: str) -> str:
    y = relu(b, batch_norm(b, x, name="norm"))
    y = conv2d(b, y, b.type(x).shape[1] // 2, 1, name="conv")
    return avg_pool(b, y, 2, 2, name="pool")
