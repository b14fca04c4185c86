"""Normalisation: BatchNorm and LRN with their backward ops. The channel axis is 1.

BatchNorm (training=True, as PyTorch) normalises with the batch statistics over every axis but
the channel axis (m = elements per channel), biased variance for y, unbiased for the running
update:

    saved_mean = mean(x);  var = mean((x - saved_mean)^2);  saved_invstd = 1 / sqrt(var + eps)
    y = (x - saved_mean) * saved_invstd * scale + bias
    running_mean_new = (1 - momentum) * running_mean + momentum * saved_mean
    running_var_new  = (1 - momentum) * running_var  + momentum * var * m / (m - 1)

training=False uses the running statistics and has the single output y.

A bfloat16 / float16 x (mixed precision, planner/frontend/passes/precision.py) gives y (and
BatchNormGrad's dx) in x's type while scale, bias and every statistic stay float32 (`stat_dtype`):
the statistics are computed in float32 from the widened x, as cuDNN, oneDNN and torch.autocast do.

BatchNormGrad takes one attr beyond the catalogue, `training` (default True, the catalogue's
op). Like TensorFlow's FusedBatchNormGrad `is_training`, training=False is the gradient of the
inference form: its last two inputs are then running_mean and running_var, and `epsilon` gives
the invstd. That is how frozen-statistics BatchNorm gets a gradient without more ops.

Both take the layer's Relu folded in (`activation`: "relu", float32 only; planner/ops/
fused_activation.py; made by planner/step/fold_norm_relu.py on CPU steps): BatchNorm writes
y = relu(normalised x) (NaN kept, Relu's rule), and BatchNormGrad takes a sixth input, the
BatchNorm's bias, normalises x again as the forward did (saved mean and invstd, scale, bias)
and reads 0 where that Relu's output is <= 0, dy elsewhere (ReluGrad's rule: a NaN passes dy)
in place of dy: one image less to read than the Relu's output would be. A LeakyRelu folds the
same way (`activation`: "leaky_relu" with its slope `alpha`): LeakyRelu's rule as y is written, and
LeakyReluGrad's (dy where the normalised x is positive, dy * alpha elsewhere) in the gradient.

BatchNorm also takes a residual block's sum folded in (planner/step/fold_norm_sum.py, CPU
steps): a sixth input, the shortcut, of x's shape and type, added to the normalised x before the
activation: y = act(normalised x + residual), the Add's bits (float addition commutes). No
gradient rule reads it: the fold is made after autodiff (the Add's gradient is the identity to
both of its inputs).

LRN follows ONNX: for channel c the window is [c - (size-1)//2, c + size//2], clipped to the
channels, and y = x / (bias + alpha/size * sum_window x^2)^beta. torch.nn.LocalResponseNorm
agrees for odd sizes (the usual ones); for even sizes it puts the extra channel before c.

Example:
    >>> import numpy as np
    >>> x = np.array([[1.0, 3.0], [3.0, 5.0]])   # N=2, C=2
    >>> y, *_ = batchnorm_reference([x, np.ones(2), np.zeros(2), np.zeros(2), np.ones(2)],
    ...     {"epsilon": 0.0, "momentum": 0.1, "training": True})
    >>> y
    array([[-1., -1.],
           [ 1.,  1.]])
"""

from __future__ import annotations

import numpy as np

from planner.dtypes import LOW_FLOATS
from planner.ops.base import (
    Attr,
    Attrs,
    GradBuilder,
    OpDef,
    OpError,
    TensorType,
    get_op,
    register,
    reorder_scratch,
    require_float,
)
from planner.ops.fused_activation import (
    ACTIVATION_ATTR,
    ACTIVATIONS,
    SLOPE_ATTR,
    activation,
    activation_flops,
    activation_grad,
    apply_activation,
    apply_activation_grad,
    check_activation,
)

# ---- BatchNorm -------------------------------------------------------------------------------

BN_INPUTS = ("scale", "bias", "running_mean", "running_var")


def _channels(op: str, x: TensorType) -> int:
    if x.rank < 2:
        raise OpError(f"{op}: input x must have rank >= 2 (N,C,...), got shape {list(x.shape)}")
    require_float(op, x, "input x")
    return x.shape[1]


def _check_per_channel(op: str, x: TensorType, named: dict[str, TensorType]) -> None:
    c = x.shape[1]
    for what, t in named.items():
        if t.shape != (c,):
            raise OpError(f"{op}: {what} must have shape [{c}] (the channels of x "
                          f"{list(x.shape)}), got {list(t.shape)}")
        if t.dtype != stat_dtype(x.dtype):
            raise OpError(f"{op}: {what} is {t.dtype} but x is {x.dtype} (its statistics and "
                          f"parameters are {stat_dtype(x.dtype)})")


