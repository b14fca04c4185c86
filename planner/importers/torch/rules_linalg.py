"""torch.linalg's solvers and factorizations on planner/ops/linalg.py's MatrixInverse,
MatrixSolve, MatrixSlogdet, Cholesky, MatrixSvd, MatrixQr, MatrixEigh, MatrixEig, MatrixGeqrf,
MatrixExp, MatrixLdlFactor and MatrixLdlSolve:

    linalg_inv(_ex), _linalg_solve_ex   MatrixInverse, MatrixSolve (a vector B, left=False and
                                        broadcast batches reshaped, transposed, expanded)
    _linalg_det, _linalg_slogdet        MatrixSlogdet (det = sign * exp(log|det|))
    cholesky, linalg_cholesky_ex        Cholesky (upper: its transpose)
    cholesky_solve, cholesky_inverse    MatrixSolve, MatrixInverse of L L^T (U^T U)
    linalg_solve_triangular,            MatrixSolve of A's triangle (a Where with constant
    triangular_solve                    masks, so that A's gradient stays in that triangle)
    linalg_lu_factor_ex, linalg_lu      MatrixLuFactor (pivot=True); P: LuPermutation
    lu_unpack, linalg_lu_solve          P a constant where the pivots are known at import, else
                                        LuPermutation; L and U LU's triangles, X two triangular
                                        solves and a GEMM by P
    _linalg_svd                         MatrixSvd's singular values (svdvals, the nuclear and
                                        2-norms, cond, matrix_rank); U and Vh are not offered
    linalg_pinv                         MatrixSvd, Vh^T diag(1 / S above the tolerance) U^T
    linalg_qr                           MatrixQr (tall or square; modes reduced and r)
    _linalg_eigh                        MatrixEigh (eigh, eigvalsh; UPLO L or U)
    linalg_eig, linalg_eigvals          MatrixEig of a real matrix: L complex (planes), V only
                                        to its modulus (its phases are not torch's)
    geqrf                               MatrixGeqrf (no gradient, as torch's)
    linalg_householder_product, ormqr   the compact WY form I - V T V^T of the reflectors:
                                        GEMMs and one triangular MatrixSolve
    linalg_matrix_exp                   MatrixExp
    linalg_ldl_factor_ex, ldl_solve     MatrixLdlFactor, MatrixLdlSolve (forward: torch has no
                                        gradient of either)

The `_ex` forms' info is the ops' own (attr info); _linalg_solve_ex's LU and pivots are not
computed (an error only when read). torch's error checks of these ops, which torch.export
threads on an effect token, are dropped when the program is recorded
(planner/importers/torch/record.py), which marks the call they check: its op gets attr `check`,
torch's name of the op, and raises torch's error where a matrix does not factor (as do
linalg.inv and cholesky, which torch checks itself).
"""

from __future__ import annotations

import numpy as np

from planner.importers.kit import Const, Unsupported
from planner.importers.torch.context import UNAVAILABLE, NodeCtx, Value, _in, rule
from planner.importers.torch.rules_complex import Cx, Phased, cx_rule
from planner.importers.torch.rules_products import require_floats, reshape_to


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
            v = reshape_to(n, v, (1,) * (len(batch) + 2 - len(s)) + s)
            v = n.emit1("Expand", [v], {"shape": [*batch, *s[-2:]]})
        out.append(v)
    return out[0], out[1]


def _mt(n: NodeCtx, x: str | Const) -> str:
    """The matrices of x transposed."""
    rank = len(n.shape(x))
    return n.emit1("Transpose", [x], {"perm": [*range(rank - 2), rank - 1, rank - 2]})


def _check(n: NodeCtx) -> dict[str, str]:
    """attr `check` where torch checks the call's info (record.py's Call.checked): the op then
    raises torch's error for a matrix that does not factor."""
    checked = getattr(n.node, "checked", "")
    return {"check": checked} if checked else {}


