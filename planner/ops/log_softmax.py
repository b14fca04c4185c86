"""LogSoftmax: y = x - log(sum(exp(x))) along one axis, computed stably (max subtracted first).

Its gradient is built from other ops: dx = dy - exp(y) * sum(dy, axis), with Exp, ReduceSum
(keepdims), Mul and Sub.

FLOPs: 5 per element (max, subtract, exp, sum, subtract), counting exp as one.

Example:
    >>> import numpy as np
    >>> from planner.ops import get_op
    >>> y = get_op("LogSoftmax").reference([np.array([[0.0, 0.0]])], {"axis": -1})[0]
    >>> bool(np.allclose(y, np.log(0.5)))
    True
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from planner.ops.base import (
    Attr,
    Attrs,
    GradBuilder,
    OpDef,
    TensorType,
    elementwise_flops,
    norm_axis,
    register,
    reorder_scratch,
    require_float,
)

if TYPE_CHECKING:
    from planner.ir.graph import Node


def _infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    require_float("LogSoftmax", ins[0])
    norm_axis("LogSoftmax", a["axis"], ins[0].rank)
    return [ins[0]]


def _reference(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    x, axis = xs[0], a["axis"]
    # initial=-inf: an empty axis has no maximum (and its log-softmax no element), as torch's
    shifted = x - np.max(x, axis=axis, keepdims=True, initial=-np.inf)
    return [shifted - np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))]


def _gradient(g: GradBuilder, node: Node, grads: list[str | None]) -> list[str | None]:
    dy = grads[0]
    if dy is None or not g.needs(node.inputs[0]):
        return [None]
    rank = len(g.type(dy).shape)
    axis = norm_axis("LogSoftmax", node.attrs["axis"], rank)
    # a 0-d x is its own axis of one element: the sum over it is dy (torch's gradient is 0)
    total = g.emit("ReduceSum", [dy], {"axes": [axis], "keepdims": True})[0] if rank else dy
    softmax = g.emit("Exp", [node.outputs[0]])[0]
    return [g.emit("Sub", [dy, g.emit("Mul", [softmax, total])[0]])[0]]


register(OpDef(
    name="LogSoftmax", arity=1, attrs={"axis": Attr("int", -1)}, cost_class="reduction",
    scratch=reorder_scratch(0, 4096),
    infer=_infer,
    flops=elementwise_flops(5),
    reference=_reference,
    gradient=_gradient,
    doc="y = x - log(sum(exp(x))) along axis.",
))
