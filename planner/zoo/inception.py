"""Inception-v3 (Szegedy et al. 2015) as torchvision builds it, without the auxiliary classifier.

    stem  (image >= 75): conv 3x3/2 (32), 3x3 (32), 3x3 pad 1 (64), maxpool 3x3/2,
                         1x1 (80), 3x3 (192), maxpool 3x3/2             299 -> 35x35x192
          (7 <= image < 75): the same convolutions, all size-keeping, and no pooling, so the
                         two grid reductions below still fit (the standard stem needs 75)
    mixed5b, 5c, 5d  InceptionA (pool features 32, 64, 64)              35x35x288
    mixed6a          InceptionB, grid reduction                         17x17x768
    mixed6b..6e      InceptionC (7x7 factorised as 1x7 / 7x1; 128, 160, 160, 192 channels)
    mixed7a          InceptionD, grid reduction                          8x8x1280
    mixed7b, 7c      InceptionE (expanded 1x3 / 3x1 branches)            8x8x2048
    head             GlobalAvgPool, dropout 0.5, flatten, fc = logits

Every convolution is a "basic conv": Conv2D without bias, BatchNorm (epsilon 1e-3, training
mode), Relu. The branches of a module fan out from its input and are joined by one Concat over
channels. Pooling branches use 3x3 average pooling with pad 1 counting the padding, as
torchvision does. `width` scales every channel count.

Example:
    >>> g = inception_v3(batch=1)
    >>> g.tensor("mixed7c/concat").shape
    (1, 2048, 8, 8)
"""

from __future__ import annotations

from collections.abc import Sequence

from planner.graph import Graph, GraphBuilder
from planner.zoo.common import graph_name, require, require_positive, scaled
from planner.zoo.layers import Pair, avg_pool, batch_norm, conv2d, dropout, head, max_pool, relu

STANDARD_STEM = 75
MIN_IMAGE = 7


def inception_v3(*, batch: int = 32, image: int = 299, width: float = 1.0, classes: int = 1000,
                 loss: bool = True) -> Graph:
    """Inception-v3 on (batch, 3, image, image) inputs."""
    name = graph_name(inception_v3, locals())
    require_positive("inception_v3", batch=batch, width=width, classes=classes)
    require(image >= MIN_IMAGE, "inception_v3", "image", f"must be >= {MIN_IMAGE}, got {image}")
    b = GraphBuilder(name)
    n = Widths(width)
    x = b.input("images", (batch, 3, image, image))
    with b.scope("stem"):
        x = stem(b, x, n, standard=image >= STANDARD_STEM)
    for block, pool_features in (("mixed5b", 32), ("mixed5c", 64), ("mixed5d", 64)):
        with b.scope(block):
            x = inception_a(b, x, n, pool_features)
    with b.scope("mixed6a"):
        x = inception_b(b, x, n)
    for block, c7 in (("mixed6b", 128), ("mixed6c", 160), ("mixed6d", 160), ("mixed6e", 192)):
        with b.scope(block):
            x = inception_c(b, x, n, c7)
    with b.scope("mixed7a"):
        x = inception_d(b, x, n)
    for block in ("mixed7b", "mixed7c"):
        with b.scope(block):
            x = inception_e(b, x, n)
    x = b.op("GlobalAvgPool", [x], name="avgpool")
    x = dropout(b, x, 0.5, seed=1)
    return b.build(head(b, x, classes, loss))


class Widths:
    """Channel counts under the width multiplier: `n(64)`."""

    def __init__(self, width: float) -> None:
        self.width = width

    def __call__(self, channels: int) -> int:
        return scaled(channels, self.width)


def basic(b: GraphBuilder, x: str, out_channels: int, kernel: Pair, *, stride: Pair = 1,
          pad: Pair = 0, name: str) -> str:
    """Conv2D (no bias) -> BatchNorm (eps 1e-3) -> Relu, as nodes name, name/bn, name/relu."""
    y = conv2d(b, x, out_channels, kernel, stride=stride, pad=pad, name=name)
    return relu(b, batch_norm(b, y, name=f"{name}/bn", epsilon=1e-3), name=f"{name}/relu")


def chain(b: GraphBuilder, x: str, convs: Sequence[tuple[str, int, Pair, Pair]]) -> str:
    """A branch: basic convs (name, channels, kernel, pad) one after another."""
    for name, c, k, pad in convs:
        x = basic(b, x, c, k, pad=pad, name=name)
    return x


