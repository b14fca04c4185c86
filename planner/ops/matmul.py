"""Matrix products and biases: MatMul, BiasAdd, BiasAddGrad.

MatMul multiplies the last two axes, y = op(a) @ op(b) with op = transpose of the last two axes
when `transpose_a` / `transpose_b` is set. Both inputs have rank >= 2; leading (batch) axes
broadcast as in `numpy.matmul`, so a (B, M, K) activation times a (K, N) weight is one op.
FLOPs: 2 per multiply-accumulate, 2 * batch * M * N * K.

Permuted views (optional attrs, absent = identity): `perm_a` / `perm_b` read an operand through
an axis permutation before the transpose flag, `perm_y` writes the product through one, so an
attention head split (B, S, H, D) -> (B, H, S, D), K^T and the head merge are strides of the
GEMM instead of Transpose copies (planner/frontend/passes/transpose_fold.py puts them there):

    A = transpose(a, perm_a), last two axes swapped if transpose_a    (B likewise)
    y = transpose(A @ B, perm_y)

Each matrix keeps a unit-stride axis, as GEMM libraries need (oneDNN's matmul falls back to its
reference kernel, cuBLAS has no form at all, otherwise): an operand's own last axis is one of
the two matrix axes of its view (in perm's last two entries), and y's rows stay contiguous
(perm_y[-1] is the last axis).

Gradients (A = op(a), B = op(b)): dA = dy @ B^T, dB = A^T dy, written as MatMuls with the
transpose flags and permutations chosen so that no explicit Transpose is needed (dA itself, or
dA^T = B dy^T when that keeps the gradient's rows contiguous; the operand's inverse permutation
as perm_y), then summed over the batch axes that broadcasting added. A rank-2 weight under a
batched activation gets its gradient from one GEMM over the flattened batch, instead of a
batched product and a reduction.

An optional third input `bias` of shape (N,) is added to every row of the product: a BiasAdd
over the last axis folded into the GEMM that produces its input
(planner/frontend/passes/fold_bias.py), so the kernels add it as they write y instead of in a second
pass (perm_y keeps the last axis last, so the bias runs along y's last axis too). Its gradient is
BiasAddGrad of dy over the last axis, as the BiasAdd's was.

An optional `activation` ("none" or "relu"; absent = none) is applied after the bias,
y = act(op(a) @ op(b) + bias), float32 only: a linear layer's Relu folded in by the same pass
(planner/frontend/passes/fold_bias.py), one definition with Conv2D's
(planner/ops/fused_activation.py). The kernels apply it as the product is written (one Relu pass
over y right after oneDNN's matmul, NaN kept; a bias-and-Relu pass after cuBLAS). Its gradient is
the Relu's, ReluGrad of dy and y, before the product's and the bias's.

Example:
    >>> import numpy as np
    >>> from planner.ops import TensorType, get_op
    >>> attrs = {"transpose_a": False, "transpose_b": True}
    >>> get_op("MatMul").infer([TensorType((8, 2, 3)), TensorType((5, 3))], attrs)[0].shape
    (8, 2, 5)
    >>> q = k = TensorType((2, 7, 4, 16))  # (batch, seq, heads, width), heads not split out
    >>> heads = {"perm_a": [0, 2, 1, 3], "perm_b": [0, 2, 1, 3], "transpose_b": True}
    >>> get_op("MatMul").infer([q, k], {"transpose_a": False, **heads})[0].shape
    (2, 4, 7, 7)
    >>> x = np.arange(24.0).reshape(2, 3, 4)
    >>> y = get_op("MatMul").reference([x, x], {"transpose_a": True, "transpose_b": False,
    ...                                         "perm_y": [1, 0, 2]})[0]
    >>> y.shape, bool((y[:, 1] == x[1].T @ x[1]).all())
    ((4, 2, 4), True)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
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
from planner.ops.fused_activation import (
    ACTIVATION_ATTR,
    activation_flops,
    activation_grad,
    apply_activation,
    check_activation,
)
from planner.ops.reduce import sum_to_shape

if TYPE_CHECKING:
    from planner.ir.graph import Node


# ---- MatMul -----------------------------------------------------------------------------------

# The optional permutation attrs: of input a, of input b, of the output.
PERMS = ("perm_a", "perm_b", "perm_y")


def _perm(a: Attrs, key: str, rank: int) -> tuple[int, ...] | None:
    """The checked permutation `key` of a rank-`rank` tensor; None when absent."""
    perm = a.get(key)
    if perm is None:
        return None
    perm = tuple(perm)
    if sorted(perm) != list(range(rank)):
        raise OpError(f"MatMul: {key} {list(perm)} is not a permutation of 0..{rank - 1}")
    if key == "perm_y" and perm[-1] != rank - 1:
        raise OpError(f"MatMul: perm_y {list(perm)} moves the last axis: the product's rows "
                      f"must stay contiguous (perm_y[-1] == {rank - 1})")
    if key != "perm_y" and rank - 1 not in perm[-2:]:
        raise OpError(f"MatMul: {key} {list(perm)} leaves the operand's last axis out of the "
                      f"matrix axes: one of its last two entries must be {rank - 1}")
    return perm


def _permuted(t: TensorType, perm: Sequence[int] | None) -> TensorType:
    return t if perm is None else TensorType(tuple(t.shape[p] for p in perm), t.dtype)


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
    xv, wv = _permuted(x, _perm(a, "perm_a", x.rank)), _permuted(w, _perm(a, "perm_b", w.rank))
    m, k = _matrix(xv, a["transpose_a"])
    k2, n = _matrix(wv, a["transpose_b"])
    if k != k2:
        views = "".join(f", {p} {a[p]}" for p in PERMS[:2] if a.get(p) is not None)
        raise OpError(f"MatMul: inner dimensions differ: a {list(x.shape)} "
                      f"(transpose_a={a['transpose_a']}) gives K={k}, b {list(w.shape)} "
                      f"(transpose_b={a['transpose_b']}) gives K={k2}{views}")
    batch = broadcast_shapes("MatMul", xv.shape[:-2], wv.shape[:-2])
    if len(ins) == 3 and (ins[2].shape != (n,) or ins[2].dtype != x.dtype):
        raise OpError(f"MatMul: bias must be {x.dtype} of shape [{n}] (y's last axis), got "
                      f"{ins[2].dtype} {list(ins[2].shape)}")
    y = TensorType((*batch, m, n), x.dtype)
    check_activation("MatMul", a, y)
    return [_permuted(y, _perm(a, "perm_y", y.rank))]


def _matmul_flops(ins: list[TensorType], outs: list[TensorType], a: Attrs) -> int:
    _, k = _matrix(_permuted(ins[0], a.get("perm_a")), a["transpose_a"])
    return (2 * outs[0].size * k + (outs[0].size if len(ins) == 3 else 0)
            + activation_flops(outs[0], a))


def _view(x: np.ndarray, perm: Sequence[int] | None, transpose: bool) -> np.ndarray:
    x = x if perm is None else np.transpose(x, perm)
    return np.swapaxes(x, -1, -2) if transpose else x


def _matmul_reference(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    y = np.matmul(_view(xs[0], a.get("perm_a"), a["transpose_a"]),
                  _view(xs[1], a.get("perm_b"), a["transpose_b"]))
    if len(xs) == 3:
        y = y + xs[2]
    y = apply_activation(y, a)
    return [y if a.get("perm_y") is None else np.ascontiguousarray(np.transpose(y, a["perm_y"]))]


def _matmul_grad(g: GradBuilder, node: Node, grads: list[str | None]) -> list[str | None]:
    a, b = node.inputs[:2]
    dy = grads[0]
    at = node.attrs
    if dy is not None:  # the folded Relu's gradient first: dy of the product plus bias
        dy = activation_grad(g, "MatMul", node.name, at, dy, node.outputs[0])
    ta, tb = at["transpose_a"], at["transpose_b"]
    pa, pb = at.get("perm_a"), at.get("perm_b")
    # dY, the product's gradient, is dy read through perm_y's inverse.
    dyp = None if at.get("perm_y") is None else _inverse(at["perm_y"])
    rank = g.type(dy).rank if dy is not None else 0
    da = db = None
    if dy is not None and g.needs(a):
        # dA = dY B^T, or dA^T = B dY^T; da = dA read back through op(a)'s permutation.
        back = _inverse(_full_perm(pa, ta, g.type(a).rank, rank))
        if back[-1] == rank - 1:
            da = _mm(g, (dy, dyp, False), (b, pb, not tb), back)
        else:
            da = _mm(g, (b, pb, tb), (dy, dyp, True), _swapped(back))
        da = sum_to_shape(g, da, g.type(a).shape)
    if dy is not None and g.needs(b):
        # dB = A^T dY, or dB^T = dY^T A.
        back = _inverse(_full_perm(pb, tb, g.type(b).rank, rank))
        if (g.type(b).rank == 2 and g.type(a).rank > 2 and not ta
                and pa is None and pb is None and dyp is None):
            db = _flat_weight_grad(g, a, dy, tb)
        elif back[-1] == rank - 1:
            db = _mm(g, (a, pa, not ta), (dy, dyp, False), back)
        else:
            db = _mm(g, (dy, dyp, True), (a, pa, ta), _swapped(back))
        db = sum_to_shape(g, db, g.type(b).shape)
    if len(node.inputs) == 2:
        return [da, db]
    dbias = None
    if dy is not None and g.needs(node.inputs[2]):
        dbias = g.emit("BiasAddGrad", [dy], {"axis": -1})[0]
    return [da, db, dbias]


def _full_perm(perm: Sequence[int] | None, transpose: bool, rank: int,
               out_rank: int) -> list[int]:
    """The permutation taking an operand of `rank` axes to op(operand), as seen at the
    product's `out_rank` (broadcasting's leading axes in place)."""
    view = list(perm) if perm is not None else list(range(rank))
    if transpose:
        view[-2:] = view[:-3:-1]
    lead = out_rank - rank
    return list(range(lead)) + [lead + p for p in view]


def _inverse(perm: Sequence[int]) -> list[int]:
    return [list(perm).index(k) for k in range(len(perm))]


def _swapped(perm: Sequence[int]) -> list[int]:
    """The permutation writing the transposed product X^T where `perm` wrote X: perm with
    the last two axes' numbers exchanged."""
    r = len(perm)
    return [{r - 1: r - 2, r - 2: r - 1}.get(p, p) for p in perm]


