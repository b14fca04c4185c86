"""Selection ops: Where (ONNX's) and CausalMask (attention's mask of future positions).

Where [cond, a, b] -> y = a where cond else b, all three broadcasting as numpy. cond may be bool,
or a number (float32, int64, int32: non-zero is true, so a NaN condition is true, as numpy's).
a and b share a dtype (bool too), which y keeps.
Gradients: da = sum_to(Where(cond, dy, 0)), db = sum_to(Where(cond, 0, dy)); cond gets none.

CausalMask [x] attrs value -> y: over the last two axes (rows i, columns j), y = x where j <= i,
else `value` (absent: -inf, what a masked attention score gets before Softmax; JSON has no
infinities). Its gradient is CausalMask(dy, value=0): the masked positions get none.

FLOPs: one per output element for both.

Example:
    >>> import numpy as np
    >>> from planner.ops import get_op
    >>> get_op("CausalMask").reference([np.ones((2, 2))], {"value": None})[0]
    array([[  1., -inf],
           [  1.,   1.]])
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
    Pointwise,
    TensorType,
    elementwise_flops,
    register,
    require_float,
)
from planner.ops.elementwise import broadcast_shapes
from planner.ops.reduce import sum_to_shape

if TYPE_CHECKING:
    from planner.ir.graph import Node

COND_DTYPES = ("bool", "float32", "float64", "int64", "int32")


# ---- Where ------------------------------------------------------------------------------------

def _where_infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    cond, x, y = ins
    if cond.dtype not in COND_DTYPES:
        raise OpError(f"Where: condition must be one of {list(COND_DTYPES)}, got {cond.dtype}")
    if x.dtype != y.dtype:
        raise OpError(f"Where: the two branches differ in dtype: {x.dtype} and {y.dtype}")
    shape = broadcast_shapes("Where", broadcast_shapes("Where", cond.shape, x.shape), y.shape)
    return [TensorType(shape, x.dtype)]


def _where(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    cond, x, y = xs
    return [np.where(cond.astype(bool), x, y)]


def _where_gradient(g: GradBuilder, node: Node, grads: list[str | None]) -> list[str | None]:
    cond, x, y = node.inputs
    dy = grads[0]
    wanted = [dy is not None and g.needs(t) for t in (x, y)]
    if not any(wanted):
        return [None, None, None]
    zero = g.emit("Fill", [], {"shape": [], "value": 0.0, "dtype": g.type(dy).dtype})[0]
    dx = sum_to_shape(g, g.emit("Where", [cond, dy, zero])[0], g.type(x).shape) \
        if wanted[0] else None
    dz = sum_to_shape(g, g.emit("Where", [cond, zero, dy])[0], g.type(y).shape) \
        if wanted[1] else None
    return [None, dx, dz]


register(OpDef(
    name="Where", arity=3, cost_class="elementwise",
    infer=_where_infer,
    flops=elementwise_flops(1),
    reference=_where,
    gradient=_where_gradient,
    # a condition of any dtype is true where non-zero, NaN too (said outright: an ordered
    # float compare would call NaN zero)
    pointwise=Pointwise(
        lambda m, xs, p: [m.where(m.any(xs[0] != 0, m.isnan(xs[0])), xs[1], xs[2])],
        broadcast=True,
        signatures=tuple(f"{c},{v},{v}->{v}" for c in ("bool", "float32", "int64")
                         for v in ("float32", "int64"))),
    nondiff_inputs=(0,),
    doc="y = a where cond else b, numpy broadcasting; cond bool or numeric (non-zero is true).",
))


# ---- CausalMask -------------------------------------------------------------------------------

def _mask_infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    x = ins[0]
    require_float("CausalMask", x)
    if x.rank < 2:
        raise OpError(f"CausalMask: input must have rank >= 2, got shape {list(x.shape)}")
    return [x]


def _mask(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    x = xs[0]
    rows, cols = x.shape[-2:]
    keep = np.tril(np.ones((rows, cols), dtype=bool))
    value = -np.inf if a["value"] is None else a["value"]
    return [np.where(keep, x, np.asarray(value, dtype=x.dtype))]


def _mask_pw(m, xs, p):
    col = m.index % p["cols"]
    row = (m.index // p["cols"]) % p["rows"]
    return [m.where(col <= row, xs[0], p["value"])]


def _mask_gradient(g: GradBuilder, node: Node, grads: list[str | None]) -> list[str | None]:
    dy = grads[0]
    if dy is None or not g.needs(node.inputs[0]):
        return [None]
    return [g.emit("CausalMask", [dy], {"value": 0.0})[0]]


register(OpDef(
    name="CausalMask", arity=1, attrs={"value": Attr("float", None)}, cost_class="elementwise",
    infer=_mask_infer,
    flops=elementwise_flops(1),
    reference=_mask,
    gradient=_mask_gradient,
    pointwise=Pointwise(_mask_pw, params=(("value", "float32", -math.inf),),
                        extents=(("rows", -2), ("cols", -1))),
    doc="y = x where column <= row over the last two axes, else value (default -inf).",
))
