"""ResNet (He et al. 2015) as torchvision builds it (v1.5: the stride sits on the 3x3 conv).

    stem: conv1 7x7/2 (64) bn1 relu maxpool 3x3/2
    layer1..4: blocks at 64, 128, 256, 512 planes (layers 2-4 start with stride 2)
        basic (depth 18, 34):     conv1 3x3 bn1 relu1 conv2 3x3 bn2       + shortcut, relu
        bottleneck (depth >= 50): conv1 1x1 bn1 relu1 conv2 3x3 bn2 relu2
                                  conv3 1x1 (4 x planes) bn3              + shortcut, relu
        shortcut: identity, or downsample/conv 1x1 (stride) + downsample/bn where the shape changes
    head: GlobalAvgPool, flatten, fc = logits

Blocks per layer: 18: [2, 2, 2, 2]; 34: [3, 4, 6, 3]; bottleneck depths follow
depth = 3 x (blocks) + 2 with [3, 4, n, 3], n = (depth - 2) / 3 - 10 (50: n = 6, 101: n = 23,
1001: n = 323), except 152, which keeps the published [3, 8, 36, 3] (same depth, 50 blocks).
Every convolution is followed by BatchNorm in training mode; convolutions have no bias.

Example:
    >>> g = resnet(batch=2, depth=18, image=32)
    >>> g.tensor("layer4/block2/relu").shape
    (2, 512, 1, 1)
"""

from __future__ import annotations

from planner.graph import Graph, GraphBuilder
from planner.zoo.common import ZooError, graph_name, require_positive, scaled
from planner.zoo.layers import batch_norm, conv2d, head, max_pool, relu

BASIC = {18: (2, 2, 2, 2), 34: (3, 4, 6, 3)}
PUBLISHED = {152: (3, 8, 36, 3)}
PLANES = (64, 128, 256, 512)


def blocks_per_layer(depth: int) -> tuple[int, int, int, int]:
    """Blocks in layer1..4 for a depth; ZooError for depths no configuration gives."""
    if depth in BASIC:
        return BASIC[depth]
    if depth in PUBLISHED:
        return PUBLISHED[depth]
    if depth >= 50 and (depth - 2) % 3 == 0:
        return (3, 4, (depth - 2) // 3 - 10, 3)
    raise ZooError(f"model 'resnet': parameter 'depth' must be 18, 34, or 3 x (10 + n) + 2 "
                   f">= 50 (50, 101, 152, ..., 1001), got {depth}")


def resnet(*, batch: int = 32, image: int = 224, width: float = 1.0, depth: int = 50,
           classes: int = 1000, loss: bool = True) -> Graph:
    """ResNet-`depth` on (batch, 3, image, image) inputs."""
    name = graph_name(resnet, locals())
    require_positive("resnet", batch=batch, image=image, width=width, classes=classes)
    layers = blocks_per_layer(depth)
    bottleneck = depth not in BASIC
    b = GraphBuilder(name)
    x = b.input("images", (batch, 3, image, image))
    with b.scope("stem"):
        x = relu(b, batch_norm(b, conv2d(b, x, scaled(64, width), 7, stride=2, name="conv1"),
                               name="bn1"))
        x = max_pool(b, x, 3, 2, 1)
    for i, (count, planes) in enumerate(zip(layers, PLANES, strict=True), start=1):
        for j in range(1, count + 1):
            stride = 2 if i > 1 and j == 1 else 1
            with b.scope(f"layer{i}/block{j}"):
                block = bottleneck_block if bottleneck else basic_block
                x = block(b, x, scaled(planes, width), stride)
    x = b.op("GlobalAvgPool", [x], name="avgpool")
    return b.build(head(b, x, classes, loss))


def conv_bn(b: GraphBuilder, x: str, out_channels: int, kernel: int, stride: int,
            k: int) -> str:
    """conv<k> then bn<k>."""
    return batch_norm(b, conv2d(b, x, out_channels, kernel, stride=stride, name=f"conv{k}"),
                      name=f"bn{k}")


def basic_block(b: GraphBuilder, x: str, planes: int, stride: int) -> str:
    y = relu(b, conv_bn(b, x, planes, 3, stride, 1), name="relu1")
    y = conv_bn(b, y, planes, 3, 1, 2)
    return relu(b, b.op("Add", [y, shortcut(b, x, planes, stride)], name="add"))


def bottleneck_block(b: GraphBuilder, x: str, planes: int, stride: int) -> str:
    y = relu(b, conv_bn(b, x, planes, 1, 1, 1), name="relu1")
    y = relu(b, conv_bn(b, y, planes, 3, stride, 2), name="relu2")
    y = conv_bn(b, y, 4 * planes, 1, 1, 3)
    return relu(b, b.op("Add", [y, shortcut(b, x, 4 * planes, stride)], name="add"))


def shortcut(b: GraphBuilder, x: str, out_channels: int, stride: int) -> str:
    """Identity, or a strided 1x1 projection + BatchNorm when the shape changes."""
    if stride == 1 and b.type(x).shape[1] == out_channels:
        return x
    with b.scope("downsample"):
        return batch_norm(b, conv2d(b, x, out_channels, 1, stride=stride, name="conv"),
                          name="bn")