def _mm(g: GradBuilder, x: tuple[str, Sequence[int] | None, bool],
        y: tuple[str, Sequence[int] | None, bool], out: Sequence[int] | None = None) -> str:
    """MatMul of (tensor, permutation, transpose flag) operands written through `out`;
    identity permutations are left out of the attrs."""
    attrs = {"transpose_a": x[2], "transpose_b": y[2]}
    for key, perm in (("perm_a", x[1]), ("perm_b", y[1]), ("perm_y", out)):
        if perm is not None and list(perm) != list(range(len(perm))):
            attrs[key] = list(perm)
    return g.emit("MatMul", [x[0], y[0]], attrs)[0]


def _flat_weight_grad(g: GradBuilder, a: str, dy: str, tb: bool) -> str:
    """Gradient of a rank-2 weight b shared by every batch row of a (..., M, K): one GEMM of
    the flattened (rows, K) activations with the flattened (rows, N) dy."""
    k, n = g.type(a).shape[-1], g.type(dy).shape[-1]
    a2 = g.emit("Reshape", [a], {"shape": [-1, k]})[0]
    dy2 = g.emit("Reshape", [dy], {"shape": [-1, n]})[0]
    return _mm(g, (dy2, None, True), (a2, None, False)) if tb \
        else _mm(g, (a2, None, True), (dy2, None, False))


