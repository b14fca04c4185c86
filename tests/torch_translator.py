"""A translator from planner graphs to torch functional calls: every tensor of a forward graph
computed by PyTorch's own kernels from the same parameters and feeds (torch_forward), one op
at a time (TORCH_OPS), and PyTorch's optimizer of an Optimizer record. The tests hold the
reference interpreter against it (tests/graph/test_train_vs_torch.py); the benches time it as
the PyTorch baseline of a zoo graph (bench/torch_baseline.py).
"""

from __future__ import annotations

import numpy as np
import torch

from planner.graph.optimizer import Optimizer
from planner.ir.graph import Graph
from planner.ops import get_op
from planner.ops.dropout import dropout_mask, step_seed

F = torch.nn.functional


def _spatial_pad(x, pads, value=0.0):
    """Pad [top, left, bottom, right]: symmetric pads go to the op, others through F.pad."""
    top, left, bottom, right = pads
    if (top, left) == (bottom, right):
        return x, (top, left)
    return F.pad(x, (left, right, top, bottom), value=value), (0, 0)


def _conv2d(xs, a):
    x, padding = _spatial_pad(xs[0], a["pads"])
    return [F.conv2d(x, xs[1], stride=a["strides"], padding=padding, dilation=a["dilations"],
                     groups=a["groups"])]


def _conv_transpose2d(xs, a):
    top, left, bottom, right = a["pads"]
    assert (top, left) == (bottom, right), "asymmetric ConvTranspose2D pads are not translated"
    return [F.conv_transpose2d(xs[0], xs[1], stride=a["strides"], padding=(top, left),
                               output_padding=a["output_padding"], groups=a["groups"],
                               dilation=a["dilations"])]


def _max_pool(xs, a):
    x, padding = _spatial_pad(xs[0], a["pads"], value=-float("inf"))
    return [F.max_pool2d(x, a["kernel"], a["strides"], padding, a["dilations"],
                         ceil_mode=a["ceil_mode"])]


def _avg_pool(xs, a):
    top, left, bottom, right = a["pads"]
    assert (top, left) == (bottom, right), "asymmetric AvgPool pads are not translated"
    return [F.avg_pool2d(xs[0], a["kernel"], a["strides"], (top, left), ceil_mode=a["ceil_mode"],
                         count_include_pad=a["count_include_pad"])]


def _batch_norm(xs, a):
    x, scale, bias, mean, var = xs
    assert a["training"], "inference-mode BatchNorm is not translated"
    new_mean, new_var = mean.clone(), var.clone()  # F.batch_norm updates them in place
    y = F.batch_norm(x, new_mean, new_var, scale, bias, training=True, momentum=a["momentum"],
                     eps=a["epsilon"])
    axes = [k for k in range(x.dim()) if k != 1]
    batch_mean = x.mean(axes)
    invstd = 1 / torch.sqrt(x.var(axes, unbiased=False) + a["epsilon"])
    return [y, new_mean, new_var, batch_mean, invstd]


def _bias_add(xs, a):
    x, b = xs
    axis = a["axis"] % x.dim()
    return [x + b.reshape([-1] + [1] * (x.dim() - axis - 1))]


@torch.compiler.disable
def _keep_mask(seed: int, step, x, rate: float):
    # The planner's counter-based mask, made outside the compiled graph (it is numpy) and
    # moved to x's device. The step's seed too: traced, each node's seed constant specialised
    # a compiled frame of its own, past torch.compile's recompile limit on LSTM.
    seed = step_seed(seed, int(step) if step is not None else 0)
    keep = dropout_mask(seed, x.numel(), rate).reshape(tuple(x.shape))
    return torch.from_numpy(keep).to(device=x.device, dtype=x.dtype)


def _dropout(xs, a):
    x = xs[0]
    step = xs[1] if len(xs) > 1 else None
    return [x * _keep_mask(a["seed"], step, x, a["rate"]) / (1 - a["rate"])]


def _matmul(xs, a):
    x, w = xs
    x = x.transpose(-1, -2) if a["transpose_a"] else x
    w = w.transpose(-1, -2) if a["transpose_b"] else w
    return [torch.matmul(x, w)]


def torch_lstm_cell(xs, a):
    """LSTMCell through PyTorch's own fused cell (torch.lstm_cell, nn.LSTMCell's math): the
    pre-activations, gate blocks reordered to PyTorch's i, f, g, o, are its input under an
    identity input weight, with h = 0."""
    gates, c = xs[0], xs[1]
    z = gates + xs[2] if len(xs) > 2 else gates
    hidden = c.shape[1]
    perm = torch.cat([torch.arange(hidden) + a["order"].index(k) * hidden for k in "ifgo"])
    eye = torch.eye(4 * hidden, dtype=z.dtype, device=z.device)
    h, c = torch.lstm_cell(z[:, perm], (torch.zeros_like(c), c), eye,
                           torch.zeros(4 * hidden, hidden, dtype=z.dtype, device=z.device))
    acts = torch.cat([torch.tanh(b) if k == "g" else torch.sigmoid(b)
                      for k, b in zip(a["order"], torch.split(z, hidden, 1), strict=True)], 1)
    return [h, c, acts]


