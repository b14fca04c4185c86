"""ATen's diagonals, matrix products and distances in the planner's existing ops, whose
gradients the planner's autodiff already knows (torch.linalg's solvers: rules_linalg.py):

    diagonal(x, offset, d1, d2)   Transpose (d1, d2 last), Reshape (the two merged), a Slice of
                                  step cols + 1 from the diagonal's first element: a copy of the
                                  diagonal (the planner's views are reshapes only), differentiated
                                  as the Slice (SliceGrad)
    diagonal_scatter              Where(the diagonal's mask, src placed on it by SliceGrad, x)
    copy(dst, src)                src cast to dst's dtype and expanded to dst's shape (the
                                  functional form of `dst.copy_(src)`: dst's values are not read)
    linear                        MatMul with the weight transposed in place, a BiasAdd; a
                                  rank-1 input or weight one row of a matrix
    linear_cross_entropy          F.linear_cross_entropy's chunked custom ops: linear, then the
                                  cross-entropy of rules_losses.py
    addmv, addbmm                 MatMul (addbmm: one GEMM over the batch folded into the inner
                                  dimension), then beta * self + alpha * product as addmm
    _trilinear (F.bilinear)       x1 [N, I] @ W [I, O*J], times x2, summed over J; any other
                                  pattern its inputs broadcast, multiplied, summed over sumdim
    _cdist_forward, dist          the p-norm of the broadcast difference (torch.linalg.vector_norm's
                                  rule: ReduceNorm, or ReduceMax of |d| for inf)
    _pdist_forward                the rows of every pair i < j gathered (constant ids), their
                                  difference's p-norm

cdist's "use_mm_for_euclid_dist" modes compute the same distances as the difference's norm
(torch's mm path is an algebraic rewrite of it, with more rounding, not other values).
"""

from __future__ import annotations

import math

import numpy as np

from planner.importers.gather import gather_rows
from planner.importers.kit import Const, Unsupported
from planner.importers.torch.context import UNAVAILABLE, NodeCtx, Value, rule


def _axis(n: NodeCtx, axis: object, rank: int) -> int:
    if not isinstance(axis, int) or not -max(rank, 1) <= axis < max(rank, 1):
        raise n.fail(f"dim {axis} out of range for rank {rank}")
    return axis % max(rank, 1)


def reshape_to(n: NodeCtx, x: str | Const, shape: tuple[int, ...] | list[int]) -> str | Const:
    return x if n.shape(x) == tuple(shape) else n.emit1("Reshape", [x], {"shape": list(shape)})


def require_floats(n: NodeCtx, *vs: str | Const) -> None:
    for v in vs:
        if not n.dtype(v).startswith(("float", "bfloat")):
            raise Unsupported(f"{n.op} (of a {n.dtype(v)} tensor)")


# ---- diagonals -------------------------------------------------------------------------------

class Diagonal:
    """Where diagonal(offset, d1, d2) of a tensor of `shape` lies: the permutation putting d1,
    d2 last, the diagonal's length and its Slice of the two axes merged into one.

    >>> d = Diagonal((3, 4), 1, 0, 1)
    >>> d.length, d.slice
    (3, {'starts': [1], 'ends': [12], 'axes': [-1], 'steps': [5]})
    >>> Diagonal((3, 4), -2, 0, 1).slice["starts"], Diagonal((3, 4), -2, 0, 1).length
    ([8], 1)
    """

    def __init__(self, shape: tuple[int, ...], offset: int, d1: int, d2: int) -> None:
        self.perm = [k for k in range(len(shape)) if k not in (d1, d2)] + [d1, d2]
        self.batch = [shape[k] for k in self.perm[:-2]]
        rows, cols = shape[d1], shape[d2]
        self.merged = [*self.batch, rows * cols]
        self.length = max(0, min(rows, cols - offset) if offset >= 0 else
                          min(rows + offset, cols))
        start = offset if offset >= 0 else -offset * cols
        end = start + (self.length - 1) * (cols + 1) + 1 if self.length else start
        self.slice = {"starts": [start], "ends": [end], "axes": [-1], "steps": [cols + 1]}
        self.permuted = [*self.batch, rows, cols]

    @property
    def out_shape(self) -> list[int]:
        return [*self.batch, self.length]


def _diagonal_of(n: NodeCtx, x: str | Const, shape: tuple[int, ...]) -> Diagonal:
    rank = len(shape)
    if rank < 2:
        raise n.fail(f"a diagonal of a rank-{rank} tensor")
    offset = int(n.arg(1 if n.op == "aten.diagonal.default" else 2, "offset", 0))
    k = 2 if n.op == "aten.diagonal.default" else 3
    d1, d2 = (_axis(n, n.arg(k, "dim1", 0), rank), _axis(n, n.arg(k + 1, "dim2", 1), rank))
    if d1 == d2:
        raise n.fail(f"dim1 and dim2 are both {d1}")
    return Diagonal(shape, offset, d1, d2)


