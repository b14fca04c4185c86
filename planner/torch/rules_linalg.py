"""ATen's diagonals, matrix-vector products and distances in the planner's existing ops, whose
gradients the planner's autodiff already knows:

    diagonal(x, offset, d1, d2)   Transpose (d1, d2 last), Reshape (the two merged), a Slice of
                                  step cols + 1 from the diagonal's first element: a copy of the
                                  diagonal (the planner's views are reshapes only), differentiated
                                  as the Slice (SliceGrad)
    diagonal_scatter              Where(the diagonal's mask, src placed on it by SliceGrad, x)
    copy(dst, src)                src cast to dst's dtype and expanded to dst's shape (the
                                  functional form of `dst.copy_(src)`: dst's values are not read)
    addmv, addbmm                 MatMul (addbmm: one GEMM over the batch folded into the inner
                                  dimension), then beta * self + alpha * product as addmm
    _trilinear (F.bilinear)       x1 [N, I] @ W [I, O*J], times x2, summed over J; any other
                                  pattern its inputs broadcast, multiplied, summed over sumdim
    _cdist_forward, dist          the p-norm of the broadcast difference (torch.linalg.vector_norm's
                                  rule: ReduceNorm, or ReduceMax / ReduceMin of |d| for inf / -inf)
    _pdist_forward                the rows of every pair i < j gathered (constant ids), their
                                  difference's p-norm

Solvers and factorizations on planner/ops/linalg.py's MatrixInverse, MatrixSolve, MatrixSlogdet
and Cholesky:

    linalg_inv(_ex), _linalg_solve_ex   MatrixInverse, MatrixSolve (a vector B, left=False and
                                        broadcast batches reshaped, transposed, expanded)
    _linalg_det, _linalg_slogdet        MatrixSlogdet (det = sign * exp(log|det|))
    cholesky, linalg_cholesky_ex        Cholesky (upper: its transpose)
    cholesky_solve, cholesky_inverse    MatrixSolve, MatrixInverse of L L^T (U^T U)
    linalg_solve_triangular,            MatrixSolve of A's triangle (a Where with constant
    triangular_solve                    masks, so that A's gradient stays in that triangle)
    lu_unpack, linalg_lu_solve          with pivots known at import: P a constant, L and U
                                        A's triangles, X two triangular solves and a GEMM by P
    _linalg_svd                         MatrixSvd's singular values (svdvals, the nuclear and
                                        2-norms, cond, matrix_rank); U and Vh are not offered

The `_ex` forms' info is the ops' own (attr info); LU and pivots are not computed (an error
only when read). torch's error checks
of these ops, which torch.export threads on an effect token, are dropped when the program is
recorded (planner/torch/record.py): a singular matrix gives inf or NaN, where torch raises.

cdist's "use_mm_for_euclid_dist" modes compute the same distances as the difference's norm
(torch's mm path is an algebraic rewrite of it, with more rounding, not other values).
"""

from __future__ import annotations

import math

import numpy as np

from planner.importers.gather import gather_rows
from planner.importers.onnx.errors import Unsupported
from planner.importers.onnx.values import Const
from planner.torch.context import UNAVAILABLE, NodeCtx, Value, rule


def _axis(n: NodeCtx, axis: object, rank: int) -> int:
    if not isinstance(axis, int) or not -max(rank, 1) <= axis < max(rank, 1):
        raise n.fail(f"dim {axis} out of range for rank {rank}")
    return axis % max(rank, 1)


def _reshape(n: NodeCtx, x: str | Const, shape: tuple[int, ...] | list[int]) -> str | Const:
    return x if n.shape(x) == tuple(shape) else n.emit1("Reshape", [x], {"shape": list(shape)})


def _float(n: NodeCtx, *vs: str | Const) -> None:
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
    return n.emit1("Slice", [_reshape(n, x, d.merged)], d.slice)


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
    placed, mask = _reshape(n, placed, d.permuted), mask.reshape(d.permuted)
    if d.perm != sorted(d.perm):
        inverse = list(np.argsort(d.perm))
        placed = n.emit1("Transpose", [placed], {"perm": [int(k) for k in inverse]})
        mask = mask.transpose(inverse)
    return n.emit1("Where", [n.const(np.ascontiguousarray(mask), "bool"), placed, x])


