"""Layer helpers over GraphBuilder: one function per layer, each adding its params and nodes.

Naming: a layer called `name` inside scope `layer3/block2` puts its main node at
`layer3/block2/name` (its output tensor has the same name), its params at `.../name/weight` and
`.../name/bias`, and follow-up nodes at `.../name/<op>`. Weights: convolution OIHW, transposed
convolution IOHW, linear [in, out] (MatMul's b), so `init` fans are computed right.

Example:
    >>> from planner.graph import GraphBuilder
    >>> b = GraphBuilder("toy")
    >>> x = b.input("images", (2, 3, 8, 8))
    >>> with b.scope("stem"):
    ...     y = relu(b, batch_norm(b, conv2d(b, x, 4, 3, name="conv1"), name="bn1"))
    >>> y, b.type(y).shape
    ('stem/relu', (2, 4, 8, 8))
"""

from __future__ import annotations

from collections.abc import Sequence

from planner.graph import GraphBuilder

Pair = int | Sequence[int]


def pair(v: Pair) -> list[int]:
    """An int or [h, w] as [h, w]."""
    return [v, v] if isinstance(v, int) else [int(v[0]), int(v[1])]


def pads4(pad: Pair | None, kernel: Sequence[int]) -> list[int]:
    """[top, left, bottom, right]; None means k // 2 on each side (size-keeping for odd k)."""
    if pad is None:
        return [kernel[0] // 2, kernel[1] // 2, kernel[0] // 2, kernel[1] // 2]
    if isinstance(pad, int):
        return [pad] * 4
    if len(pad) == 2:
        return [pad[0], pad[1], pad[0], pad[1]]
    return list(pad)


def channels(b: GraphBuilder, x: str) -> int:
    return b.type(x).shape[1]


def conv2d(b: GraphBuilder, x: str, out_channels: int, kernel: Pair, *, stride: Pair = 1,
           pad: Pair | None = None, name: str = "conv", bias: bool = False,
           init: str = "he") -> str:
    """Conv2D (+ BiasAdd when `bias`). Default padding keeps the size for odd kernels."""
    k = pair(kernel)
    w = b.param(f"{name}/weight", (out_channels, channels(b, x), *k), init=init)
    y = b.op("Conv2D", [x, w], {"strides": pair(stride), "pads": pads4(pad, k)}, name=name)
    return bias_add(b, y, name) if bias else y


def conv_transpose2d(b: GraphBuilder, x: str, out_channels: int, kernel: Pair, *,
                     stride: Pair = 1, pad: Pair = 0, name: str = "deconv",
                     init: str = "he") -> str:
    """ConvTranspose2D without bias; weight IOHW."""
    k = pair(kernel)
    w = b.param(f"{name}/weight", (channels(b, x), out_channels, *k), init=init)
    return b.op("ConvTranspose2D", [x, w], {"strides": pair(stride), "pads": pads4(pad, k)},
                name=name)


def bias_add(b: GraphBuilder, x: str, name: str, output: str | None = None) -> str:
    """BiasAdd over axis 1 with a zero-initialised bias `name/bias`."""
    bias = b.param(f"{name}/bias", (b.type(x).shape[1],), init="zeros")
    return b.op("BiasAdd", [x, bias], {"axis": 1}, name=f"{name}/bias_add",
                outputs=None if output is None else [output])


def linear(b: GraphBuilder, x: str, out_features: int, *, name: str = "fc", bias: bool = True,
           init: str = "he", output: str | None = None) -> str:
    """x (N, in) @ weight (in, out) (+ bias). `output` names the final tensor."""
    w = b.param(f"{name}/weight", (b.type(x).shape[1], out_features), init=init)
    y = b.op("MatMul", [x, w], name=name,
             outputs=None if output is None or bias else [output])
    return bias_add(b, y, name, output) if bias else y


def batch_norm(b: GraphBuilder, x: str, *, name: str = "bn", epsilon: float = 1e-5,
               momentum: float = 0.1) -> str:
    """BatchNorm in training mode; returns y. Outputs 1-2 (the new running statistics) stay
    plain activations here: planner.frontend.autodiff marks them as in-place updates of the
    running_mean / running_var state when it builds the training graph. Outputs 3-4 are the
    saved batch statistics the gradient reads."""
    c = (b.type(x).shape[1],)
    scale = b.param(f"{name}/scale", c, init="ones")
    shift = b.param(f"{name}/bias", c, init="zeros")
    mean = b.param(f"{name}/running_mean", c, init="zeros", role="state")
    var = b.param(f"{name}/running_var", c, init="ones", role="state")
    outs = b.op_n("BatchNorm", [x, scale, shift, mean, var],
                  {"epsilon": epsilon, "momentum": momentum, "training": True}, name=name)
    return outs[0]


def relu(b: GraphBuilder, x: str, name: str = "relu") -> str:
    return b.op("Relu", [x], name=name)


def max_pool(b: GraphBuilder, x: str, kernel: Pair, stride: Pair, pad: Pair = 0, *,
             name: str = "maxpool") -> str:
    k = pair(kernel)
    return b.op("MaxPool", [x], {"kernel": k, "strides": pair(stride), "pads": pads4(pad, k)},
                name=name)


def avg_pool(b: GraphBuilder, x: str, kernel: Pair, stride: Pair, pad: Pair = 0, *,
             count_include_pad: bool = False, name: str = "avgpool") -> str:
    k = pair(kernel)
    return b.op("AvgPool", [x], {"kernel": k, "strides": pair(stride), "pads": pads4(pad, k),
                                 "count_include_pad": count_include_pad}, name=name)


def dropout(b: GraphBuilder, x: str, rate: float, seed: int, name: str = "dropout") -> str:
    """Dropout with a fixed per-node seed (the mask is a pure function of seed and index)."""
    return b.op("Dropout", [x], {"rate": rate, "seed": seed}, name=name)


def classify(b: GraphBuilder, logits: str, loss: bool) -> list[str]:
    """Graph outputs of a classifier: [logits, loss] with SoftmaxCrossEntropy against int64
    labels (N,), or [logits]."""
    if not loss:
        return [logits]
    labels = b.label("labels", (b.type(logits).shape[0],))
    return [logits, b.op("SoftmaxCrossEntropy", [logits, labels], name="loss")]


def head(b: GraphBuilder, x: str, classes: int, loss: bool, *, name: str = "fc") -> list[str]:
    """Flatten (N, C, ...) to (N, features), a linear layer to `logits`, and the loss."""
    if len(b.type(x).shape) > 2:
        x = b.op("Flatten", [x], {"axis": 1}, name="flatten")
    logits = linear(b, x, classes, name=name, init="glorot", output="logits")
    return classify(b, logits, loss)