def concat(b: GraphBuilder, branches: Sequence[str]) -> str:
    return b.op("Concat", list(branches), {"axis": 1}, name="concat")


def stem(b: GraphBuilder, x: str, n: Widths, standard: bool) -> str:
    s, p = (2, 0) if standard else (1, 1)
    x = basic(b, x, n(32), 3, stride=s, pad=p, name="conv1a")
    x = basic(b, x, n(32), 3, pad=p, name="conv2a")
    x = basic(b, x, n(64), 3, pad=1, name="conv2b")
    if standard:
        x = max_pool(b, x, 3, 2, name="pool1")
    x = basic(b, x, n(80), 1, name="conv3b")
    x = basic(b, x, n(192), 3, pad=p, name="conv4a")
    if standard:
        x = max_pool(b, x, 3, 2, name="pool2")
    return x


def pool_branch(b: GraphBuilder, x: str, out_channels: int) -> str:
    y = avg_pool(b, x, 3, 1, 1, count_include_pad=True, name="branch_pool/avgpool")
    return basic(b, y, out_channels, 1, name="branch_pool/conv")


def inception_a(b: GraphBuilder, x: str, n: Widths, pool_features: int) -> str:
    return concat(b, [
        basic(b, x, n(64), 1, name="branch1x1"),
        chain(b, x, [("branch5x5_1", n(48), 1, 0), ("branch5x5_2", n(64), 5, 2)]),
        chain(b, x, [("branch3x3dbl_1", n(64), 1, 0), ("branch3x3dbl_2", n(96), 3, 1),
                     ("branch3x3dbl_3", n(96), 3, 1)]),
        pool_branch(b, x, n(pool_features)),
    ])


def inception_b(b: GraphBuilder, x: str, n: Widths) -> str:
    dbl = chain(b, x, [("branch3x3dbl_1", n(64), 1, 0), ("branch3x3dbl_2", n(96), 3, 1)])
    return concat(b, [
        basic(b, x, n(384), 3, stride=2, name="branch3x3"),
        basic(b, dbl, n(96), 3, stride=2, name="branch3x3dbl_3"),
        max_pool(b, x, 3, 2, name="branch_pool"),
    ])


def inception_c(b: GraphBuilder, x: str, n: Widths, c7: int) -> str:
    k17, k71, p17, p71 = (1, 7), (7, 1), (0, 3), (3, 0)
    return concat(b, [
        basic(b, x, n(192), 1, name="branch1x1"),
        chain(b, x, [("branch7x7_1", n(c7), 1, 0), ("branch7x7_2", n(c7), k17, p17),
                     ("branch7x7_3", n(192), k71, p71)]),
        chain(b, x, [("branch7x7dbl_1", n(c7), 1, 0), ("branch7x7dbl_2", n(c7), k71, p71),
                     ("branch7x7dbl_3", n(c7), k17, p17), ("branch7x7dbl_4", n(c7), k71, p71),
                     ("branch7x7dbl_5", n(192), k17, p17)]),
        pool_branch(b, x, n(192)),
    ])


def inception_d(b: GraphBuilder, x: str, n: Widths) -> str:
    b3 = basic(b, x, n(192), 1, name="branch3x3_1")
    b7 = chain(b, x, [("branch7x7x3_1", n(192), 1, 0), ("branch7x7x3_2", n(192), (1, 7), (0, 3)),
                      ("branch7x7x3_3", n(192), (7, 1), (3, 0))])
    return concat(b, [
        basic(b, b3, n(320), 3, stride=2, name="branch3x3_2"),
        basic(b, b7, n(192), 3, stride=2, name="branch7x7x3_4"),
        max_pool(b, x, 3, 2, name="branch_pool"),
    ])


def inception_e(b: GraphBuilder, x: str, n: Widths) -> str:
    def split(y: str, prefix: str) -> list[str]:
        """The expanded pair: 1x3 and 3x1 convolutions of the same input."""
        return [basic(b, y, n(384), (1, 3), pad=(0, 1), name=f"{prefix}a"),
                basic(b, y, n(384), (3, 1), pad=(1, 0), name=f"{prefix}b")]

    b3 = basic(b, x, n(384), 1, name="branch3x3_1")
    dbl = chain(b, x, [("branch3x3dbl_1", n(448), 1, 0), ("branch3x3dbl_2", n(384), 3, 1)])
    return concat(b, [
        basic(b, x, n(320), 1, name="branch1x1"),
        *split(b3, "branch3x3_2"),
        *split(dbl, "branch3x3dbl_3"),
        pool_branch(b, x, n(192)),
    ])