@rule("aten.copy.default")
def copy(n: NodeCtx) -> Value:
    """`dst.copy_(src)` made functional (torch.linalg.matrix_power(x, 0) writes the identity
    into a clone of x this way): src broadcast to dst's shape in dst's dtype."""
    from planner.torch.rules_pointwise import as_dtype

    dst, src = n.tensor(0), n.tensor(1)
    y = as_dtype(n, src, n.dtype(dst))
    if n.shape(y) == n.shape(dst):
        return y
    if len(n.shape(y)) < len(n.shape(dst)):
        y = _reshape(n, y, (1,) * (len(n.shape(dst)) - len(n.shape(y))) + n.shape(y))
    return n.emit1("Expand", [y], {"shape": list(n.shape(dst))})


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
    y = n.emit1("MatMul", [_reshape(n, x, xs if len(xs) > 1 else (1, *xs)),
                           _reshape(n, w, ws if len(ws) > 1 else (1, *ws))],
                {"transpose_a": False, "transpose_b": True})
    y = _reshape(n, y, (*xs[:-1], *ws[:-1]))
    if b is None:
        return y
    if n.shape(b) == n.shape(y)[-1:] and n.shape(b):  # type: ignore[arg-type]
        return n.emit1("BiasAdd", [y, b], {"axis": len(n.shape(y)) - 1})  # type: ignore[list-item]
    return n.emit1("Add", [y, b])  # type: ignore[list-item]


@rule("aten.linear.default")
def linear(n: NodeCtx) -> Value:
    return _reshape(n, dense(n, n.tensor(0), n.tensor(1), n.arg(2, "bias")), n.out_shape)


@rule("torch_nn._linear_cross_entropy_batch_chunked.default",
      "torch_nn._linear_cross_entropy_batch_chunked_no_reduction.default")
def linear_cross_entropy(n: NodeCtx) -> Value:
    """F.linear_cross_entropy's chunked path, a custom op torch cannot decompose: the linear
    layer and the cross-entropy it computes chunk by chunk, as one graph (its chunking is a
    memory saving the planner's own memory plan decides). Its other outputs are the gradients
    it precomputes for its own backward, which the planner's autodiff computes instead."""
    from planner.torch.rules_losses import MEAN, NONE, SUM, _cross_entropy

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
    _float(n, bias, mat, vec)
    (k,) = n.shape(vec)
    y = n.emit1("MatMul", [mat, _reshape(n, vec, (k, 1))])
    y = _reshape(n, y, n.shape(mat)[:1])
    return scaled_sum(n, bias, y, n.kwargs.get("beta", 1), n.kwargs.get("alpha", 1))


@rule("aten.addbmm.default")
def addbmm(n: NodeCtx) -> Value:
    """sum over b of b1[b] @ b2[b]: one GEMM of b1 as [N, B*K] (batch moved inside) and b2 as
    [B*K, P]."""
    bias, b1, b2 = n.tensor(0), n.tensor(1), n.tensor(2)
    _float(n, bias, b1, b2)
    (b, rows, k), (_, _, cols) = n.shape(b1), n.shape(b2)
    a = _reshape(n, n.emit1("Transpose", [b1], {"perm": [1, 0, 2]}), (rows, b * k))
    y = n.emit1("MatMul", [a, _reshape(n, b2, (b * k, cols))])
    return scaled_sum(n, bias, y, n.kwargs.get("beta", 1), n.kwargs.get("alpha", 1))


@rule("aten._trilinear.default")
def trilinear(n: NodeCtx) -> Value:
    """sum over sumdim of i1 * i2 * i3, each unsqueezed at its expand dims. F.bilinear's
    pattern (x1 [N, I], W [O, I, J], x2 [N, J]) is a GEMM, a product with x2 and a sum over J,
    holding [N, O, J] and not [N, O, I, J]."""
    ins = [n.tensor(k) for k in range(3)]
    _float(n, *ins)
    expands = [n.ints(k, name) for k, name in ((3, "expand1"), (4, "expand2"), (5, "expand3"))]
    sumdim = n.ints(6, "sumdim")
    if expands == [[1, 3], [0], [1, 2]] and sumdim == [2, 3]:
        x1, w, x2 = ins
        (rows, i), (o, _, j) = n.shape(x1), n.shape(w)
        wt = _reshape(n, n.emit1("Transpose", [w], {"perm": [1, 0, 2]}), (i, o * j))
        t = _reshape(n, n.emit1("MatMul", [x1, wt]), (rows, o, j))
        prod = n.emit1("Mul", [t, _reshape(n, x2, (rows, 1, j))])
        return n.emit1("ReduceSum", [prod], {"axes": [2], "keepdims": False})
    rank = len(n.shape(ins[0])) + len(expands[0])
    full = []
    for v, dims in zip(ins, expands, strict=True):
        shape, it = [], iter(n.shape(v))
        for k in range(rank):
            shape.append(1 if k in dims else next(it))
        full.append(_reshape(n, v, shape))
    prod = n.emit1("Mul", [n.emit1("Mul", full[:2]), full[2]])
    y = n.emit1("ReduceSum", [prod], {"axes": sorted(sumdim), "keepdims": False}) \
        if sumdim else prod
    return _reshape(n, y, n.out_shape)


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
    _float(n, a, b)
    return _reshape(n, _norm(n, n.emit1("Sub", [a, b]), float(n.arg(2, "p", 2)), []), ())