register(OpDef(
    name="MatMul",
    scratch=reorder_scratch(2),
    cost_class="gemm",
    recompute="expensive", arity=None, min_inputs=2,
    attrs={"transpose_a": Attr("bool", False), "transpose_b": Attr("bool", False),
           **{p: Attr("ints", optional=True) for p in PERMS}, **ACTIVATION_ATTR},
    infer=_matmul_infer,
    flops=_matmul_flops,
    reference=_matmul_reference,
    gradient=_matmul_grad,
    doc="y = act(op(a) @ op(b) (+ bias over the last axis)) over the last two axes; batch "
        "axes broadcast as numpy.matmul; activation none | relu (a folded Relu); optional "
        "perm_a / perm_b / perm_y read and write permuted views (folded Transposes).",
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


def bias_grad_parts(dy: TensorType, a: Attrs) -> int:
    """How many parts the CPU kernel splits dy's rows into (reduce.cpp's bias_grad_parts): a
    fixed count from dy's size, never the thread count, so every thread count sums in the same
    order (the plan's variants compute the main schedule's bits). Rows: dy's outer rows when
    the channels are its last axis, else its (outer, channel) rows.

    >>> bias_grad_parts(TensorType((512, 384)), {"axis": -1}), bias_grad_parts(
    ...     TensorType((8, 64)), {"axis": -1}), bias_grad_parts(TensorType((1, 64, 32, 32)), {})
    (12, 1, 4)
    """
    axis = norm_axis("BiasAddGrad", a.get("axis", 1), dy.rank)
    outer, inner = math.prod(dy.shape[:axis]), math.prod(dy.shape[axis + 1:])
    rows = outer if inner == 1 else outer * dy.shape[axis]
    return max(1, min(16, rows, dy.size // 16384))


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
    # Float64 partial sums of every channel, one row per part of dy (bias_grad_parts): the
    # output's length, the channels along `axis` (a transformer's last axis, not axis 1: sized
    # on axis 1, a GPT's MLP bias gradient got a block beside the arena).
    scratch=widening_scratch(
        lambda ins, outs, a, threads: 8 * outs[0].size * bias_grad_parts(ins[0], a) + 4096),
    cost_class="reduction", arity=1, attrs={"axis": Attr("int", 1)},
    infer=_bias_add_grad_infer,
    # one addition per dy element
    flops=lambda ins, outs, a: ins[0].size,
    reference=_bias_add_grad_reference,
    doc="db = dy summed over every axis but `axis`.",
))
