"""DCGAN (Radford et al. 2015): generator and discriminator in one graph, scoring real and
generated images together.

    z (batch, nz, 1, 1) -> generator:
        deconv1 4x4/1 (8 x ngf at 64x64) bn1 relu1 -> deconv2..k 4x4/2 pad 1 bn relu (channels
        halving, size doubling) -> deconv<k+1> 4x4/2 pad 1 (3 channels) -> tanh = images
    Concat(real images (batch, 3, image, image), generated images) over the batch axis
    -> discriminator:
        conv1 4x4/2 pad 1 (ndf) lrelu1 -> conv2..k 4x4/2 pad 1 bn lrelu (channels doubling)
        -> conv_out 4x4/1 (1 channel, 1x1) -> flatten = logits (2 x batch, 1)
    loss = SigmoidBCE(logits, labels (2 x batch, 1) float32)

What the graph represents: one step of GAN training, both phases in the same graph. The caller
picks the phase by the labels it feeds and the params its optimizer updates: discriminator step,
labels 1 for the real half and 0 for the generated half, update discriminator/*; generator step
(non-saturating loss), labels 1 for the generated half, update generator/* (the real half then
only adds gradient to discriminator params, which that step does not update). Real and
generated images share one discriminator pass, so its BatchNorm statistics cover both halves.

Weights are initialised N(0, 0.02) ("normal") as in the paper; LeakyRelu slope 0.2; `width`
scales ngf = ndf = 64. The image is 4 x 2^k for k >= 1 (8, 16, 32, 64, 128, ...).

Example:
    >>> g = dcgan(batch=2)
    >>> g.tensor("generator/images").shape, g.tensor("logits").shape
    ((2, 3, 64, 64), (4, 1))
"""

from __future__ import annotations

from planner.graph import Graph, GraphBuilder
from planner.zoo.common import graph_name, require, require_positive, scaled
from planner.zoo.layers import batch_norm, conv2d, conv_transpose2d, relu


def dcgan(*, batch: int = 64, image: int = 64, nz: int = 100, channels: int = 3,
          width: float = 1.0, loss: bool = True) -> Graph:
    """DCGAN generator + discriminator over (batch, channels, image, image) images."""
    name = graph_name(dcgan, locals())
    require_positive("dcgan", batch=batch, nz=nz, channels=channels, width=width)
    k = upsamplings(image)
    require(k >= 1, "dcgan", "image", f"must be 4 x 2^k with k >= 1 (8, 16, 32, 64, ...), "
            f"got {image}")
    ngf = ndf = scaled(64, width)
    b = GraphBuilder(name)
    z = b.input("z", (batch, nz, 1, 1))
    real = b.input("images", (batch, channels, image, image))
    with b.scope("generator"):
        x = z
        for i in range(1, k + 1):
            stride, pad = (1, 0) if i == 1 else (2, 1)
            x = conv_transpose2d(b, x, ngf * 2 ** (k - i), 4, stride=stride, pad=pad,
                                 name=f"deconv{i}", init="normal")
            x = relu(b, batch_norm(b, x, name=f"bn{i}"), name=f"relu{i}")
        x = conv_transpose2d(b, x, channels, 4, stride=2, pad=1, name=f"deconv{k + 1}",
                             init="normal")
        fake = b.op("Tanh", [x], name="images")
    x = b.op("Concat", [real, fake], {"axis": 0}, name="real_and_fake")
    with b.scope("discriminator"):
        for i in range(1, k + 1):
            x = conv2d(b, x, ndf * 2 ** (i - 1), 4, stride=2, pad=1, name=f"conv{i}",
                       init="normal")
            if i > 1:
                x = batch_norm(b, x, name=f"bn{i}")
            x = b.op("LeakyRelu", [x], {"alpha": 0.2}, name=f"lrelu{i}")
        x = conv2d(b, x, 1, 4, pad=0, name="conv_out", init="normal")
    logits = b.op("Flatten", [x], {"axis": 1}, name="flatten", outputs=["logits"])
    if not loss:
        return b.build([logits])
    labels = b.label("labels", (2 * batch, 1), dtype="float32")
    return b.build([logits, b.op("SigmoidBCE", [logits, labels], name="loss")])


def upsamplings(image: int) -> int:
    """k with image == 4 x 2^k, or 0 when the image has no such form."""
    k = 0
    while image > 4 and image % 2 == 0:
        image, k = image // 2, k + 1
    return k if image == 4 else 0