@rule("aten._cdist_forward.default")
def cdist(n: NodeCtx) -> Value:
    x1, x2 = n.tensor(0), n.tensor(1)
    _float(n, x1, x2)
    s1, s2 = n.shape(x1), n.shape(x2)
    a = _reshape(n, x1, (*s1[:-1], 1, s1[-1]))
    b = _reshape(n, x2, (*s2[:-2], 1, *s2[-2:]))
    d = n.emit1("Sub", [a, b])
    return _reshape(n, _norm(n, d, float(n.arg(2, "p", 2)), [len(n.shape(d)) - 1]),
                    n.out_shape)


@rule("aten._pdist_forward.default")
def pdist(n: NodeCtx) -> Value:
    x = n.tensor(0)
    _float(n, x)
    rows, cols = n.shape(x)
    first, second = np.triu_indices(rows, k=1)
    a, b = (gather_rows(n.emit1, x, (rows, cols), 0, n.const(ids, "int64"), ids.shape)
            for ids in (first, second))
    return _norm(n, n.emit1("Sub", [a, b]), float(n.arg(1, "p", 2)), [1])


# ---- solvers and factorizations (planner/ops/linalg.py) ---------------------------------------

def _batched(n: NodeCtx, a: str | Const, b: str | Const) -> tuple[str | Const, str | Const]:
    """A (..., n, n) and B (..., n, k) with their batch axes broadcast to one shape."""
    sa, sb = n.shape(a), n.shape(b)
    try:
        batch = tuple(np.broadcast_shapes(sa[:-2], sb[:-2]))
    except ValueError:
        raise n.fail(f"batch shapes {list(sa[:-2])} and {list(sb[:-2])} do not broadcast") \
            from None
    out = []
    for v, s in ((a, sa), (b, sb)):
        if s[:-2] != batch:
            v = _reshape(n, v, (1,) * (len(batch) + 2 - len(s)) + s)
            v = n.emit1("Expand", [v], {"shape": [*batch, *s[-2:]]})
        out.append(v)
    return out[0], out[1]


def _mt(n: NodeCtx, x: str | Const) -> str:
    """The matrices of x transposed."""
    rank = len(n.shape(x))
    return n.emit1("Transpose", [x], {"perm": [*range(rank - 2), rank - 1, rank - 2]})


def solve(n: NodeCtx, a: str | Const, b: str | Const, left: bool = True,
          info: list[str] | None = None) -> str:
    """X with A X = B (left) or X A = B; B a matrix or, as torch.linalg.solve reads it, a
    vector (rank 1, or A's batch shape + [n]). `info`, when given, gets the solve's info
    output (torch's `_ex` forms)."""
    _float(n, a, b)
    sa, sb = n.shape(a), n.shape(b)
    vector = len(sb) == 1 or (len(sb) == len(sa) - 1 and sb == sa[:-1])
    if vector:
        b = _reshape(n, b, (*sb, 1) if left else (*sb[:-1], 1, sb[-1]))
    a, b = _batched(n, a, b)
    outs = n.emit("MatrixSolve", [a, b if left else _mt(n, b)],
                  {"transpose": not left, **({"info": True} if info is not None else {})},
                  n_out=1 + (info is not None))
    if info is not None:
        info.append(outs[1])
    x = outs[0] if left else _mt(n, outs[0])
    if not vector:
        return x
    sx = n.shape(x)
    return _reshape(n, x, sx[:-1] if left else (*sx[:-2], sx[-1]))