def solve(n: NodeCtx, a: str | Const, b: str | Const, left: bool = True,
          info: list[str] | None = None, check: dict[str, str] | None = None) -> str:
    """X with A X = B (left) or X A = B; B a matrix or, as torch.linalg.solve reads it, a
    vector (rank 1, or A's batch shape + [n]). `info`, when given, gets the solve's info
    output (torch's `_ex` forms); `check`: _check's attrs."""
    require_floats(n, a, b)
    sa, sb = n.shape(a), n.shape(b)
    vector = len(sb) == 1 or (len(sb) == len(sa) - 1 and sb == sa[:-1])
    if vector:
        b = reshape_to(n, b, (*sb, 1) if left else (*sb[:-1], 1, sb[-1]))
    a, b = _batched(n, a, b)
    outs = n.emit("MatrixSolve", [a, b if left else _mt(n, b)],
                  {"transpose": not left, **({"info": True} if info is not None else {}),
                   **(check or {})},
                  n_out=1 + (info is not None))
    if info is not None:
        info.append(outs[1])
    x = outs[0] if left else _mt(n, outs[0])
    if not vector:
        return x
    sx = n.shape(x)
    return reshape_to(n, x, sx[:-1] if left else (*sx[:-2], sx[-1]))


@rule("aten._linalg_solve_ex.default")
def linalg_solve(n: NodeCtx) -> Value:
    """(X, LU, pivots, info): the LU factors are not computed (an error only when read)."""
    info: list[str] = []
    x = solve(n, n.tensor(0), n.tensor(1), bool(n.arg(2, "left", True)), info, _check(n))
    return x, UNAVAILABLE, UNAVAILABLE, info[0]


@rule("aten.linalg_inv_ex.default", "aten.linalg_inv.default")
def inverse(n: NodeCtx) -> Value:
    x = n.tensor(0)
    require_floats(n, x)
    if n.op == "aten.linalg_inv.default":
        return n.emit1("MatrixInverse", [x], {"check": "linalg.inv"})
    return tuple(n.emit("MatrixInverse", [x], {"info": True, **_check(n)}, n_out=2))


@rule("aten._linalg_slogdet.default", "aten._linalg_det.default")
def slogdet(n: NodeCtx) -> Value:
    """det = sign * exp(log|det|): torch's gradient of det at a non-singular matrix, the same
    det A^-T."""
    x = n.tensor(0)
    require_floats(n, x)
    sign, logabs = n.emit("MatrixSlogdet", [x], n_out=2)
    if n.op == "aten._linalg_slogdet.default":
        return sign, logabs, UNAVAILABLE, UNAVAILABLE
    return n.emit1("Mul", [sign, n.emit1("Exp", [logabs])]), UNAVAILABLE, UNAVAILABLE


@rule("aten.linalg_cholesky_ex.default", "aten.cholesky.default")
def cholesky(n: NodeCtx) -> Value:
    x = n.tensor(0)
    require_floats(n, x)
    ex = n.op == "aten.linalg_cholesky_ex.default"
    attrs = {"info": True, **_check(n)} if ex else {"check": "cholesky"}  # torch.cholesky's
    outs = n.emit("Cholesky", [x], attrs, n_out=1 + ex)
    y = _mt(n, outs[0]) if n.arg(1, "upper", False) else outs[0]
    return (y, outs[1]) if ex else y


def _gram(n: NodeCtx, factor: str | Const, upper: bool) -> str:
    """A = L L^T of a Cholesky factor (U^T U of an upper one)."""
    require_floats(n, factor)
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
    require_floats(n, a, b)
    tri = _triangle(n, a, bool(n.kwargs.get("upper", n.arg(2, "upper"))),
                    bool(n.kwargs.get("unitriangular", False)))
    return solve(n, tri, b, bool(n.kwargs.get("left", True)))


@rule("aten.triangular_solve.default")
def triangular_solve(n: NodeCtx) -> Value:
    """(X, A's clone) with op(A) X = B, op(A) = A or A^T, A upper or lower (unit) triangular."""
    b, a = n.tensor(0), n.tensor(1)
    require_floats(n, a, b)
    tri = _triangle(n, a, bool(n.arg(2, "upper", True)), bool(n.arg(4, "unitriangular", False)))
    tri = _mt(n, tri) if n.arg(3, "transpose", False) else tri
    return solve(n, tri, b), a


# ---- LU ----------------------------------------------------------------------------------------

def _lu(n: NodeCtx, x: str | Const, ex: bool) -> list[str]:
    """LU and pivots (and info, `ex`) of torch's partial-pivoting LU."""
    require_floats(n, x)
    if not n.kwargs.get("pivot", n.arg(1, "pivot", True)):
        raise Unsupported(f"{n.op} (pivot=False)")
    return n.emit("MatrixLuFactor", [x], {"info": True, **_check(n)} if ex else {},
                  n_out=3 if ex else 2)