@rule("aten.diagonal.default", "aten.diagonal_copy.default")
def diagonal(n: NodeCtx) -> Value:
    x = n.tensor(0)
    d = _diagonal_of(n, x, n.shape(x))
    if d.perm != sorted(d.perm):
        x = n.emit1("Transpose", [x], {"perm": d.perm})
    return n.emit1("Slice", [reshape_to(n, x, d.merged)], d.slice)


@rule("aten.diagonal_scatter.default")
def diagonal_scatter(n: NodeCtx) -> Value:
    x, src = n.tensor(0), n.tensor(1)
    shape = n.shape(x)
    d = _diagonal_of(n, x, shape)
    if list(n.shape(src)) != d.out_shape:
        raise n.fail(f"src has shape {list(n.shape(src))}, the diagonal {d.out_shape}")
    placed = n.emit1("SliceGrad", [src], {**d.slice, "input_shape": d.merged})
    mask = np.zeros(d.merged, dtype=bool)
    mask[..., slice(d.slice["starts"][0], d.slice["ends"][0], d.slice["steps"][0])] = True
    placed, mask = reshape_to(n, placed, d.permuted), mask.reshape(d.permuted)
    if d.perm != sorted(d.perm):
        inverse = list(np.argsort(d.perm))
        placed = n.emit1("Transpose", [placed], {"perm": [int(k) for k in inverse]})
        mask = mask.transpose(inverse)
    return n.emit1("Where", [n.const(np.asarray(mask, order="C"), "bool"), placed, x])


# ---- matrix products -------------------------------------------------------------------------

def scaled_sum(n: NodeCtx, bias: str | Const, y: str, beta: object, alpha: object) -> str:
    """beta * bias + alpha * y (torch's addmm family): bias is not read when beta is 0, so a
    NaN in it does not reach y, as in torch."""
    if alpha != 1:
        y = n.emit1("Scale", [y], {"factor": float(alpha)})  # type: ignore[arg-type]
    if beta == 0:
        return y
    if beta != 1:
        bias = n.emit1("Scale", [bias], {"factor": float(beta)})  # type: ignore[arg-type]
    if n.shape(bias) == n.shape(y)[-1:] and len(n.shape(y)) == 2:
        return n.emit1("BiasAdd", [y, bias], {"axis": 1})
    return n.emit1("Add", [y, bias])


def dense(n: NodeCtx, x: str | Const, w: str | Const, b: object) -> str:
    """x @ w.T + b, shaped x.shape[:-1] + w.shape[:-1]: a rank-1 x or w is one row of a
    matrix (a vector weight gives one output feature, dropped again as torch does)."""
    (xs, ws) = n.shape(x), n.shape(w)
    y = n.emit1("MatMul", [reshape_to(n, x, xs if len(xs) > 1 else (1, *xs)),
                           reshape_to(n, w, ws if len(ws) > 1 else (1, *ws))],
                {"transpose_a": False, "transpose_b": True})
    y = reshape_to(n, y, (*xs[:-1], *ws[:-1]))
    if b is None:
        return y
    if n.shape(b) == n.shape(y)[-1:] and n.shape(b):  # type: ignore[arg-type]
        return n.emit1("BiasAdd", [y, b], {"axis": len(n.shape(y)) - 1})  # type: ignore[list-item]
    return n.emit1("Add", [y, b])  # type: ignore[list-item]


@rule("aten.linear.default")
def linear(n: NodeCtx) -> Value:
    return reshape_to(n, dense(n, n.tensor(0), n.tensor(1), n.arg(2, "bias")), n.out_shape)


@rule("torch_nn._linear_cross_entropy_batch_chunked.default",
      "torch_nn._linear_cross_entropy_batch_chunked_no_reduction.default")
def linear_cross_entropy(n: NodeCtx) -> Value:
    """F.linear_cross_entropy's chunked path, a custom op torch cannot decompose: the linear
    layer and the cross-entropy it computes chunk by chunk, as one graph (its chunking is a
    memory saving the planner's own memory plan decides). Its other outputs are the gradients
    it precomputes for its own backward, which the planner's autodiff computes instead."""
    from planner.importers.torch.rules_losses import MEAN, NONE, SUM, _cross_entropy

    x, w, target = n.tensor(0), n.tensor(1), n.tensor(2)
    logits = dense(n, x, w, n.arg(3, "linear_bias"))
    if n.op.endswith("_no_reduction.default"):
        return _cross_entropy(n, logits, target, n.arg(4, "weight"), NONE,
                              int(n.arg(5, "ignore_index")), 0.0)
    reduction = {"mean": MEAN, "sum": SUM}.get(n.arg(5, "reduction"))
    if reduction is None:
        raise n.fail(f"reduction {n.arg(5, 'reduction')!r} is not 'mean' or 'sum'")
    loss = _cross_entropy(n, logits, target, n.arg(4, "weight"), reduction,
                          int(n.arg(6, "ignore_index")), float(n.arg(7, "label_smoothing")))
    return loss, UNAVAILABLE, UNAVAILABLE, UNAVAILABLE