def _causal_mask(xs, a):
    x = xs[0]
    rows, cols = x.shape[-2:]
    keep = torch.ones(rows, cols, dtype=torch.bool, device=x.device).tril()
    value = -float("inf") if a["value"] is None else a["value"]
    return [x.masked_fill(~keep, value)]


def _layer_norm(xs, a):
    # y by PyTorch's kernel; the saved row statistics (keepdims) beside it, as the op's
    x, scale, *bias = xs
    axis = a["axis"] % x.dim()
    axes = tuple(range(axis, x.dim()))
    y = F.layer_norm(x, tuple(x.shape[axis:]), scale, bias[0] if bias else None, a["epsilon"])
    return [y, x.mean(axes, keepdim=True), x.var(axes, unbiased=False, keepdim=True)]


TORCH_OPS = {
    "MatMul": _matmul,
    "LayerNorm": _layer_norm,
    "Gelu": lambda xs, a: [F.gelu(xs[0], approximate=a["approximate"])],
    "Softmax": lambda xs, a: [torch.softmax(xs[0], a["axis"])],
    "Scale": lambda xs, a: [xs[0] * a["factor"]],
    "CausalMask": _causal_mask,
    "Transpose": lambda xs, a: [xs[0].permute(a["perm"])],
    "LSTMCell": torch_lstm_cell,
    "BiasAdd": _bias_add,
    "Conv2D": _conv2d,
    "ConvTranspose2D": _conv_transpose2d,
    "MaxPool": _max_pool,
    "AvgPool": _avg_pool,
    "GlobalAvgPool": lambda xs, a: [xs[0].mean((2, 3), keepdim=True)],
    "BatchNorm": _batch_norm,
    "Relu": lambda xs, a: [F.relu(xs[0])],
    "LeakyRelu": lambda xs, a: [F.leaky_relu(xs[0], a["alpha"])],
    "Sigmoid": lambda xs, a: [torch.sigmoid(xs[0])],
    "Tanh": lambda xs, a: [torch.tanh(xs[0])],
    "Add": lambda xs, a: [xs[0] + xs[1]],
    "Mul": lambda xs, a: [xs[0] * xs[1]],
    "Flatten": lambda xs, a: [xs[0].reshape(int(np.prod(xs[0].shape[:a["axis"]])), -1)],
    "Reshape": lambda xs, a: [xs[0].reshape(a["shape"])],
    "Concat": lambda xs, a: [torch.cat(xs, a["axis"])],
    "Split": lambda xs, a: list(torch.split(xs[0], a["sizes"], a["axis"])),
    "Embedding": lambda xs, a: [F.embedding(xs[1], xs[0])],
    "Dropout": _dropout,
    "SoftmaxCrossEntropy": lambda xs, a: [F.cross_entropy(xs[0], xs[1])],
    "MSE": lambda xs, a: [F.mse_loss(xs[0], xs[1])],
    "SigmoidBCE": lambda xs, a: [F.binary_cross_entropy_with_logits(xs[0], xs[1])],
}


def torch_forward(graph: Graph, values: dict, ops: dict | None = None) -> dict:
    """Every tensor of a forward graph, computed with torch from `values` (feeds, params and
    state as torch tensors); `ops` replaces TORCH_OPS (the benches time torch's own dropout)."""
    ops = TORCH_OPS if ops is None else ops
    env = dict(values)
    for n in graph.nodes:
        if n.op not in ops:
            raise NotImplementedError(f"the torch translator lacks op {n.op} (node {n.name!r})")
        attrs = get_op(n.op).normalize_attrs(n.attrs)
        outs = ops[n.op]([env[i] for i in n.inputs], attrs)
        env.update(zip(n.outputs, outs, strict=True))
    return env


def torch_optimizer(opt: Optimizer, params: list):
    if opt.kind == "sgd":
        return torch.optim.SGD(params, lr=opt.lr, weight_decay=opt.weight_decay)
    if opt.kind == "momentum":
        return torch.optim.SGD(params, lr=opt.lr, momentum=opt.momentum, nesterov=opt.nesterov,
                               weight_decay=opt.weight_decay)
    return torch.optim.Adam(params, lr=opt.lr, betas=(opt.beta1, opt.beta2), eps=opt.epsilon,
                            weight_decay=opt.weight_decay)


def rel_error(actual, expected) -> float:
    actual, expected = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
    scale = float(np.linalg.norm(expected))
    return float(np.linalg.norm(actual - expected)) / (scale if scale > 0 else 1.0)


def as_float64(graph: Graph) -> Graph:
    """The same graph computing in float64."""
    return Graph(name=graph.name, kind=graph.kind, nodes=graph.nodes, outputs=graph.outputs,
                 tensors=tuple(t.model_copy(update={"dtype": "float64"})
                               if t.dtype == "float32" else t for t in graph.tensors))