@rule("aten._linalg_solve_ex.default")
def linalg_solve(n: NodeCtx) -> Value:
    """(X, LU, pivots, info): the LU factors are not computed (an error only when read)."""
    info: list[str] = []
    x = solve(n, n.tensor(0), n.tensor(1), bool(n.arg(2, "left", True)), info)
    return x, UNAVAILABLE, UNAVAILABLE, info[0]


@rule("aten.linalg_inv_ex.default", "aten.linalg_inv.default")
def inverse(n: NodeCtx) -> Value:
    x = n.tensor(0)
    _float(n, x)
    if n.op == "aten.linalg_inv.default":
        return n.emit1("MatrixInverse", [x])
    return tuple(n.emit("MatrixInverse", [x], {"info": True}, n_out=2))


@rule("aten._linalg_slogdet.default", "aten._linalg_det.default")
def slogdet(n: NodeCtx) -> Value:
    """det = sign * exp(log|det|): torch's gradient of det at a non-singular matrix, the same
    det A^-T."""
    x = n.tensor(0)
    _float(n, x)
    sign, logabs = n.emit("MatrixSlogdet", [x], n_out=2)
    if n.op == "aten._linalg_slogdet.default":
        return sign, logabs, UNAVAILABLE, UNAVAILABLE
    return n.emit1("Mul", [sign, n.emit1("Exp", [logabs])]), UNAVAILABLE, UNAVAILABLE


@rule("aten.linalg_cholesky_ex.default", "aten.cholesky.default")
def cholesky(n: NodeCtx) -> Value:
    x = n.tensor(0)
    _float(n, x)
    ex = n.op == "aten.linalg_cholesky_ex.default"
    outs = n.emit("Cholesky", [x], {"info": True} if ex else {}, n_out=1 + ex)
    y = _mt(n, outs[0]) if n.arg(1, "upper", False) else outs[0]
    return (y, outs[1]) if ex else y


def _gram(n: NodeCtx, factor: str | Const, upper: bool) -> str:
    """A = L L^T of a Cholesky factor (U^T U of an upper one)."""
    _float(n, factor)
    return n.emit1("MatMul", [factor, factor], {"transpose_a": upper, "transpose_b": not upper})


@rule("aten.cholesky_solve.default")
def cholesky_solve(n: NodeCtx) -> Value:
    b, factor = n.tensor(0), n.tensor(1)
    return solve(n, _gram(n, factor, bool(n.arg(2, "upper", False))), b)


@rule("aten.cholesky_inverse.default")
def cholesky_inverse(n: NodeCtx) -> Value:
    return n.emit1("MatrixInverse", [_gram(n, n.tensor(0), bool(n.arg(1, "upper", False)))])


def _triangle(n: NodeCtx, a: str | Const, upper: bool, unit: bool) -> str:
    """A's upper or lower triangle, the rest zeros (unit: ones on the diagonal instead of A's):
    what a triangular solve reads of A, so that A's gradient stays in that triangle."""
    size = n.shape(a)[-1]
    keep = np.triu(np.ones((size, size), bool), int(unit)) if upper else \
        np.tril(np.ones((size, size), bool), -int(unit))
    fill = np.eye(size) if unit else np.zeros((size, size))
    return n.emit1("Where", [n.const(keep, "bool"), a, n.const(fill, n.dtype(a))])


@rule("aten.linalg_solve_triangular.default")
def solve_triangular(n: NodeCtx) -> Value:
    a, b = n.tensor(0), n.tensor(1)
    _float(n, a, b)
    tri = _triangle(n, a, bool(n.kwargs.get("upper", n.arg(2, "upper"))),
                    bool(n.kwargs.get("unitriangular", False)))
    return solve(n, tri, b, bool(n.kwargs.get("left", True)))


@rule("aten.triangular_solve.default")
def triangular_solve(n: NodeCtx) -> Value:
    """(X, A's clone) with op(A) X = B, op(A) = A or A^T, A upper or lower (unit) triangular."""
    b, a = n.tensor(0), n.tensor(1)
    _float(n, a, b)
    tri = _triangle(n, a, bool(n.arg(2, "upper", True)), bool(n.arg(4, "unitriangular", False)))
    tri = _mt(n, tri) if n.arg(3, "transpose", False) else tri
    return solve(n, tri, b), a


# ---- LU factors with known pivots ------------------------------------------------------------