def stat_dtype(x_dtype: str) -> str:
    """The dtype of a normalisation's parameters and statistics for input dtype `x_dtype`:
    float32 for a low-precision x (bfloat16 or float16 activations are normalised with float32
    statistics, as cuDNN's and oneDNN's batch norms and torch.autocast do), else x's own."""
    return "float32" if x_dtype in LOW_FLOATS else x_dtype


def _per_channel(x: TensorType) -> int:
    """m: how many elements each channel's statistics are taken over."""
    return x.size // x.shape[1] if x.shape[1] else 0


def _batchnorm_infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    if len(ins) not in (5, 6):
        raise OpError(f"BatchNorm takes 5 inputs (6 with a folded residual), got {len(ins)}")
    x = ins[0]
    c = _channels("BatchNorm", x)
    _check_per_channel("BatchNorm", x, dict(zip(BN_INPUTS, ins[1:5], strict=True)))
    check_activation("BatchNorm", a, x, ACTIVATIONS)
    if len(ins) == 6 and (ins[5].shape != x.shape or ins[5].dtype != x.dtype):
        raise OpError(f"BatchNorm: the residual is {ins[5].dtype}{list(ins[5].shape)} but x is "
                      f"{x.dtype}{list(x.shape)}")
    if not a["training"]:
        return [x]
    if _per_channel(x) < 2:
        raise OpError(f"BatchNorm: training needs more than one value per channel, x has shape "
                      f"{list(x.shape)}")
    stat = TensorType((c,), stat_dtype(x.dtype))
    return [x, stat, stat, stat, stat]


def _stat_axes(x: np.ndarray) -> tuple[int, ...]:
    return (0, *range(2, x.ndim))


def _bcast(v: np.ndarray, x: np.ndarray) -> np.ndarray:
    """A per-channel vector shaped to broadcast against x."""
    return v.reshape(1, -1, *([1] * (x.ndim - 2)))


def _normalised(x: np.ndarray, mean: np.ndarray, invstd: np.ndarray, scale: np.ndarray,
                bias: np.ndarray) -> np.ndarray:
    """Training BatchNorm's y before its activation, from its batch statistics (BatchNormGrad's
    folded Relu evaluates it again)."""
    return (x - _bcast(mean, x)) * _bcast(invstd * scale, x) + _bcast(bias, x)


