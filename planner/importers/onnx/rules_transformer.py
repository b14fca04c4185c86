"""Rules for the ops transformers add: LayerNormalization, Gelu, Erf, Where.

LayerNormalization (opset 17) is the planner's LayerNorm over axes axis..end; its optional
outputs are the mean (the planner's too) and InvStdDev, which the planner does not keep (it
saves the variance): a model reading InvStdDev is reported unsupported. Older exports spell the
same computation out (ReduceMean, Sub, Pow, Sqrt, Div, ...), which imports op by op.

Gelu (opset 20) keeps its `approximate` ("none" or "tanh"); exporters before opset 20 write
x * 0.5 * (1 + Erf(x / sqrt(2))), which imports as Erf and element-wise ops.
"""

from __future__ import annotations

from planner.importers.onnx.context import NodeCtx, rule
from planner.importers.onnx.errors import OnnxImportError, Unsupported


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
    n.emit("LayerNorm", inputs, attrs, outputs=[0, 1, None])


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
