"""The statistics outputs of native_layer_norm and native_group_norm (mean and rstd =
1 / sqrt(var + eps)), made only where a node reads them (rules_sort.ReadLater).

LayerNorm's are its own saved mean and variance, with no gradient (torch marks them
non-differentiable). GroupNorm's are differentiable in torch, so they are computed apart by
reductions over each (sample, group), whose gradients autodiff knows:

    mean = ReduceMean(x as (N, G, C / G * spatial));  var = ReduceMean((x - mean)^2)
"""

from __future__ import annotations

import math

from planner.importers.kit import Const
from planner.importers.torch.context import NodeCtx
from planner.importers.torch.rules_sort import ReadLater


def _shape_of(n: NodeCtx, k: int) -> list[int]:
    return list(n.node.out[k].shape)


def _rstd(n: NodeCtx, var: str, eps: float) -> str:
    shifted = n.emit1("Add", [var, n.const(eps, "float32")])
    return n.emit1("Reciprocal", [n.emit1("Sqrt", [shifted])])


def _reshaped(n: NodeCtx, v: str, k: int) -> str:
    want = _shape_of(n, k)
    return v if list(n.shape(v)) == want else n.emit1("Reshape", [v], {"shape": want})


def layer_norm_stats(n: NodeCtx, outs: list[str], eps: float) -> ReadLater:
    """(y, mean, rstd) from LayerNorm's [y, mean, var] outputs."""
    def mean() -> str:
        return _reshaped(n, n.emit1("StopGradient", [outs[1]]), 1)

    def rstd() -> str:
        return _reshaped(n, _rstd(n, n.emit1("StopGradient", [outs[2]]), eps), 2)

    return ReadLater((outs[0], None, None), {1: mean, 2: rstd})


def group_norm_stats(n: NodeCtx, y: str, x: str | Const, groups: int, eps: float) -> ReadLater:
    """(y, mean, rstd) of GroupNorm over x (N, C, ...) in `groups` groups."""
    shape = n.shape(x)
    per = math.prod(shape[1:]) // groups if groups else 0
    made: dict[str, str] = {}

    def stats() -> dict[str, str]:
        if not made:
            lines = n.emit1("Reshape", [x], {"shape": [shape[0], groups, per]})
            mean = n.emit1("ReduceMean", [lines], {"axes": [2], "keepdims": True})
            centred = n.emit1("Sub", [lines, mean])
            var = n.emit1("ReduceMean", [n.emit1("Mul", [centred, centred])],
                          {"axes": [2], "keepdims": True})
            made["mean"], made["rstd"] = mean, _rstd(n, var, eps)
        return made

    return ReadLater((y, None, None), {1: lambda: _reshaped(n, stats()["mean"], 1),
                                       2: lambda: _reshaped(n, stats()["rstd"], 2)})