@rule("aten.addmv.default")
def addmv(n: NodeCtx) -> Value:
    bias, mat, vec = n.tensor(0), n.tensor(1), n.tensor(2)
    require_floats(n, bias, mat, vec)
    (k,) = n.shape(vec)
    y = n.emit1("MatMul", [mat, reshape_to(n, vec, (k, 1))])
    y = reshape_to(n, y, n.shape(mat)[:1])
    return scaled_sum(n, bias, y, n.kwargs.get("beta", 1), n.kwargs.get("alpha", 1))


@rule("aten.addbmm.default")
def addbmm(n: NodeCtx) -> Value:
    """sum over b of b1[b] @ b2[b]: one GEMM of b1 as [N, B*K] (batch moved inside) and b2 as
    [B*K, P]."""
    bias, b1, b2 = n.tensor(0), n.tensor(1), n.tensor(2)
    require_floats(n, bias, b1, b2)
    (b, rows, k), (_, _, cols) = n.shape(b1), n.shape(b2)
    a = reshape_to(n, n.emit1("Transpose", [b1], {"perm": [1, 0, 2]}), (rows, b * k))
    y = n.emit1("MatMul", [a, reshape_to(n, b2, (b * k, cols))])
    return scaled_sum(n, bias, y, n.kwargs.get("beta", 1), n.kwargs.get("alpha", 1))


@rule("aten._trilinear.default")
def trilinear(n: NodeCtx) -> Value:
    """sum over sumdim of i1 * i2 * i3, each unsqueezed at its expand dims. F.bilinear's
    pattern (x1 [N, I], W [O, I, J], x2 [N, J]) is a GEMM, a product with x2 and a sum over J,
    holding [N, O, J] and not [N, O, I, J]."""
    ins = [n.tensor(k) for k in range(3)]
    require_floats(n, *ins)
    expands = [n.ints(k, name) for k, name in ((3, "expand1"), (4, "expand2"), (5, "expand3"))]
    sumdim = n.ints(6, "sumdim")
    if expands == [[1, 3], [0], [1, 2]] and sumdim == [2, 3]:
        x1, w, x2 = ins
        (rows, i), (o, _, j) = n.shape(x1), n.shape(w)
        wt = reshape_to(n, n.emit1("Transpose", [w], {"perm": [1, 0, 2]}), (i, o * j))
        t = reshape_to(n, n.emit1("MatMul", [x1, wt]), (rows, o, j))
        prod = n.emit1("Mul", [t, reshape_to(n, x2, (rows, 1, j))])
        return n.emit1("ReduceSum", [prod], {"axes": [2], "keepdims": False})
    rank = len(n.shape(ins[0])) + len(expands[0])
    full = []
    for v, dims in zip(ins, expands, strict=True):
        shape, it = [], iter(n.shape(v))
        for k in range(rank):
            shape.append(1 if k in dims else next(it))
        full.append(reshape_to(n, v, shape))
    prod = n.emit1("Mul", [n.emit1("Mul", full[:2]), full[2]])
    y = n.emit1("ReduceSum", [prod], {"axes": sorted(sumdim), "keepdims": False}) \
        if sumdim else prod
    return reshape_to(n, y, n.out_shape)


# ---- distances -------------------------------------------------------------------------------

def _norm(n: NodeCtx, d: str, p: float, axes: list[int]) -> str:
    """The p-norm of d over axes (every axis when empty), as torch.linalg.vector_norm."""
    if math.isnan(p) or p < 0:
        raise n.fail(f"p = {p}: a distance needs p >= 0")
    attrs = {"axes": axes, "keepdims": False}
    if math.isinf(p):
        return n.emit1("ReduceMax", [n.emit1("Abs", [d])], attrs)
    return n.emit1("ReduceNorm", [d], {**attrs, "p": p})


@rule("aten.dist.default")
def dist(n: NodeCtx) -> Value:
    a, b = n.tensor(0), n.tensor(1)
    require_floats(n, a, b)
    return reshape_to(n, _norm(n, n.emit1("Sub", [a, b]), float(n.arg(2, "p", 2)), []), ())


@rule("aten._cdist_forward.default")
def cdist(n: NodeCtx) -> Value:
    x1, x2 = n.tensor(0), n.tensor(1)
    require_floats(n, x1, x2)
    s1, s2 = n.shape(x1), n.shape(x2)
    a = reshape_to(n, x1, (*s1[:-1], 1, s1[-1]))
    b = reshape_to(n, x2, (*s2[:-2], 1, *s2[-2:]))
    d = n.emit1("Sub", [a, b])
    return reshape_to(n, _norm(n, d, float(n.arg(2, "p", 2)), [len(n.shape(d)) - 1]),
                    n.out_shape)


@rule("aten._pdist_forward.default")
def pdist(n: NodeCtx) -> Value:
    x = n.tensor(0)
    require_floats(n, x)
    rows, cols = n.shape(x)
    first, second = np.triu_indices(rows, k=1)
    a, b = (gather_rows(n.emit1, x, (rows, cols), 0, n.const(ids, "int64"), ids.shape)
            for ids in (first, second))
    return _norm(n, n.emit1("Sub", [a, b]), float(n.arg(1, "p", 2)), [1])
