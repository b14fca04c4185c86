"""GroupNorm and GroupNormGrad: normalisation over groups of channels, as torch.nn.GroupNorm;
InstanceNormalization (nn.InstanceNorm2d) is its case groups == C. Always the training-mode
computation (statistics of the batch itself; neither layer keeps running statistics by
default).

GroupNorm [x (N, C, d1, ...), scale (C,), bias (C,)] attrs groups, epsilon (1e-5)
    -> [y, mean (N, groups), invstd (N, groups)]. The statistics of each (n, g) are taken over
    its C / groups channels and every spatial position (m elements), biased variance:

    mean = mean(x);  invstd = 1 / sqrt(mean((x - mean)^2) + eps)
    y = (x - mean) * invstd * scale[c] + bias[c]

GroupNormGrad [dy, x, scale, mean, invstd] (same attrs) -> [dx, dscale, dbias], with
xhat = (x - mean) * invstd and g = dy * scale[c], means over each (n, g)'s m elements:

    dbias[c] = sum over n and space of dy;   dscale[c] = sum over n and space of dy * xhat
    dx = invstd * (g - mean(g) - xhat * mean(g * xhat))

FLOPs per element: GroupNorm 8 (as LayerNorm), GroupNormGrad 11.

Example:
    >>> import numpy as np
    >>> from planner.ops import get_op
    >>> x = np.array([[[1.0], [3.0], [5.0], [9.0]]])   # N=1, C=4, L=1; two groups
    >>> y, mean, invstd = get_op("GroupNorm").reference(
    ...     [x, np.ones(4), np.zeros(4)], {"groups": 2, "epsilon": 0.0})
    >>> y[0, :, 0], mean, invstd
    (array([-1.,  1., -1.,  1.]), array([[2., 7.]]), array([[1. , 0.5]]))
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from planner.ops.base import (
    Attr,
    Attrs,
    GradBuilder,
    OpDef,
    OpError,
    TensorType,
    register,
    require_float,
)

if TYPE_CHECKING:
    from planner.ir.graph import Node

GN_ATTRS = {"groups": Attr("int", required=True), "epsilon": Attr("float", 1e-5)}


def _check(op: str, x: TensorType, scale: TensorType, a: Attrs) -> TensorType:
    """The statistics' type (N, groups); OpError when x, scale or groups do not fit."""
    require_float(op, x)
    if x.rank < 2:
        raise OpError(f"{op}: x must be (N, C, ...), got {list(x.shape)}")
    channels, groups = x.shape[1], a["groups"]
    if groups < 1 or channels % groups:
        raise OpError(f"{op}: groups {groups} must divide the {channels} channels")
    if a["epsilon"] < 0:
        raise OpError(f"{op}: epsilon must be >= 0, got {a['epsilon']}")
    if scale != TensorType((channels,), x.dtype):
        raise OpError(f"{op}: scale and bias must be {x.dtype} [{channels}], got "
                      f"{scale.dtype} {list(scale.shape)}")
    return TensorType((x.shape[0], groups), x.dtype)


def _infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    x, scale, bias = ins
    stats = _check("GroupNorm", x, scale, a)
    _check("GroupNorm", x, bias, a)
    return [x, stats, stats]


def _grouped(x: np.ndarray, groups: int) -> np.ndarray:
    return x.reshape(x.shape[0], groups, math.prod(x.shape[1:]) // groups)


def _per_channel(v: np.ndarray, x: np.ndarray) -> np.ndarray:
    return v.reshape((1, -1) + (1,) * (x.ndim - 2))


def _stats(x: np.ndarray, a: Attrs) -> tuple[np.ndarray, np.ndarray]:
    g = _grouped(x, a["groups"])
    mean = np.mean(g, axis=2)
    var = np.mean(np.square(g - mean[..., None]), axis=2)
    with np.errstate(divide="ignore"):
        invstd = (1 / np.sqrt(var + x.dtype.type(a["epsilon"]))).astype(x.dtype)
    return mean, invstd


def _xhat(x: np.ndarray, mean: np.ndarray, invstd: np.ndarray, groups: int) -> np.ndarray:
    g = _grouped(x, groups)
    return ((g - mean[..., None]) * invstd[..., None]).reshape(x.shape)


def _reference(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    x, scale, bias = xs
    mean, invstd = _stats(x, a)
    xhat = _xhat(x, mean, invstd, a["groups"])
    return [xhat * _per_channel(scale, x) + _per_channel(bias, x), mean, invstd]


def _grad_infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    dy, x, scale, mean, invstd = ins
    stats = _check("GroupNormGrad", x, scale, a)
    if dy != x:
        raise OpError(f"GroupNormGrad: dy {list(dy.shape)} must match x {list(x.shape)}")
    if mean != stats or invstd != stats:
        raise OpError(f"GroupNormGrad: mean and invstd must be {list(stats.shape)}")
    return [x, scale, scale]


def _grad_reference(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    dy, x, scale, mean, invstd = xs
    groups = a["groups"]
    xhat = _xhat(x, mean, invstd, groups)
    reduce_axes = (0, *range(2, x.ndim))
    dbias = np.sum(dy, axis=reduce_axes)
    dscale = np.sum(dy * xhat, axis=reduce_axes)
    g = _grouped(dy * _per_channel(scale, x), groups)
    xh = _grouped(xhat, groups)
    dx = invstd[..., None] * (g - g.mean(axis=2, keepdims=True)
                              - xh * (g * xh).mean(axis=2, keepdims=True))
    return [dx.reshape(x.shape).astype(x.dtype), dscale.astype(x.dtype), dbias.astype(x.dtype)]


def _gradient(g: GradBuilder, node: Node, grads: list[str | None]) -> list[str | None]:
    dy = grads[0]
    x, scale, bias = node.inputs
    if dy is None or not any(g.needs(t) for t in node.inputs):
        return [None, None, None]
    dx, dscale, dbias = g.emit("GroupNormGrad", [dy, x, scale, *node.outputs[1:]],
                               dict(node.attrs))
    return [dx if g.needs(x) else None, dscale if g.needs(scale) else None,
            dbias if g.needs(bias) else None]


register(OpDef(
    name="GroupNorm", arity=3, attrs=GN_ATTRS, cost_class="reduction",
    infer=_infer,
    flops=lambda ins, outs, a: 8 * ins[0].size,
    reference=_reference,
    gradient=_gradient,
    doc="[x, scale, bias] -> [y, mean, invstd]: normalise each group of channels over the "
        "group and space (InstanceNormalization: groups == C), then scale and shift.",
))

register(OpDef(
    name="GroupNormGrad", arity=5, attrs=GN_ATTRS, cost_class="reduction",
    infer=_grad_infer,
    flops=lambda ins, outs, a: 11 * ins[0].size,
    reference=_grad_reference,
    doc="Gradient of GroupNorm: [dy, x, scale, mean, invstd] -> [dx, dscale, dbias].",
))
