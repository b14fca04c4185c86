"""VGG (Simonyan & Zisserman 2014), configurations A/B/D/E = depth 11/13/16/19, as torchvision.

    5 blocks of 3x3 convolutions (pad 1, bias, Relu) each ending in a 2x2/2 max pooling:
    depth 16: [64, 64] [128, 128] [256 x 3] [512 x 3] [512 x 3]
    -> flatten -> fc6 4096 relu dropout -> fc7 4096 relu dropout -> fc8 = logits

torchvision's adaptive 7x7 average pooling is the identity at 224x224 and is left out. The
image must be at least 32 (five halvings).

Example:
    >>> g = vgg16(batch=1)
    >>> g.tensor("flatten").shape, sum(n.op == "Conv2D" for n in g.nodes)
    ((1, 25088), 13)
"""

from __future__ import annotations

from planner.graph import Graph, GraphBuilder
from planner.zoo.common import graph_name, require, require_positive, scaled
from planner.zoo.layers import conv2d, dropout, head, linear, max_pool, relu

# Convolutions per block, by depth (the paper's configurations A, B, D, E).
BLOCKS = {11: (1, 1, 2, 2, 2), 13: (2, 2, 2, 2, 2), 16: (2, 2, 3, 3, 3), 19: (2, 2, 4, 4, 4)}
CHANNELS = (64, 128, 256, 512, 512)


def vgg16(*, batch: int = 32, image: int = 224, width: float = 1.0, depth: int = 16,
          classes: int = 1000, loss: bool = True) -> Graph:
    """VGG-16 (or 11/13/19 by `depth`) on (batch, 3, image, image) inputs."""
    name = graph_name(vgg16, locals())
    require_positive("vgg16", batch=batch, width=width, classes=classes)
    require(depth in BLOCKS, "vgg16", "depth", f"must be one of {sorted(BLOCKS)}, got {depth}")
    require(image >= 32, "vgg16", "image", f"must be >= 32, got {image}")
    b = GraphBuilder(name)
    x = b.input("images", (batch, 3, image, image))
    for i, (convs, c) in enumerate(zip(BLOCKS[depth], CHANNELS, strict=True), start=1):
        with b.scope(f"block{i}"):
            for j in range(1, convs + 1):
                x = relu(b, conv2d(b, x, scaled(c, width), 3, name=f"conv{j}", bias=True),
                         name=f"relu{j}")
            x = max_pool(b, x, 2, 2, name="pool")
    x = b.op("Flatten", [x], {"axis": 1}, name="flatten")
    for i, seed in ((6, 1), (7, 2)):
        x = relu(b, linear(b, x, scaled(4096, width), name=f"fc{i}"), name=f"relu{i}")
        x = dropout(b, x, 0.5, seed, name=f"dropout{i}")
    return b.build(head(b, x, classes, loss, name="fc8"))
