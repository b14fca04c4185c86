"""Rules for the ops transformers add: LayerNormalization, RMSNormalization, Gelu, Erf, Where.

LayerNormalization (opset 17) is the planner's LayerNorm over axes axis..end; its optional
outputs are the mean (the planner's too) and InvStdDev, computed from the variance the
planner saves when some node reads it. Older exports spell the
same computation out (ReduceMean, Sub, Pow, Sqrt, Div, ...), which imports op by op.

RMSNormalization (opset 23, nn.RMSNorm) is its own definition spelled out in planner ops,
y = x / sqrt(mean(x^2 over axis..end) + epsilon) * scale (Mul, ReduceMean, Add, Sqrt, Div,
Mul), each with its kernels and gradient.

Gelu (opset 20) keeps its `approximate` ("none" or "tanh"); exporters before opset 20 write
x * 0.5 * (1 + Erf(x / sqrt(2))), which imports as Erf and element-wise ops.
"""

from __future__ import annotations

import numpy as np

from planner.importers.kit import Const, Unsupported
from planner.importers.onnx.context import NodeCtx, rule
from planner.importers.onnx.errors import OnnxImportError


@rule("LayerNormalization")
def layer_normalization(n: NodeCtx) -> None:
    rank = len(n.shape(0))
    axis = int(n.attr("axis", -1))
    if not -rank <= axis < rank:
        raise OnnxImportError(f"node {n.label!r} (LayerNormalization): axis {axis} out of range "
                              f"for rank {rank}")
    if n.attr("stash_type", 1) != 1:
        raise Unsupported("LayerNormalization (stash_type other than float)")
    inputs = [n.value(0), n.value(1)] + ([n.value(2)] if n.has_input(2) else [])
    attrs = {"axis": axis % rank, "epsilon": float(n.attr("epsilon", 1e-5))}
    _, _, var = n.emit("LayerNorm", inputs, attrs, outputs=[0, 1, None])
    if n.output(2) is not None and n.output(2) in n.imp.used:
        # InvStdDev = 1 / sqrt(var + epsilon), from the variance the planner saves.
        dtype = n.type_of(var).dtype
        eps = Const.of(n.imp.fresh(f"{n.label}/epsilon"),
                       np.asarray(attrs["epsilon"], dtype=dtype), origin="constant")
        one = Const.of(n.imp.fresh(f"{n.label}/one"), np.asarray(1, dtype=dtype),
                       origin="constant")
        std = n.emit1("Sqrt", [n.emit1("Add", [var, eps])])
        n.emit1("Div", [one, std], output=2)


@rule("RMSNormalization")
def rms_normalization(n: NodeCtx) -> None:
    x = n.value(0)
    rank = len(n.shape(0))
    axis = int(n.attr("axis", -1))
    if not -rank <= axis < rank:
        raise OnnxImportError(f"node {n.label!r} (RMSNormalization): axis {axis} out of range "
                              f"for rank {rank}")
    if n.attr("stash_type", 1) != 1:
        raise Unsupported("RMSNormalization (stash_type other than float)")
    dtype = n.type(0).dtype
    if not dtype.startswith(("float", "bfloat")):
        raise Unsupported(f"RMSNormalization (of {dtype} tensors)")
    eps = Const.of(n.imp.fresh(f"{n.label}/epsilon"),
                   np.asarray(float(n.attr("epsilon", 1e-5)), dtype=dtype), origin="constant")
    square = n.emit1("Mul", [x, x])
    mean = n.emit1("ReduceMean", [square], {"axes": list(range(axis % rank, rank)),
                                            "keepdims": True})
    rms = n.emit1("Sqrt", [n.emit1("Add", [mean, eps])])
    n.emit1("Mul", [n.emit1("Div", [x, rms]), n.value(1)], output=0)


@rule("Gelu")
def gelu(n: NodeCtx) -> None:
    approximate = n.attr("approximate", "none")
    if approximate not in ("none", "tanh"):
        raise OnnxImportError(f"node {n.label!r} (Gelu): approximate is {approximate!r}, not "
                              f"'none' or 'tanh'")
    n.emit1("Gelu", [n.value(0)], {"approximate": approximate}, output=0)


@rule("Erf")
def erf(n: NodeCtx) -> None:
    n.emit1("Erf", [n.value(0)], output=0)


@rule("Where")
def where(n: NodeCtx) -> None:
    n.emit1("Where", [n.value(0), n.value(1), n.value(2)], output=0)