@rule("aten.linalg_lu_factor_ex.default")
def lu_factor(n: NodeCtx) -> Value:
    """(LU, pivots, info) of torch.linalg.lu_factor(_ex) and torch.lu."""
    return tuple(_lu(n, n.tensor(0), True))


@rule("aten.linalg_lu.default")
def lu(n: NodeCtx) -> Value:
    """(P, L, U) of torch.linalg.lu: the factors unpacked (as lu_unpack) from MatrixLuFactor."""
    x = n.tensor(0)
    packed, pivots = _lu(n, x, False)
    low, up = _factors(n, packed)
    return _permutation(n, pivots, n.shape(x)[-2], n.dtype(x)), low, up


# ---- LU factors and solves -------------------------------------------------------------------

def _permutation(n: NodeCtx, pivots: str | Const, rows: int, dtype: str) -> str | Const:
    """P of A = P L U from LAPACK's 1-based pivots (row k swapped with row pivots[k] - 1, in
    order): a constant where the pivots are known at import (a buffer), else LuPermutation of
    the pivots the step computes (int32, lu_factor's)."""
    if isinstance(pivots, Const):
        return n.const(_permutations(n, pivots, rows), dtype)
    if n.dtype(pivots) != "int32":
        pivots = n.emit1("Cast", [pivots], {"to": "int32"})
    return n.emit1("LuPermutation", [pivots], {"dtype": dtype, "rows": rows})


def _permutations(n: NodeCtx, pivots: Const, rows: int) -> np.ndarray:
    """_permutation's constant P, per batch."""
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
    require_floats(n, lu)
    if not (n.arg(2, "unpack_data", True) and n.arg(3, "unpack_pivots", True)):
        raise Unsupported(f"{n.op} (unpack_data or unpack_pivots False)")
    low, up = _factors(n, lu)
    return _permutation(n, pivots, n.shape(lu)[-2], n.dtype(lu)), low, up


@rule("aten.linalg_lu_solve.default")
def lu_solve(n: NodeCtx) -> Value:
    """X from A = P L U: two triangular solves and a permutation (a GEMM by the constant P),
    as torch's: A X = B, A^T X = B (adjoint), X A = B or X A^T = B (left False) by
    transposing."""
    lu, pivots, b = n.tensor(0), n.tensor(1), n.tensor(2)
    require_floats(n, lu, b)
    left, adjoint = bool(n.kwargs.get("left", True)), bool(n.kwargs.get("adjoint", False))
    if n.shape(lu)[-1] != n.shape(lu)[-2]:
        raise n.fail(f"LU of shape {list(n.shape(lu))} is not square")
    p = _permutation(n, pivots, n.shape(lu)[-1], n.dtype(lu))
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
    require_floats(n, x)
    _, values, _ = n.emit("MatrixSvd", [x], n_out=3)
    why = "their signs are LAPACK's choice (torch.linalg.svdvals imports)"
    return (n.unavailable("U (the left singular vectors)", why), values,
            n.unavailable("Vh (the right singular vectors, transposed)", why))


def _scalar(n: NodeCtx, v: object, name: str) -> float | None:
    """A tolerance given as a number or a constant tensor (None when absent)."""
    if v is None or isinstance(v, (int, float)):
        return v if v is None else float(v)
    if isinstance(v, Const) and v.value().size == 1:
        return float(v.value().reshape(()))
    raise Unsupported(f"{n.op} ({name} computed in the step)")


@rule("aten.linalg_pinv.atol_rtol_tensor", "aten.linalg_pinv.atol_rtol_float")
def pinv(n: NodeCtx) -> Value:
    """torch's linalg_pinv: Vh^T diag(S+) U^T with S+ = 1 / S where S > max(atol, rtol S_max),
    else 0 (rtol: eps * max(m, n) when neither is given, 0 when only atol is); hermitian, as
    torch: V diag(L+) V^T of the eigendecomposition of A's lower triangle, L+ = 1 / L where
    |L| passes that test. Either with torch's gradient (pinv_backward, through
    _pinv_differential), not the SVD's or eigh's."""
    x = n.tensor(0)
    require_floats(n, x)
    atol = _scalar(n, n.kwargs.get("atol", n.arg(1, "atol")), "atol")
    rtol = _scalar(n, n.kwargs.get("rtol", n.arg(2, "rtol")), "rtol")
    *batch, m, cols = n.shape(x)
    if rtol is None:
        rtol = float(np.finfo(n.dtype(x)).eps) * max(m, cols) if atol is None else 0.0
    if n.kwargs.get("hermitian", n.arg(3, "hermitian", False)):
        values, v = n.emit("MatrixEigh", [x], {"upper": False}, n_out=2)
        size = n.emit1("Abs", [values])
        left, right = v, v
    else:
        u, values, vh = n.emit("MatrixSvd", [x], n_out=3)
        size, left, right = values, _mt(n, vh), u
    inverse = _pseudo_reciprocal(n, values, size, atol, rtol)
    k = min(m, cols)
    scaled = n.emit1("Mul", [left, reshape_to(n, inverse, (*batch, 1, k))])
    p = n.emit1("StopGradient", [n.emit1("MatMul", [scaled, right], {"transpose_a": False,
                                                                     "transpose_b": True})])
    return n.emit1("Add", [p, _pinv_differential(n, x, p)])