def batchnorm_reference(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    x, scale, bias, running_mean, running_var = xs[:5]
    residual = xs[5] if len(xs) == 6 else 0.0
    eps, momentum = a["epsilon"], a["momentum"]
    if not a["training"]:
        k = scale / np.sqrt(running_var + eps)
        return [apply_activation((x - _bcast(running_mean, x)) * _bcast(k, x) + _bcast(bias, x)
                                 + residual, a)]
    axes = _stat_axes(x)
    m = x.size // x.shape[1]
    mean = x.mean(axis=axes)
    xc = x - _bcast(mean, x)
    var = (xc * xc).mean(axis=axes)
    invstd = 1.0 / np.sqrt(var + eps)
    y = apply_activation(_normalised(x, mean, invstd, scale, bias) + residual, a)
    new_mean = (1 - momentum) * running_mean + momentum * mean
    new_var = (1 - momentum) * running_var + momentum * var * (m / (m - 1))
    return [y, new_mean, new_var, mean, invstd]


def batchnorm_gradient(g: GradBuilder, node, grad_outputs: list[str | None]
                       ) -> list[str | None]:
    dy, *stat_grads = grad_outputs
    for name, grad in zip(node.outputs[1:], stat_grads, strict=True):
        if grad is not None:
            # Running and saved statistics only feed state updates and BatchNormGrad.
            raise OpError(f"BatchNorm: no gradient rule for its statistics output {name!r}")
    if len(node.inputs) == 6:
        raise OpError(f"BatchNorm {node.name!r}: no gradient rule for a folded residual (the "
                      f"fold is a step pass after autodiff)")
    x, scale, bias, running_mean, running_var = node.inputs
    wanted = [g.needs(t) for t in (x, scale, bias)]
    if dy is None or not any(wanted):
        return [None] * 5
    attrs = get_op("BatchNorm").normalize_attrs(node.attrs)
    dy = activation_grad(g, "BatchNorm", node.name, attrs, dy, node.outputs[0])
    stats = list(node.outputs[3:5]) if attrs["training"] else [running_mean, running_var]
    grads = g.emit("BatchNormGrad", [dy, x, scale, *stats],
                   {"epsilon": attrs["epsilon"], "training": attrs["training"]})
    return [d if w else None for d, w in zip(grads, wanted, strict=True)] + [None, None]


register(OpDef(
    name="BatchNorm",
    scratch=reorder_scratch(1),
    cost_class="reduction", arity=None, min_inputs=5,
    attrs={"epsilon": Attr("float", 1e-5), "momentum": Attr("float", 0.1),
           "training": Attr("bool", True), **ACTIVATION_ATTR, **SLOPE_ATTR},
    infer=_batchnorm_infer,
    # Per element: training 6 (mean 1, centred square and sum 3, scale and shift 2);
    # inference 2 (x * k + b with k, b folded per channel); a folded residual's 1 and Relu's 1.
    flops=lambda ins, outs, a: (ins[0].size * ((6 if a["training"] else 2) + (len(ins) == 6))
                                + activation_flops(ins[0], a)),
    reference=batchnorm_reference,
    gradient=batchnorm_gradient,
    nondiff_inputs=(3, 4),
    running_statistics=((1, 3), (2, 4)),
    # A training BatchNorm's recompute normalises with the saved batch statistics (outputs 3
    # and 4), not the running ones (inputs 3 and 4) its first run updated in place, and adds
    # its folded residual (input 5) if it has one; the statistics it writes go to scratch
    # (planner/memory/stash.py).
    recompute_reads=(("in", 0), ("in", 1), ("in", 2), ("out", 3), ("out", 4), ("in", 5)),
    # Training's float32 loops also run on a blocked x, y and residual, held alike
    # (kernels/batch_norm.cpp; a BatchNorm without the residual has no input 5).
    channel_blocked=lambda a: ((("in", 0), ("in", 5), ("out", 0)),) if a["training"] else (),
    doc="[x, scale, bias, running_mean, running_var] (+ a residual of x's shape, a folded sum: "
        "y = act(normalised x + residual)) -> training: [y, running_mean_new, "
        "running_var_new, saved_mean, saved_invstd]; inference: [y]; activation none | relu "
        "| leaky_relu with alpha (a folded Relu or LeakyRelu).",
))


def _batchnorm_grad_infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    relu = activation(a) != "none"
    if len(ins) != 5 + relu:
        raise OpError(f"BatchNormGrad takes {5 + relu} inputs with activation "
                      f"{activation(a)!r}, got {len(ins)}")
    dy, x, scale, mean, last = ins[:5]
    _channels("BatchNormGrad", x)
    check_activation("BatchNormGrad", a, x, ACTIVATIONS)
    if dy.shape != x.shape or dy.dtype != x.dtype:
        raise OpError(f"BatchNormGrad: dy is {dy.dtype}{list(dy.shape)} but x is "
                      f"{x.dtype}{list(x.shape)}")
    if relu and not a["training"]:
        raise OpError("BatchNormGrad: a folded activation is for training (batch statistics) "
                      "only")
    stats = ("saved_mean", "saved_invstd") if a["training"] else BN_INPUTS[2:]
    _check_per_channel("BatchNormGrad", x, {"scale": scale, stats[0]: mean, stats[1]: last,
                                            **({"bias": ins[5]} if relu else {})})
    return [x, scale, scale]


def batchnorm_grad_reference(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    dy, x, scale, mean, last = xs[:5]
    invstd = last if a["training"] else 1.0 / np.sqrt(last + a["epsilon"])
    if activation(a) != "none":  # the forward's y before its activation again, from its bias
        dy = apply_activation_grad(dy, _normalised(x, mean, invstd, scale, xs[5]), a)
    axes = _stat_axes(x)
    xhat = (x - _bcast(mean, x)) * _bcast(invstd, x)
    dbias = dy.sum(axis=axes)
    dscale = (dy * xhat).sum(axis=axes)
    if not a["training"]:
        return [dy * _bcast(scale * invstd, x), dscale, dbias]
    m = x.size // x.shape[1]
    # The batch statistics depend on x: subtract the mean of dy and its projection on xhat.
    dx = _bcast(scale * invstd / m, x) * (m * dy - _bcast(dbias, x) - xhat * _bcast(dscale, x))
    return [dx, dscale, dbias]


register(OpDef(
    name="BatchNormGrad",
    scratch=reorder_scratch(1),
    cost_class="reduction", arity=None, min_inputs=5,
    attrs={"epsilon": Attr("float", 1e-5), "training": Attr("bool", True), **ACTIVATION_ATTR,
           **SLOPE_ATTR},
    infer=_batchnorm_grad_infer,
    # Per element: training 9 (dbias 1, xhat 2, dscale 2, dx 4); inference 6; a folded
    # ReluGrad's 1, LeakyReluGrad's 2.
    flops=lambda ins, outs, a: (ins[1].size * (9 if a["training"] else 6)
                                + activation_flops(ins[1], a)),
    reference=batchnorm_grad_reference,
    channel_blocked=lambda a: ((("in", 0), ("in", 1), ("out", 0)),) if a["training"] else (),
    doc="[dy, x, scale, saved_mean, saved_invstd] (+ the BatchNorm's bias with activation "
        "relu: 0 where the forward's Relu output is <= 0, else dy; leaky_relu with alpha: dy "
        "where the normalised x is positive, else dy * alpha) -> [dx, dscale, dbias]; with "
        "training=False the last two of "
        "the five are running_mean and running_var.",
))


# ---- LRN -------------------------------------------------------------------------------------

LRN_ATTRS: dict[str, Attr] = {
    "size": Attr("int", 5),
    "alpha": Attr("float", 1e-4),
    "beta": Attr("float", 0.75),
    "bias": Attr("float", 1.0),
}


def _lrn_infer(op: str, x: TensorType, others: dict[str, TensorType], a: Attrs
               ) -> list[TensorType]:
    _channels(op, x)
    if a["size"] < 1:
        raise OpError(f"{op}: attribute 'size' must be >= 1, got {a['size']}")
    for what, t in others.items():
        if t.shape != x.shape or t.dtype != x.dtype:
            raise OpError(f"{op}: {what} is {t.dtype}{list(t.shape)} but x is "
                          f"{x.dtype}{list(x.shape)}")
    return [x]


def _channel_window_sum(v: np.ndarray, before: int, after: int) -> np.ndarray:
    """out[:, c] = sum of v[:, c - before : c + after + 1], clipped to the channels."""
    c = v.shape[1]
    padded = np.pad(v, [(0, 0), (before, after)] + [(0, 0)] * (v.ndim - 2))
    out = padded[:, 0:c].copy()
    for k in range(1, before + after + 1):
        out += padded[:, k:k + c]
    return out


def _lrn_denominator(x: np.ndarray, a: Attrs) -> np.ndarray:
    """D = bias + alpha/size * (sum of x^2 over the channel window)."""
    size = a["size"]
    return a["bias"] + (a["alpha"] / size) * _channel_window_sum(x * x, (size - 1) // 2,
                                                                  size // 2)


def lrn_reference(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    (x,) = xs
    return [x * _lrn_denominator(x, a) ** -a["beta"]]


def lrn_grad_reference(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    """dx_j = dy_j D_j^-beta - 2 alpha beta / size * x_j * sum_{c: j in window(c)} dy_c y_c / D_c.
    """
    dy, x, y = xs
    size, beta = a["size"], a["beta"]
    d = _lrn_denominator(x, a)
    # j is in window(c) exactly when c is in [j - size//2, j + (size-1)//2]: the window mirrored.
    back = _channel_window_sum(dy * y / d, size // 2, (size - 1) // 2)
    return [dy * d ** -beta - (2 * a["alpha"] * beta / size) * x * back]


def lrn_gradient(g: GradBuilder, node, grad_outputs: list[str | None]) -> list[str | None]:
    (dy,) = grad_outputs
    (x,) = node.inputs
    if dy is None or not g.needs(x):
        return [None]
    (dx,) = g.emit("LRNGrad", [dy, x, node.outputs[0]],
                   get_op("LRN").normalize_attrs(node.attrs))
    return [dx]


register(OpDef(
    name="LRN",
    scratch=reorder_scratch(1),
    cost_class="reduction", arity=1, attrs=LRN_ATTRS,
    infer=lambda ins, a: _lrn_infer("LRN", ins[0], {}, a),
    # Per element: square 1, window sum `size`, scale and bias 2, power 1, multiply 1.
    flops=lambda ins, outs, a: ins[0].size * (a["size"] + 5),
    reference=lrn_reference,
    gradient=lrn_gradient,
    doc="Local response normalisation across channels (ONNX semantics).",
))

register(OpDef(
    name="LRNGrad",
    scratch=reorder_scratch(1),
    cost_class="reduction", arity=3, attrs=LRN_ATTRS,
    infer=lambda ins, a: _lrn_infer("LRNGrad", ins[1], {"dy": ins[0], "y": ins[2]}, a),
    # Per element: D again (size + 3), power 1, dy*y/D 2, mirrored window sum `size`, dx 4.
    flops=lambda ins, outs, a: ins[0].size * (2 * a["size"] + 10),
    reference=lrn_grad_reference,
    doc="[dy, x, y] -> dx of LRN.",
))
