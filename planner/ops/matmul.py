"""Matrix products and biases: MatMul, BiasAdd, BiasAddGrad.

MatMul multiplies the last two axes, y = op(a) @ op(b) with op = transpose of the last two axes
when `transpose_a` / `transpose_b` is set. Both inputs have rank >= 2; leading (batch) axes
broadcast as in `numpy.matmul`, so a (B, M, K) activation times a (K, N) weight is one op.
FLOPs: 2 per multiply-accumulate, 2 * batch * M * N * K.

An optional third input `bias` of shape (N,) is added to every row of y: a BiasAdd over the last
axis folded into the GEMM that produces its input (planner/graph/fold_bias.py), so the kernels
add it as they write y instead of in a second pass. Its gradient is BiasAddGrad of dy over the
last axis, as the BiasAdd's was.

Gradients (A = op(a), B = op(b)): dA = dy @ B^T, dB = A^T @ dy, written as MatMuls with the
transpose flags chosen so that no explicit Transpose is needed, then summed over the batch axes
that broadcasting added. A rank-2 weight under a batched activation gets its gradient from one
GEMM over the flattened batch, instead of a batched product and a reduction.

Example:
    >>> from planner.ops import TensorType, get_op
    >>> attrs = {"transpose_a": False, "transpose_b": True}
    >>> get_op("MatMul").infer([TensorType((8, 2, 3)), TensorType((5, 3))], attrs)[0].shape
    (8, 2, 5)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from planner.dtypes import LOW_FLOATS
from planner.ops.base import (
    Attr,
    Attrs,
    GradBuilder,
    OpDef,
    OpError,
    TensorType,
    elementwise_flops,
    norm_axis,
    register,
    reorder_scratch,
    require_float,
    widening_scratch,
)
from planner.ops.elementwise import broadcast_shapes
from planner.ops.reduce import sum_to_shape

if TYPE_CHECKING:
    from planner.graph.ir import Node


# ---- MatMul -----------------------------------------------------------------------------------

def _matrix(t: TensorType, transpose: bool) -> tuple[int, int]:
    """(rows, cols) of op(t), the last two axes after the optional transpose."""
    rows, cols = t.shape[-2:]
    return (cols, rows) if transpose else (rows, cols)


def _matmul_infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    if len(ins) > 3:
        raise OpError(f"MatMul takes 2 or 3 inputs (a, b, optional bias), got {len(ins)}")
    x, w = ins[:2]
    for name, t in (("a", x), ("b", w)):
        if t.rank < 2:
            raise OpError(f"MatMul: input {name} must have rank >= 2, got shape {list(t.shape)}")
        require_float("MatMul", t, f"input {name}")
    if x.dtype != w.dtype:
        raise OpError(f"MatMul: input dtypes differ: a is {x.dtype}, b is {w.dtype}")
    m, k = _matrix(x, a["transpose_a"])
    k2, n = _matrix(w, a["transpose_b"])
    if k != k2:
        raise OpError(f"MatMul: inner dimensions differ: a {list(x.shape)} "
                      f"(transpose_a={a['transpose_a']}) gives K={k}, b {list(w.shape)} "
                      f"(transpose_b={a['transpose_b']}) gives K={k2}")
    batch = broadcast_shapes("MatMul", x.shape[:-2], w.shape[:-2])
    if len(ins) == 3 and (ins[2].shape != (n,) or ins[2].dtype != x.dtype):
        raise OpError(f"MatMul: bias must be {x.dtype} of shape [{n}] (y's last axis), got "
                      f"{ins[2].dtype} {list(ins[2].shape)}")
    return [TensorType((*batch, m, n), x.dtype)]


def _matmul_flops(ins: list[TensorType], outs: list[TensorType], a: Attrs) -> int:
    _, k = _matrix(ins[0], a["transpose_a"])
    return 2 * outs[0].size * k + (outs[0].size if len(ins) == 3 else 0)


def _swap(x: np.ndarray, transpose: bool) -> np.ndarray:
    return np.swapaxes(x, -1, -2) if transpose else x


def _matmul_reference(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    y = np.matmul(_swap(xs[0], a["transpose_a"]), _swap(xs[1], a["transpose_b"]))
    return [y + xs[2] if len(xs) == 3 else y]


def _matmul_grad(g: GradBuilder, node: Node, grads: list[str | None]) -> list[str | None]:
    a, b = node.inputs[:2]
    dy = grads[0]
    ta, tb = node.attrs["transpose_a"], node.attrs["transpose_b"]
    da = db = None
    if dy is not None and g.needs(a):
        # dA = dy B^T; when a itself is transposed, da = dA^T = B dy^T.
        if ta:
            da = _mm(g, b, dy, tb, True)
        else:
            da = _mm(g, dy, b, False, not tb)
        da = sum_to_shape(g, da, g.type(a).shape)
    if dy is not None and g.needs(b):
        # dB = A^T dy; when b itself is transposed, db = dB^T = dy^T A.
        if g.type(b).rank == 2 and g.type(a).rank > 2 and not ta:
            db = _flat_weight_grad(g, a, dy, tb)
        elif tb:
            db = _mm(g, dy, a, True, ta)
        else:
            db = _mm(g, a, dy, not ta, False)
        db = sum_to_shape(g, db, g.type(b).shape)
    if len(node.inputs) == 2:
        return [da, db]
    dbias = None
    if dy is not None and g.needs(node.inputs[2]):
        dbias = g.emit("BiasAddGrad", [dy], {"axis": -1})[0]
    return [da, db, dbias]


def _mm(g: GradBuilder, x: str, y: str, tx: bool, ty: bool) -> str:
    return g.emit("MatMul", [x, y], {"transpose_a": tx, "transpose_b": ty})[0]


def _flat_weight_grad(g: GradBuilder, a: str, dy: str, tb: bool) -> str:
    """Gradient of a rank-2 weight b shared by every batch row of a (..., M, K): one GEMM of
    the flattened (rows, K) activations with the flattened (rows, N) dy."""
    k, n = g.type(a).shape[-1], g.type(dy).shape[-1]
    a2 = g.emit("Reshape", [a], {"shape": [-1, k]})[0]
    dy2 = g.emit("Reshape", [dy], {"shape": [-1, n]})[0]
    return _mm(g, dy2, a2, True, False) if tb else _mm(g, a2, dy2, True, False)


register(OpDef(
    name="MatMul",
    scratch=reorder_scratch(2),
    cost_class="gemm",
    recompute="expensive", arity=None, min_inputs=2,
    attrs={"transpose_a": Attr("bool", False), "transpose_b": Attr("bool", False)},
    infer=_matmul_infer,
    flops=_matmul_flops,
    reference=_matmul_reference,
    gradient=_matmul_grad,
    doc="y = op(a) @ op(b) (+ bias over the last axis) over the last two axes; batch axes "
        "broadcast as numpy.matmul.",
))


# ---- BiasAdd / BiasAddGrad --------------------------------------------------------------------

def _bias_shape(rank: int, axis: int, channels: int) -> tuple[int, ...]:
    """Shape that broadcasts a (C,) bias along `axis` of a rank-`rank` tensor."""
    return tuple(channels if k == axis else 1 for k in range(rank))


def _bias_add_infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    x, b = ins
    require_float("BiasAdd", x, "input x")
    if b.rank != 1:
        raise OpError(f"BiasAdd: bias must have rank 1, got shape {list(b.shape)}")
    if b.dtype != x.dtype:
        raise OpError(f"BiasAdd: bias dtype {b.dtype} differs from input dtype {x.dtype}")
    axis = norm_axis("BiasAdd", a["axis"], x.rank)
    if x.shape[axis] != b.shape[0]:
        raise OpError(f"BiasAdd: bias has {b.shape[0]} elements but axis {a['axis']} of input "
                      f"{list(x.shape)} has {x.shape[axis]}")
    return [x]


def _bias_add_reference(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    x, b = xs
    axis = norm_axis("BiasAdd", a["axis"], x.ndim)
    return [x + b.reshape(_bias_shape(x.ndim, axis, b.shape[0]))]


def _bias_add_grad(g: GradBuilder, node: Node, grads: list[str | None]) -> list[str | None]:
    x, b = node.inputs
    dy = grads[0]
    dx = dy if dy is not None and g.needs(x) else None
    db = None
    if dy is not None and g.needs(b):
        db = g.emit("BiasAddGrad", [dy], {"axis": node.attrs["axis"]})[0]
    return [dx, db]


def _bias_add_grad_infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    dy = ins[0]
    require_float("BiasAddGrad", dy, "input dy")
    if dy.rank == 0:
        raise OpError("BiasAddGrad: dy must have rank >= 1, got a scalar")
    axis = norm_axis("BiasAddGrad", a["axis"], dy.rank)
    # a sum: over a bfloat16 / float16 dy it accumulates and answers in float32
    return [TensorType((dy.shape[axis],), "float32" if dy.dtype in LOW_FLOATS else dy.dtype)]


def _bias_add_grad_reference(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    dy = xs[0]
    axis = norm_axis("BiasAddGrad", a["axis"], dy.ndim)
    others = tuple(k for k in range(dy.ndim) if k != axis)
    return [np.sum(dy, axis=others, dtype=dy.dtype)]


register(OpDef(
    name="BiasAdd",
    cost_class="elementwise", arity=2, attrs={"axis": Attr("int", 1)},
    infer=_bias_add_infer,
    flops=elementwise_flops(1),
    reference=_bias_add_reference,
    gradient=_bias_add_grad,
    doc="y = x + b broadcast along `axis` (the channel axis: 1 for NCHW and for (N, F)).",
))

register(OpDef(
    name="BiasAddGrad",
    # Per-thread float64 partial sums of every channel (bias axis 1).
    scratch=widening_scratch(lambda ins, outs, a, threads: 8 * ins[0].shape[1] * threads + 4096),
    cost_class="reduction", arity=1, attrs={"axis": Attr("int", 1)},
    infer=_bias_add_grad_infer,
    # one addition per dy element
    flops=lambda ins, outs, a: ins[0].size,
    reference=_bias_add_grad_reference,
    doc="db = dy summed over every axis but `axis`.",
))