def _pseudo_reciprocal(n: NodeCtx, values: str, size: str, atol: float | None,
                       rtol: float) -> str:
    """1 / values where size (S, or |L|) is above max(atol, rtol * its largest), else 0."""
    top = n.emit1("ReduceMax", [size], {"axes": [-1], "keepdims": True}) if n.shape(size)[-1] \
        else size
    tol = n.emit1("Scale", [top], {"factor": rtol})
    if atol:
        tol = n.emit1("Max", [tol, n.const(atol, n.dtype(size))])
    kept = n.emit1("Greater", [size, tol])
    return n.emit1("Where", [kept, n.emit1("Reciprocal", [values]), n.const(0.0, n.dtype(size))])


def _pinv_differential(n: NodeCtx, x: str | Const, p: str) -> str:
    """L(A) - L(A) held (0, exactly), whose gradient is pinv's, torch's pinv_backward: L is
    the differential of P = pinv(A) at the held A0 and P,

        L(A) = -P A P + P P^T A^T (I - A0 P) + (I - P A0) A^T P^T P,

    linear in A. Through the SVD the gradient would divide by gaps between singular values,
    undefined where A is rank-deficient, where pinv's own derivative (constant rank) is not."""
    def mm(a: str | Const, b: str | Const, ta: bool = False, tb: bool = False) -> str:
        return n.emit1("MatMul", [a, b], {"transpose_a": ta, "transpose_b": tb})

    held = n.emit1("StopGradient", [x])
    pp = mm(p, p, tb=True)      # P P^T       (n x n)
    ap = mm(held, p)            # A0 P        (m x m)
    ptp = mm(p, p, ta=True)     # P^T P       (m x m)
    pa = mm(p, held)            # P A0        (n x n)
    xt = _mt(n, x)
    terms = [n.emit1("Neg", [mm(mm(p, x), p)]), mm(pp, xt),
             n.emit1("Neg", [mm(mm(pp, xt), ap)]), mm(xt, ptp),
             n.emit1("Neg", [mm(mm(pa, xt), ptp)])]
    total = n.emit1("AddN", terms)
    return n.emit1("Sub", [total, n.emit1("StopGradient", [total])])


@rule("aten.linalg_qr.default")
def qr(n: NodeCtx) -> Value:
    """The reduced QR of tall or square matrices (mode 'reduced'); mode 'r' gives R alone."""
    x = n.tensor(0)
    require_floats(n, x)
    mode = n.arg(1, "mode", "reduced")
    rows, cols = n.shape(x)[-2:]
    if mode not in ("reduced", "r") or rows < cols:
        raise Unsupported(f"{n.op} (mode {mode!r} of a {rows} x {cols} matrix)" if mode not in
                          ("reduced", "r") else f"{n.op} (a wide {rows} x {cols} matrix)")
    q, r = n.emit("MatrixQr", [x], n_out=2)
    return (UNAVAILABLE if mode == "r" else q), r


@rule("aten._linalg_eigh.default")
def eigh(n: NodeCtx) -> Value:
    """(L, V) of torch.linalg.eigh and eigvalsh (compute_v False: V is not offered), on
    MatrixEigh of the triangle UPLO names. Each eigenvector is signed so that its entry of
    largest magnitude is positive; torch's sign is LAPACK's choice, which torch documents as
    arbitrary (a loss that reads V through V diag(f(L)) V^T, as whitening does, is the same)."""
    x = n.tensor(0)
    require_floats(n, x)
    uplo = str(n.arg(1, "UPLO", "L")).upper()
    if uplo not in ("L", "U"):
        raise n.fail(f"UPLO must be 'L' or 'U', got {uplo!r}")
    values, vectors = n.emit("MatrixEigh", [x], {"upper": uplo == "U"}, n_out=2)
    return values, vectors if n.arg(2, "compute_v", True) else UNAVAILABLE