def _permutations(n: NodeCtx, pivots: str | Const, rows: int) -> np.ndarray:
    """P of A = P L U from LAPACK's 1-based pivots (row k swapped with row pivots[k] - 1, in
    order), per batch: pivots known at import (a buffer, a constant), else refused."""
    if not isinstance(pivots, Const):
        raise Unsupported(f"{n.op} (pivots computed in the step)")
    piv = np.asarray(pivots.value(), dtype=np.int64)
    out = np.empty((*piv.shape[:-1], rows, rows))
    for idx in np.ndindex(piv.shape[:-1]):
        order = np.arange(rows)
        for k, p in enumerate(piv[idx]):
            if not 1 <= p <= rows:
                raise n.fail(f"pivot {int(p)} out of range [1, {rows}]")
            order[[k, p - 1]] = order[[p - 1, k]]
        out[idx] = np.eye(rows)[order].T
    return out


def _factors(n: NodeCtx, lu: str | Const) -> tuple[str, str]:
    """L (unit lower, (..., m, k)) and U (upper, (..., k, n)) packed in LU, k = min(m, n)."""
    rows, cols = n.shape(lu)[-2:]
    k = min(rows, cols)
    parts = []
    for shape, axis, lower in (((rows, k), -1, True), ((k, cols), -2, False)):
        part = lu if shape == (rows, cols) else \
            n.emit1("Slice", [lu], {"starts": [0], "ends": [k], "axes": [axis]})
        keep = np.tril(np.ones(shape, bool), -1) if lower else np.triu(np.ones(shape, bool))
        fill = np.eye(*shape) if lower else np.zeros(shape)
        parts.append(n.emit1("Where", [n.const(keep, "bool"), part,
                                       n.const(fill, n.dtype(lu))]))
    return parts[0], parts[1]


@rule("aten.lu_unpack.default")
def lu_unpack(n: NodeCtx) -> Value:
    lu, pivots = n.tensor(0), n.tensor(1)
    _float(n, lu)
    if not (n.arg(2, "unpack_data", True) and n.arg(3, "unpack_pivots", True)):
        raise Unsupported(f"{n.op} (unpack_data or unpack_pivots False)")
    low, up = _factors(n, lu)
    return n.const(_permutations(n, pivots, n.shape(lu)[-2]), n.dtype(lu)), low, up


@rule("aten.linalg_lu_solve.default")
def lu_solve(n: NodeCtx) -> Value:
    """X from A = P L U: two triangular solves and a permutation (a GEMM by the constant P),
    as torch's: A X = B, A^T X = B (adjoint), X A = B or X A^T = B (left False) by
    transposing."""
    lu, pivots, b = n.tensor(0), n.tensor(1), n.tensor(2)
    _float(n, lu, b)
    left, adjoint = bool(n.kwargs.get("left", True)), bool(n.kwargs.get("adjoint", False))
    if n.shape(lu)[-1] != n.shape(lu)[-2]:
        raise n.fail(f"LU of shape {list(n.shape(lu))} is not square")
    p = n.const(_permutations(n, pivots, n.shape(lu)[-1]), n.dtype(lu))
    low, up = _factors(n, lu)
    # X A = B is A^T X^T = B^T: a left solve of B^T with the adjoint flipped
    rhs, transpose = (b, adjoint) if left else (_mt(n, b), not adjoint)
    if not transpose:  # X = U \ (L \ (P^T B))
        x = solve(n, low, n.emit1("MatMul", [p, rhs], {"transpose_a": True,
                                                       "transpose_b": False}))
        x = solve(n, up, x)
    else:  # A^T = U^T L^T P^T: X = P (L^T \ (U^T \ B))
        x = solve(n, _mt(n, low), solve(n, _mt(n, up), rhs))
        x = n.emit1("MatMul", [p, x])
    return x if left else _mt(n, x)


@rule("aten._linalg_svd.default")
def svd(n: NodeCtx) -> Value:
    """(U, S, Vh): S only. The singular vectors' signs are LAPACK's choice, which the planner's
    MatrixSvd does not follow, so they are not offered (an error when read): svdvals, the
    nuclear and 2-norms, cond and matrix_rank import."""
    x = n.tensor(0)
    _float(n, x)
    _, values, _ = n.emit("MatrixSvd", [x], n_out=3)
    return UNAVAILABLE, values, UNAVAILABLE
