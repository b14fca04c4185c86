"""ScaledSoftmax: attention's Scale -> CausalMask -> Softmax as one op, and its gradient.

    ScaledSoftmax      [x] attrs scale, causal -> y = Softmax(CausalMask(Scale(x, scale)), -1)
    ScaledSoftmaxGrad  [dy, y] attrs scale, causal
                       -> dx = Scale(CausalMask(SoftmaxGrad(dy, y, -1), value=0), scale)
                            = scale * y * (dy - sum(dy * y)) per row, 0 where masked

The softmax runs along the last axis (attention's keys); `causal` masks, over the last two axes
(rows i, columns j), every j > i with -inf before the softmax, so y is 0 there and the
gradient is 0 there. The graph pass planner/frontend/passes/softmax_fusion.py writes these ops in
place of the three-op chains that the zoo's transformers and the torch.export importer emit (and of
the chain's gradients), when the intermediates have no other reader; kernels then make one pass
over the scores instead of three or four.

Why an op of its own rather than attributes of Softmax: graph attrs hold every default, so new
Softmax attributes would change every existing graph and plan hash; and Softmax's readers
(planner/frontend/loss.py's "a loss on a Softmax takes its input") would have to learn that its
input is no longer the logits.

Semantics are exactly the composition's, in x's dtype: the scores are `x * scale` rounded to
float32, and a row whose unmasked scores hold a NaN or +inf, or are all -inf, is NaN throughout
(numpy and PyTorch: x - max is NaN there). The gradient's dot product runs over the whole row,
masked positions too (as SoftmaxGrad's), so a non-finite dy or y anywhere in a row makes its
unmasked gradients NaN as in the composition.

FLOPs per element: Softmax's 5, plus 1 for the scale and 1 for the mask when causal; the
gradient SoftmaxGrad's 4 plus the same.

Example:
    >>> import numpy as np
    >>> from planner.ops import get_op
    >>> get_op("ScaledSoftmax").reference([np.zeros((2, 2), np.float32)],
    ...                                   {"scale": 0.5, "causal": True})[0]
    array([[1. , 0. ],
           [0.5, 0.5]], dtype=float32)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from planner.ops.base import (
    Attr,
    Attrs,
    GradBuilder,
    OpDef,
    OpError,
    TensorType,
    get_op,
    register,
    require_float,
)

if TYPE_CHECKING:
    from planner.ir.graph import Node

ATTRS = {"scale": Attr("float", 1.0), "causal": Attr("bool", False)}


def _check(op: str, x: TensorType, a: Attrs, what: str = "input") -> None:
    require_float(op, x, what)
    if x.rank < (2 if a["causal"] else 1):
        raise OpError(f"{op}: {what} must have rank >= {2 if a['causal'] else 1}"
                      f"{' (causal masks the last two axes)' if a['causal'] else ''}, "
                      f"got shape {list(x.shape)}")


def _infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    _check("ScaledSoftmax", ins[0], a)
    return [ins[0]]


def _grad_infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    dy, y = ins
    _check("ScaledSoftmaxGrad", dy, a, "input dy")
    if dy != y:
        raise OpError(f"ScaledSoftmaxGrad: dy is {dy.dtype} {list(dy.shape)} but y is "
                      f"{y.dtype} {list(y.shape)}; they must match")
    return [dy]


def _ref(op: str, xs: list[np.ndarray], attrs: Attrs) -> np.ndarray:
    opdef = get_op(op)
    return opdef.reference(xs, opdef.normalize_attrs(attrs))[0]


def _reference(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    """The composition itself, op by op (their references are the oracle)."""
    s = _ref("Scale", [xs[0]], {"factor": a["scale"]})
    if a["causal"]:
        s = _ref("CausalMask", [s], {})
    return [_ref("Softmax", [s], {"axis": -1})]


def _grad_reference(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    g = _ref("SoftmaxGrad", list(xs), {"axis": -1})
    if a["causal"]:
        g = _ref("CausalMask", [g], {"value": 0.0})
    return [_ref("Scale", [g], {"factor": a["scale"]})]


def _flops(base: int):
    def flops(ins: list[TensorType], outs: list[TensorType], a: Attrs) -> int:
        return (base + 1 + int(a["causal"])) * outs[0].size

    return flops


def _gradient(g: GradBuilder, node: Node, grads: list[str | None]) -> list[str | None]:
    dy = grads[0]
    if dy is None or not g.needs(node.inputs[0]):
        return [None]
    return [g.emit("ScaledSoftmaxGrad", [dy, node.outputs[0]], dict(node.attrs))[0]]


register(OpDef(
    name="ScaledSoftmax", arity=1, attrs=ATTRS, cost_class="reduction",
    infer=_infer, flops=_flops(5), reference=_reference, gradient=_gradient,
    doc="y = Softmax(CausalMask(scale * x) if causal else scale * x) along the last axis "
        "(attention's scores in one pass).",
))

register(OpDef(
    name="ScaledSoftmaxGrad", arity=2, attrs=ATTRS, cost_class="reduction",
    infer=_grad_infer, flops=_flops(4), reference=_grad_reference,
    doc="Gradient of ScaledSoftmax: [dy, y] -> dx = scale * y * (dy - sum(dy * y)), "
        "0 where causal masks.",
))