# ---- eig, eigvals: complex results of a real matrix ----------------------------------------------

_PHASES = ("whose phases are LAPACK's choice, not torch's (its MKL signs a complex eigenvector's "
           "largest entry otherwise than OpenBLAS): only their moduli (.abs()) and the "
           "eigenvalues are offered")


def _eig(n: NodeCtx) -> tuple[str, str]:
    """MatrixEig's planes (L, V) of the real matrix argument 0; a complex one is refused."""
    if isinstance(n.arg(0, "self"), Cx):
        raise Unsupported(f"{n.op} (of a complex matrix)")
    x = n.tensor(0)
    require_floats(n, x)
    values, vectors = n.emit("MatrixEig", [x], n_out=2)
    return values, vectors


@cx_rule("aten.linalg_eig.default")
def eig(n: NodeCtx) -> Value:
    """(L, V) of torch.linalg.eig, complex: MatrixEig's planes. L in geev's order, torch's
    float64 one (planner/ops/linalg_eig.py); V Phased: its phases are not torch's, so only a
    reader that does not see them (its modulus) may read it, and the gradient that reaches
    MatrixEig through it is one that does not depend on them (torch's, whose phase check
    then passes)."""
    values, vectors = _eig(n)
    why = (f"V (the eigenvectors) of node {n.label!r}{_in(n.module)} ({n.op}), {_PHASES}")
    return Cx(values), Phased(vectors, why)


@cx_rule("aten.linalg_eigvals.default", "aten._linalg_eigvals.default")
def eigvals(n: NodeCtx) -> Value:
    """torch.linalg.eigvals: MatrixEig's eigenvalues (its V computed too: the gradient reads
    it, dA = Re(V^-H diag(dL) V^H), which no choice of V's phases changes)."""
    return Cx(_eig(n)[0])


# ---- Householder products: householder_product, ormqr (geqrf's Q) -----------------------------

def _reflectors(n: NodeCtx, v: str | Const, k: int) -> str:
    """V's first k columns as LAPACK reads them: the Householder vectors below the diagonal,
    1 on it, 0 above (so that V's gradient stays where torch's does)."""
    rows = n.shape(v)[-2]
    if n.shape(v)[-1] != k:
        v = n.emit1("Slice", [v], {"starts": [0], "ends": [k], "axes": [-1]})
    keep = np.tril(np.ones((rows, k), bool), -1)
    return n.emit1("Where", [n.const(keep, "bool"), v, n.const(np.eye(rows, k), n.dtype(v))])


def _wy(n: NodeCtx, v: str, tau: str | Const, x: str, transpose: bool) -> str:
    """T X (T^T X with `transpose`) for H_1 ... H_k = I - V T V^T, H_j = I - tau_j v_j v_j^T
    (the compact WY form LAPACK's larft builds): T = D (I + U D)^-1 with D = diag(tau), U V^T
    V's strict upper triangle, a unit upper triangle, so its solve is a back substitution (no
    pivot moves) and tau_j = 0 (H_j = I) needs no care."""
    *batch, k = n.shape(tau)
    strict = np.triu(np.ones((k, k), bool), 1)
    gram = n.emit1("MatMul", [v, v], {"transpose_a": True, "transpose_b": False})
    scaled = n.emit1("Mul", [gram, reshape_to(n, tau, (*batch, 1, k))])  # U D
    triangle = n.emit1("Where", [n.const(strict, "bool"), scaled, n.const(np.eye(k), n.dtype(v))])
    column = reshape_to(n, tau, (*batch, k, 1))
    if transpose:  # T^T X = (I + U D)^-T D X
        return n.emit1("MatrixSolve", [triangle, n.emit1("Mul", [column, x])],
                       {"transpose": True})
    return n.emit1("Mul", [column, n.emit1("MatrixSolve", [triangle, x])])


@rule("aten.linalg_householder_product.default")
def householder_product(n: NodeCtx) -> Value:
    """Q = H_1 ... H_k's first n columns (LAPACK's orgqr) in the compact WY form, Q = E - V T
    V_1^T with E I's first n columns and V_1 V's first n rows: GEMMs and one triangular solve,
    whose gradients are torch's (householder_product_backward's) for V below the diagonal and
    tau."""
    v, tau = n.tensor(0), n.tensor(1)
    require_floats(n, v, tau)
    *batch, rows, cols = n.shape(v)
    k = n.shape(tau)[-1]
    if not rows >= cols >= k or tuple(n.shape(tau)[:-1]) != tuple(batch):
        raise n.fail(f"input {list(n.shape(v))} and tau {list(n.shape(tau))}: torch needs m >= "
                     f"n >= k and one batch shape")
    eye = n.const(np.eye(rows, cols), n.dtype(v))
    if k == 0:
        return n.emit1("Expand", [eye], {"shape": [*batch, rows, cols]})
    vk = _reflectors(n, v, k)
    top = vk if rows == cols else n.emit1("Slice", [vk], {"starts": [0], "ends": [cols],
                                                          "axes": [-2]})
    z = _wy(n, vk, tau, _mt(n, top), False)
    return n.emit1("Sub", [eye, n.emit1("MatMul", [vk, z])])


@rule("aten.ormqr.default")
def ormqr(n: NodeCtx) -> Value:
    """Q C, Q^T C (transpose), C Q or C Q^T (left False) with Q = H_1 ... H_k (m x m) of
    geqrf's reflectors: C - V (T or T^T) V^T C, or C - C V (T or T^T) V^T, in the compact WY
    form (_wy)."""
    a, tau, c = n.tensor(0), n.tensor(1), n.tensor(2)
    require_floats(n, a, tau, c)
    left, transpose = bool(n.arg(3, "left", True)), bool(n.arg(4, "transpose", False))
    k = n.shape(tau)[-1]
    if k > min(n.shape(a)[-2:]) or n.shape(c)[-2 if left else -1] != n.shape(a)[-2]:
        raise n.fail(f"input {list(n.shape(a))}, tau {list(n.shape(tau))} and other "
                     f"{list(n.shape(c))} do not fit")
    if k == 0:  # Q = I
        return c
    v = _reflectors(n, a, k)
    if left:  # C - V T' (V^T C)
        w = n.emit1("MatMul", [v, c], {"transpose_a": True, "transpose_b": False})
        return n.emit1("Sub", [c, n.emit1("MatMul", [v, _wy(n, v, tau, w, transpose)])])
    # C - (C V) T' V^T = C - (V T'^T (C V)^T)^T
    w = n.emit1("MatMul", [v, c], {"transpose_a": True, "transpose_b": True})
    return n.emit1("Sub", [c, _mt(n, n.emit1("MatMul", [v, _wy(n, v, tau, w, not transpose)]))])


@rule("aten.geqrf.default")
def geqrf(n: NodeCtx) -> Value:
    """(a, tau) of torch.geqrf: MatrixGeqrf (LAPACK geqrf); torch defines no gradient."""
    x = n.tensor(0)
    require_floats(n, x)
    return tuple(n.emit("MatrixGeqrf", [x], n_out=2))


@rule("aten.linalg_matrix_exp.default")
def matrix_exp(n: NodeCtx) -> Value:
    x = n.tensor(0)
    require_floats(n, x)
    return n.emit1("MatrixExp", [x])


# ---- LDL -------------------------------------------------------------------------------------

@rule("aten.linalg_ldl_factor_ex.default")
def ldl_factor(n: NodeCtx) -> Value:
    """(LD, pivots, info) of torch.linalg.ldl_factor(_ex): MatrixLdlFactor (LAPACK sytrf of
    the lower triangle; `hermitian` is the same for real matrices). torch defines no
    gradient."""
    x = n.tensor(0)
    require_floats(n, x)
    return tuple(n.emit("MatrixLdlFactor", [x], {"info": True, **_check(n)}, n_out=3))


@rule("aten.linalg_ldl_solve.default")
def ldl_solve(n: NodeCtx) -> Value:
    """X with A X = B from ldl_factor's LD and pivots: MatrixLdlSolve (LAPACK sytrs), B with
    LD's batch axes (torch's broadcasting of them is not offered). No gradient, as torch's."""
    ld, pivots, b = n.tensor(0), n.tensor(1), n.tensor(2)
    require_floats(n, ld, b)
    if n.shape(b)[:-1] != n.shape(ld)[:-1]:
        raise Unsupported(f"{n.op} (B {list(n.shape(b))} of other batch axes than LD "
                          f"{list(n.shape(ld))})")
    if n.dtype(pivots) != "int32":
        pivots = n.emit1("Cast", [pivots], {"to": "int32"})
    return n.emit1("MatrixLdlSolve", [ld, pivots, b])
