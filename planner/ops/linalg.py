"""Batched small-matrix linear algebra: the square matrices of the last two axes, each solved on
its own (torch.linalg's inv, solve, slogdet, cholesky, eigh, svd, qr, matrix_exp, torch's
geqrf and what decomposes onto them).

    MatrixInverse  [A (..., n, n)] -> A^-1
    MatrixSolve    [A (..., n, n), B (..., n, k)] -> X with A X = B (transpose: A^T X = B);
                   A and B share their batch axes
    MatrixSlogdet  [A (..., n, n)] -> sign (...), log|det A| (...)
    MatrixSvd      [A (..., m, n)] -> U (..., m, k), S (..., k) descending, Vh (..., k, n),
                   k = min(m, n): the thin SVD, each (u_j, vh_j) signed so that u_j's entry
                   of largest magnitude (the first such) is positive (LAPACK's sign is its
                   own choice, torch's LAPACK's)
    Cholesky       [A (..., n, n)] -> L, lower triangular with L L^T = A (A symmetric positive
                   definite; only A's lower triangle is read, as LAPACK's potrf)
    MatrixQr       [A (..., m, n), m >= n] -> Q (..., m, n), R (..., n, n): the reduced QR by
                   Householder reflections signed as LAPACK's (torch's, numpy's)
    MatrixGeqrf    [A (..., m, n)] -> packed (..., m, n), tau (..., k): LAPACK geqrf's R and
                   Householder vectors in one matrix, and their scales (torch.geqrf; no
                   gradient, as torch's). CPU only
    MatrixExp      [A (..., n, n)] -> exp(A) by scaling and squaring (Higham 2005's Padé
                   approximants), in float64 in the kernel. CPU only
    MatrixLuFactor [A (..., m, n)] -> LU (..., m, n), pivots (..., k) int32, k = min(m, n):
                   getrf's partial pivoting LU, L's strict lower part and U packed, 1-based
    LuPermutation  [pivots (..., k) int32] -> P (..., m, m) with A = P L U (attr rows: m).
                   CPU only, as MatrixLuFactor
    MatrixEigh     [A (..., n, n)] -> L (..., n) ascending, V (..., n, n): eigh of A's lower
                   (attr upper: upper) triangle; each eigenvector signed so that its entry of
                   largest magnitude (the first such) is positive (torch's sign is LAPACK's
                   arbitrary choice). CPU only.

(MatrixEig, a general matrix's complex eigenvalues and eigenvectors as planes, is
planner/ops/linalg_eig.py.)

MatrixInverse, MatrixSolve, MatrixLuFactor and Cholesky with attr `info` also give torch's
`_ex` forms' info (int32, per matrix): 0, or LAPACK's info where the factorization failed: the
1-based index of LU's first zero pivot, or of Cholesky's first leading minor that is not
positive definite. With attr `check` (torch's name of the op that raises: `linalg.cholesky`,
`linalg.inv`, `torch.linalg.solve`, `torch.linalg.lu_factor`) such a matrix is torch's error,
word for word: an OpError here, a StepError naming the node in the CPU executor (the CUDA
executor gives the values below).

The CPU kernels call LAPACK in float32 (templates/cpu/runtime/kernels/lapack.cpp: getrf,
getrs, getri, potrf, syevd, gesdd, geqrf, orgqr, one matrix per thread), as torch does
(MatrixExp: float64 dgemm, dgetrf, dgetrs, rounded once); the CUDA kernels factor each
matrix in float64 (templates/common/small_linalg.h) and round once, but MatrixEigh's, which is
cuSOLVER's syevBatched in float32 (kernels/eigh.cu; compiled, not yet run on a GPU: NaN for a
matrix whose info is not 0). The references factor
in float64. A matrix that does not factor is no error
without `check`: a singular matrix's inverse and solve are NaN on the CPU (inf or NaN from the
zero pivot on CUDA), its slogdet sign 0 and log|det| -inf (torch's); Cholesky gives NaN from
the first failing column on.

Gradients (derivatives.yaml's formulas, in the graph's own MatMul and these ops):

    MatrixInverse  dA = -Y^T dY Y^T
    MatrixSolve    dB = solve(A, dX, transpose flipped); dA = -dB X^T (transpose: -X dB^T)
    MatrixSlogdet  dA = dlogabs A^-T (sign has none)
    MatrixQr       dA = (dQ + Q copyltu(R dR^T - dQ^T Q)) R^-T (linalg_qr_backward, m >= n)
    MatrixSvd      dA = U (skew(U^T dU) S / E + S skew(V^T dV) / E + diag(dS)) Vh, and the
                   parts of dU, dVh outside U's, V's span (svd_backward; E_jk = S_k^2 - S_j^2)
    Cholesky       dA = L^-T sym(tril(L^T dL)) L^-1, sym(M) = (M + strict-lower(M)^T) / 2
    MatrixLuFactor linalg_lu_backward: m <= n, dA = P L^-T [tril(L^T dL - triu(dU) U^T, -1)
                   U1^-T + triu(dU1), dU2]; m > n, dA = P [L1^-T triu(dU U^T - L^T tril(dL,
                   -1)) + tril(dL1, -1); dL2] U^-T (dL, dU: dLU's first k columns, rows)
    MatrixEigh     dA = V (skew(V^T dV) / 2 / E + diag(dL)) V^T, E_ij = L_j - L_i
                   (linalg_eig_backward: torch's gauge, no rotation within an eigenspace)
    MatrixExp      dA = the upper-right block of exp([[A^T, dY], [0, A^T]]) (the Fréchet
                   derivative's adjoint, torch's differential_analytic_matrix_function)

FLOPs: n^3 per matrix for the factorization (2/3 n^3 LU, 1/3 n^3 Cholesky, as multiply-adds
of 2), plus 2 n^2 per right-hand side column of a solve (inverse: n columns); eigh 18 n^3,
exp 20 n^3.

Example:
    >>> import numpy as np
    >>> from planner.ops import get_op
    >>> a = np.array([[4.0, 2.0], [2.0, 3.0]])
    >>> (get_op("MatrixInverse").reference([a], {})[0] @ a).round(12)
    array([[1., 0.],
           [0., 1.]])
    >>> [round(float(v), 6) for v in get_op("MatrixSlogdet").reference([a], {})]
    [1.0, 2.079442]
    >>> get_op("Cholesky").reference([a], {})[0].round(4)
    array([[2.    , 0.    ],
           [1.    , 1.4142]])
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

import numpy as np

from planner.ops.base import (
    Attr,
    Attrs,
    GradBuilder,
    OpDef,
    OpError,
    TensorType,
    register,
    require_float,
)

if TYPE_CHECKING:
    from planner.ir.graph import Node


def _square(op: str, a: TensorType) -> int:
    require_float(op, a, "A")
    if a.rank < 2 or a.shape[-1] != a.shape[-2]:
        raise OpError(f"{op}: A must be square matrices (..., n, n), got shape {list(a.shape)}")
    return a.shape[-1]


def _batch(t: TensorType) -> int:
    return int(np.prod(t.shape[:-2], dtype=np.int64))


def _factor_flops(ins: list[TensorType], outs: list[TensorType], a: Attrs) -> int:
    n = ins[0].shape[-1]
    columns = ins[1].shape[-1] if len(ins) > 1 else n if outs[0].shape == ins[0].shape else 0
    return _batch(ins[0]) * (n ** 3 + 2 * n * n * columns)


def _wide(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


def _lapack_scratch(op: str):
    """The CPU kernel's (templates/cpu/runtime/kernels/lapack.cpp, `lapack_floats`): a float32
    workspace per thread: the matrix, a solve's right-hand sides, the int32 pivots and what the
    LAPACK routine asks for (ssyevd's work and iwork for eigenvectors, sgesdd's, geqrf's and
    orgqr's blocked work); MatrixExp's float64 Padé terms, two floats each."""
    def scratch(ins: list[TensorType], outs: list[TensorType], a: Attrs, threads: int) -> int:
        m, n = ins[0].shape[-2:] if ins[0].rank >= 2 else (0, 0)
        k = min(m, n)
        svd_work = 4 * k * k + 7 * k + max(m, n) + 32 * (m + n)
        floats = {"MatrixSolve": n * n + n * (ins[-1].shape[-1]) + n,
                  "MatrixInverse": n * n + 2 * n, "MatrixSlogdet": n * n + n,
                  "Cholesky": n * n, "MatrixEigh": 3 * n * n + 12 * n + 4,
                  "MatrixLuFactor": m * n + k, "MatrixSvd": m * n + svd_work + 8 * k,
                  "MatrixQr": m * n + n + 64 * max(n, 1),
                  "MatrixGeqrf": m * n + n + 64 * max(n, 1),
                  "MatrixExp": 16 * n * n + 2 * n,
                  "MatrixLdlFactor": n * n + n + 64 * max(n, 1),
                  "MatrixLdlSolve": n * n + n * ins[-1].shape[-1] + n}[op]
        return threads * 4 * floats
    return scratch


def _gpu_scratch(ins: list[TensorType], outs: list[TensorType], a: Attrs) -> int:
    """The CUDA kernel's (templates/common/small_linalg.h): a float64 workspace per matrix (one
    GPU thread each): the matrix, a column and the pivots."""
    n = ins[0].shape[-1]
    return _batch(ins[0]) * 8 * (n * n + 2 * n)


def _eigh_gpu_scratch(ins: list[TensorType], outs: list[TensorType], a: Attrs) -> int:
    """The CUDA kernel's (kernels/eigh.cu, cuSOLVER's syevBatched): a copy of the matrices
    (cuSOLVER overwrites them with the eigenvectors) and an info per matrix, each 256-byte
    aligned, then cuSOLVER's device workspace, which it tells only at load, on the device:
    planned as twice the matrices' bytes and 64 KiB, an estimate (a kernel asking for more
    gets a block of its own at load, `unplanned_scratch_bytes`); not yet run on a GPU."""
    def aligned(b: int) -> int:
        return -(-b // 256) * 256

    return aligned(ins[0].nbytes) + aligned(4 * _batch(ins[0])) + 2 * ins[0].nbytes + (64 << 10)


def _info_type(a: TensorType, attrs: Attrs) -> list[TensorType]:
    """The optional second output (attr `info`, torch's `_ex` forms): per matrix, 0, or k > 0
    where the factorization failed at pivot k (1-based): LU's first zero pivot, Cholesky's
    first leading minor that is not positive definite."""
    return [TensorType(a.shape[:-2], "int32")] if attrs.get("info") else []


def _first_bad(bad: np.ndarray) -> np.ndarray:
    """Per matrix, 1 + the first True of the last axis, or 0 (always, for 0 x 0 matrices)."""
    if bad.shape[-1] == 0:
        return np.zeros(bad.shape[:-1], np.int32)
    return np.where(bad.any(-1), np.argmax(bad, -1) + 1, 0).astype(np.int32)


def _lu_failures(x: np.ndarray) -> np.ndarray:
    """Per matrix, LAPACK getrf's info of A (here float64's, through scipy): the 1-based index
    of the first pivot that is exactly 0, else 0."""
    import scipy.linalg  # on first use: the planner's start need not load it

    m = _wide(x)
    if m.size == 0:
        return np.zeros(m.shape[:-2], np.int32)
    with warnings.catch_warnings():  # a singular matrix is an answer here, not a warning
        warnings.simplefilter("ignore")
        lu, _ = scipy.linalg.lu_factor(m, check_finite=False)
    return _first_bad(np.diagonal(lu, axis1=-2, axis2=-1) == 0)


def torch_linalg_error(api: str, batched: bool, failures: np.ndarray) -> str | None:
    """torch's message for the first failed factorization of `failures` (per matrix, LAPACK's
    info), chosen as aten's _linalg_check_errors chooses it, by the name of the op that
    raises; None when none failed. The CPU kernels say the same (kernels/lapack.cpp)."""
    flat = np.asarray(failures).reshape(-1)
    bad = np.flatnonzero(flat > 0)
    if bad.size == 0:
        return None
    info = int(flat[bad[0]])
    where = f"{api}: (Batch element {int(bad[0])})" if batched else api
    if "inv" in api:
        return (f"{where}: The diagonal element {info} is zero, the inversion could not be "
                f"completed because the input matrix is singular.")
    if "solve" in api:
        return f"{where}: The solver failed because the input matrix is singular."
    if "cholesky" in api:
        return (f"{where}: The factorization could not be completed because the input is not "
                f"positive-definite (the leading minor of order {info} is not "
                f"positive-definite).")
    if "ldl_factor" in api:  # (torch's internal assert names no batch element)
        return f"{api}: Unknown error code: {info}."
    if "lu_factor" in api:
        return (f"{where}: U[{info},{info}] is zero and using it on lu_solve would result in a "
                f"division by zero. If you still want to perform the factorization, consider "
                f"calling linalg.lu(A, pivot) or linalg.lu_factor_ex(A, pivot)")
    return f"{where}: the factorization failed (LAPACK info {info})"


def _failed(x: np.ndarray, failures: np.ndarray, a: Attrs) -> list[np.ndarray]:
    """The info output (attr info), after the step's error where attr `check` names the torch
    op that raises (OpError here, StepError in the executor)."""
    message = torch_linalg_error(a["check"], x.ndim > 2, failures) if a.get("check") else None
    if message is not None:
        raise OpError(message)
    return [failures] if a.get("info") else []


_INFO = {"info": Attr("bool", False, optional=True), "check": Attr("str", "", optional=True)}


# ---- MatrixInverse ---------------------------------------------------------------------------

def _inverse_infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    _square("MatrixInverse", ins[0])
    return [ins[0], *_info_type(ins[0], a)]


def _inverse(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    failures = _lu_failures(xs[0])
    info = _failed(xs[0], failures, a)
    eye = np.broadcast_to(np.eye(xs[0].shape[-1]), xs[0].shape)
    return [_solve(_wide(xs[0]), eye, False, failures).astype(xs[0].dtype), *info]


def _solve(a: np.ndarray, b: np.ndarray, transpose: bool, failures: np.ndarray) -> np.ndarray:
    """numpy.linalg.solve matrix by matrix, NaN for a singular A (a zero pivot): the CPU
    kernels' LAPACK solve does not run on a failed factorization."""
    a = np.swapaxes(a, -1, -2) if transpose else a
    if not failures.any():
        try:
            return np.linalg.solve(a, b)
        except np.linalg.LinAlgError:  # singular in numpy's own factorization: one by one
            pass
    out = np.full(b.shape, np.nan)
    for idx in np.ndindex(b.shape[:-2]):
        if failures[idx] == 0:
            try:
                out[idx] = np.linalg.solve(a[idx], b[idx])
            except np.linalg.LinAlgError:  # singular in numpy's own factorization
                pass
    return out


def _transpose(g: GradBuilder, x: str) -> str:
    rank = len(g.type(x).shape)
    perm = [*range(rank - 2), rank - 1, rank - 2]
    return g.emit("Transpose", [x], {"perm": perm})[0]


def _matmul(g: GradBuilder, a: str, b: str, ta: bool = False, tb: bool = False) -> str:
    return g.emit("MatMul", [a, b], {"transpose_a": ta, "transpose_b": tb})[0]


def _inverse_gradient(g: GradBuilder, node: Node, grads: list[str | None]) -> list[str | None]:
    dy = grads[0]
    if dy is None or not g.needs(node.inputs[0]):
        return [None]
    y = node.outputs[0]
    t = _matmul(g, y, dy, ta=True)
    return [g.emit("Neg", [_matmul(g, t, y, tb=True)])[0]]


register(OpDef(
    name="MatrixInverse", arity=1, cost_class="gemm", recompute="expensive", attrs=_INFO,
    infer=_inverse_infer, flops=_factor_flops, reference=_inverse, gradient=_inverse_gradient,
    scratch=_lapack_scratch("MatrixInverse"), gpu_scratch=_gpu_scratch,
    doc="The inverse of each square matrix of the last two axes (LU, partial pivoting).",
))


# ---- MatrixSolve -----------------------------------------------------------------------------

def _solve_infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    n = _square("MatrixSolve", ins[0])
    b = ins[1]
    require_float("MatrixSolve", b, "B")
    if b.dtype != ins[0].dtype or b.rank != ins[0].rank or b.shape[:-2] != ins[0].shape[:-2] \
            or b.shape[-2] != n:
        raise OpError(f"MatrixSolve: B must be {ins[0].dtype} of shape "
                      f"{list(ins[0].shape[:-2])} + [{n}, k], got {b.dtype} {list(b.shape)}")
    return [b, *_info_type(ins[0], a)]


def _solve_reference(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    failures = _lu_failures(xs[0])
    info = _failed(xs[0], failures, a)
    return [_solve(_wide(xs[0]), _wide(xs[1]), a["transpose"], failures).astype(xs[1].dtype),
            *info]


def _solve_gradient(g: GradBuilder, node: Node, grads: list[str | None]) -> list[str | None]:
    dx = grads[0]
    a, b = node.inputs
    if dx is None or not (g.needs(a) or g.needs(b)):
        return [None, None]
    transpose = node.attrs["transpose"]
    db = g.emit("MatrixSolve", [a, dx], {"transpose": not transpose})[0]
    x = node.outputs[0]
    da = None
    if g.needs(a):
        da = g.emit("Neg", [_matmul(g, x, db, tb=True) if transpose else
                            _matmul(g, db, x, tb=True)])[0]
    return [da, db if g.needs(b) else None]


register(OpDef(
    name="MatrixSolve", arity=2, cost_class="gemm", recompute="expensive",
    attrs={"transpose": Attr("bool", False), **_INFO},
    infer=_solve_infer, flops=_factor_flops, reference=_solve_reference,
    gradient=_solve_gradient,
    scratch=_lapack_scratch("MatrixSolve"), gpu_scratch=_gpu_scratch,
    doc="X with A X = B (transpose: A^T X = B) for each matrix of the last two axes.",
))


# ---- MatrixSlogdet ---------------------------------------------------------------------------

def _slogdet_infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    _square("MatrixSlogdet", ins[0])
    out = TensorType(ins[0].shape[:-2], ins[0].dtype)
    return [out, out]


def _slogdet(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    sign, logabs = np.linalg.slogdet(_wide(xs[0]))
    return [np.asarray(sign).astype(xs[0].dtype), np.asarray(logabs).astype(xs[0].dtype)]


def _slogdet_gradient(g: GradBuilder, node: Node, grads: list[str | None]) -> list[str | None]:
    dlog = grads[1]
    a = node.inputs[0]
    if dlog is None or not g.needs(a):
        return [None]
    shape = g.type(a).shape
    scale = g.emit("Reshape", [dlog], {"shape": [*shape[:-2], 1, 1]})[0]
    inv_t = _transpose(g, g.emit("MatrixInverse", [a])[0])
    return [g.emit("Mul", [scale, inv_t])[0]]


register(OpDef(
    name="MatrixSlogdet", arity=1, cost_class="gemm", recompute="expensive",
    infer=_slogdet_infer, flops=_factor_flops, reference=_slogdet, gradient=_slogdet_gradient,
    scratch=_lapack_scratch("MatrixSlogdet"), gpu_scratch=_gpu_scratch,
    doc="sign and log|det| of each square matrix of the last two axes (LU, partial pivoting).",
))


# ---- Cholesky --------------------------------------------------------------------------------

def _cholesky_infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    _square("Cholesky", ins[0])
    return [ins[0], *_info_type(ins[0], a)]


def _cholesky(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    x = _wide(xs[0])
    out = np.zeros_like(x)
    n = x.shape[-1]
    with np.errstate(all="ignore"):
        for j in range(n):  # column by column, as the kernels: NaN past a failing pivot
            d = x[..., j, j] - np.sum(out[..., j, :j] ** 2, axis=-1)
            out[..., j, j] = np.sqrt(np.where(d > 0, d, np.nan))
            for i in range(j + 1, n):
                out[..., i, j] = (x[..., i, j] - np.sum(out[..., i, :j] * out[..., j, :j],
                                                        axis=-1)) / out[..., j, j]
    failures = _first_bad(np.isnan(np.diagonal(out, axis1=-2, axis2=-1)))
    return [out.astype(xs[0].dtype), *_failed(xs[0], failures, a)]


def _cholesky_gradient(g: GradBuilder, node: Node, grads: list[str | None]) -> list[str | None]:
    dl = grads[0]
    if dl is None or not g.needs(node.inputs[0]):
        return [None]
    low = node.outputs[0]
    # M = tril(L^T dL); its strict lower triangle transposed is M^T less M^T's lower triangle
    # (M's diagonal): CausalMask keeps a lower triangle
    m = g.emit("CausalMask", [_matmul(g, low, dl, ta=True)], {"value": 0.0})[0]
    mt = _transpose(g, m)
    upper = g.emit("Sub", [mt, g.emit("CausalMask", [mt], {"value": 0.0})[0]])[0]
    sym = g.emit("Scale", [g.emit("Add", [m, upper])[0]], {"factor": 0.5})[0]
    inv = g.emit("MatrixInverse", [low])[0]
    return [_matmul(g, _matmul(g, inv, sym, ta=True), inv)]


register(OpDef(
    name="Cholesky", arity=1, cost_class="gemm", recompute="expensive", attrs=_INFO,
    infer=_cholesky_infer, flops=lambda ins, outs, a: _batch(ins[0]) * ins[0].shape[-1] ** 3 // 3,
    reference=_cholesky, gradient=_cholesky_gradient, scratch=_lapack_scratch("Cholesky"),
    gpu_scratch=_gpu_scratch,
    doc="Lower-triangular L with L L^T = A for each symmetric positive definite matrix.",
))


# ---- MatrixEigh ------------------------------------------------------------------------------

def _eigh_infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    n = _square("MatrixEigh", ins[0])
    return [TensorType((*ins[0].shape[:-2], n), ins[0].dtype), ins[0]]


def _eigh(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    """numpy.linalg.eigh of the lower (upper) triangle, in float64, each eigenvector signed as
    the kernels sign theirs: its entry of largest magnitude (the first such) positive."""
    x = _wide(xs[0])
    if x.size == 0:
        w, v = np.zeros(x.shape[:-1]), np.zeros(x.shape)
    else:
        w, v = np.linalg.eigh(x, UPLO="U" if a["upper"] else "L")
        top = np.take_along_axis(v, np.argmax(np.abs(v), axis=-2)[..., None, :], axis=-2)
        v = v * np.where(top < 0, -1.0, 1.0)
    return [w.astype(xs[0].dtype), v.astype(xs[0].dtype)]


def _eigh_gradient(g: GradBuilder, node: Node, grads: list[str | None]) -> list[str | None]:
    """derivatives.yaml's linalg_eig_backward for a symmetric A (torch's gauge: the part of
    V^T dV that rotates the eigenvectors in their own span is projected out):

        dA = V (skew(V^T dV) / 2 / E + diag(dL)) V^T,  E_ij = L_j - L_i (1 on the diagonal),

    where skew(X) = X - X^T. As torch's, it divides by the gaps between eigenvalues: not
    defined at repeated eigenvalues when the loss depends on the eigenvectors."""
    dl, dv = grads
    a = node.inputs[0]
    if not g.needs(a) or (dl is None and dv is None):
        return [None]
    w, v = node.outputs
    *batch, n = g.type(w).shape

    def emit(op: str, *ins: str, **attrs) -> str:
        return g.emit(op, list(ins), attrs)[0]

    inner = None
    if dv is not None:
        lower = emit("CausalMask", emit("Fill", shape=[n, n], value=1.0, dtype=g.type(w).dtype),
                     value=0.0)
        eye = emit("Mul", lower, emit("Transpose", lower, perm=[1, 0]))
        gap = emit("Add", emit("Sub", emit("Reshape", w, shape=[*batch, 1, n]),
                               emit("Reshape", w, shape=[*batch, n, 1])), eye)
        x = _matmul(g, v, dv, ta=True)
        inner = emit("Div", emit("Scale", emit("Sub", x, _transpose(g, x)), factor=0.5), gap)
    if dl is not None:
        diag = emit("Mul", v, emit("Reshape", dl, shape=[*batch, 1, n]))  # V diag(dL)
        if inner is None:
            return [_matmul(g, diag, v, tb=True)]
        return [_matmul(g, emit("Add", _matmul(g, v, inner), diag), v, tb=True)]
    return [_matmul(g, _matmul(g, v, inner), v, tb=True)]


register(OpDef(
    name="MatrixEigh", arity=1, cost_class="gemm", recompute="expensive",
    attrs={"upper": Attr("bool", False)},
    infer=_eigh_infer, reference=_eigh, gradient=_eigh_gradient,
    scratch=_lapack_scratch("MatrixEigh"), gpu_scratch=_eigh_gpu_scratch,
    # divide and conquer with vectors: about 9 n^3 multiply-adds (the tridiagonal reduction
    # 4/3 n^3, its back-transformation 2 n^3, the merges most of the rest)
    flops=lambda ins, outs, a: _batch(ins[0]) * 18 * ins[0].shape[-1] ** 3,
    doc="Eigenvalues (ascending) and eigenvectors of each symmetric matrix's lower (upper) "
        "triangle.",
))


# ---- MatrixLuFactor, LuPermutation -----------------------------------------------------------

def _lu_factor_infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    x = ins[0]
    require_float("MatrixLuFactor", x, "A")
    if x.rank < 2:
        raise OpError(f"MatrixLuFactor: A must be matrices (..., m, n), got shape "
                      f"{list(x.shape)}")
    k = min(x.shape[-2:])
    return [x, TensorType((*x.shape[:-2], k), "int32"), *_info_type(x, a)]


def _lu_factor(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    """LAPACK getrf's LU (here float64's, through scipy): L's strict lower triangle and U in
    one matrix, the 1-based pivots (row k swapped with row pivots[k], in order)."""
    import scipy.linalg

    x = _wide(xs[0])
    failures = _lu_failures(x)
    info = _failed(x, failures, a)
    if x.size == 0:
        lu, piv = x.copy(), np.zeros(x.shape[:-1], np.int64)
    else:
        with warnings.catch_warnings():  # a singular matrix's factors are still an answer
            warnings.simplefilter("ignore")
            lu, piv = scipy.linalg.lu_factor(x, check_finite=False)
    return [lu.astype(xs[0].dtype), (np.asarray(piv) + 1).astype(np.int32), *info]


def _cut(g: GradBuilder, x: str, rows: tuple[int, int], cols: tuple[int, int]) -> str:
    """x[..., rows[0]:rows[1], cols[0]:cols[1]] (no Slice for a whole axis)."""
    for axis, (lo, hi), size in ((-2, rows, g.type(x).shape[-2]),
                                 (-1, cols, g.type(x).shape[-1])):
        if (lo, hi) != (0, size):
            x = g.emit("Slice", [x], {"starts": [lo], "ends": [hi], "axes": [axis]})[0]
    return x


def _lu_masks(g: GradBuilder, r: int, c: int, dtype: str) -> tuple[str, str]:
    """(strict lower, upper with the diagonal) masks of r x c matrices (CausalMask keeps a
    lower triangle with its diagonal: of the transposed shape, transposed, the upper one)."""
    def ones(shape: list[int]) -> str:
        return g.emit("Fill", [], {"shape": shape, "value": 1.0, "dtype": dtype})[0]

    upper = g.emit("Transpose", [g.emit("CausalMask", [ones([c, r])], {"value": 0.0})[0]],
                   {"perm": [1, 0]})[0]
    return g.emit("Sub", [ones([r, c]), upper])[0], upper


def _lu_wide(g: GradBuilder, low: str, u: str, dl: str, du: str, dtype: str) -> str:
    """m <= n: L^-T [tril(L^T dL - triu(dU) U^T, -1) U1^-T + triu(dU1), dU2]."""
    k, n = g.type(u).shape[-2:]
    du_upper = g.emit("Mul", [du, _lu_masks(g, k, n, dtype)[1]])[0]
    x = g.emit("Sub", [_matmul(g, low, dl, ta=True), _matmul(g, du_upper, u, tb=True)])[0]
    x = g.emit("Mul", [x, _lu_masks(g, k, k, dtype)[0]])[0]
    u1 = _cut(g, u, (0, k), (0, k))
    x = _transpose(g, g.emit("MatrixSolve", [u1, _transpose(g, x)])[0])  # x U1^-T
    x = g.emit("Add", [x, _cut(g, du_upper, (0, k), (0, k))])[0]
    if n > k:
        x = g.emit("Concat", [x, _cut(g, du, (0, k), (k, n))], {"axis": -1})[0]
    return g.emit("MatrixSolve", [low, x], {"transpose": True})[0]


def _lu_tall(g: GradBuilder, low: str, u: str, dl: str, du: str, strict: str,
             dtype: str) -> str:
    """m > n: [L1^-T triu(dU U^T - L^T tril(dL, -1)) + tril(dL1, -1); dL2] U^-T."""
    m, k = g.type(low).shape[-2:]
    dl_strict = g.emit("Mul", [dl, strict])[0]
    x = g.emit("Sub", [_matmul(g, du, u, tb=True), _matmul(g, low, dl_strict, ta=True)])[0]
    x = g.emit("Mul", [x, _lu_masks(g, k, k, dtype)[1]])[0]
    x = g.emit("MatrixSolve", [_cut(g, low, (0, k), (0, k)), x], {"transpose": True})[0]
    x = g.emit("Concat", [g.emit("Add", [x, _cut(g, dl_strict, (0, k), (0, k))])[0],
                          _cut(g, dl, (k, m), (0, k))], {"axis": -2})[0]
    return _transpose(g, g.emit("MatrixSolve", [u, _transpose(g, x)])[0])  # x U^-T


def _lu_factor_gradient(g: GradBuilder, node: Node, grads: list[str | None]
                        ) -> list[str | None]:
    """derivatives.yaml's linalg_lu_backward of lu_factor (A = P L U, L m x k unit lower,
    U k x n upper; dL, dU the packed gradient's first k columns and rows): for m <= n (U =
    [U1 U2], U1 k x k)

        dA = P L^-T [tril(L^T dL - triu(dU) U^T, -1) U1^-T + triu(dU1), dU2],

    for m > n (L = [L1; L2], L1 k x k)

        dA = P [L1^-T triu(dU U^T - L^T tril(dL, -1)) + tril(dL1, -1); dL2] U^-T."""
    dlu = grads[0]
    a = node.inputs[0]
    if dlu is None or not g.needs(a):
        return [None]
    lu, pivots = node.outputs[:2]
    m, n = g.type(a).shape[-2:]
    k = min(m, n)
    dtype = g.type(a).dtype
    strict, _ = _lu_masks(g, m, k, dtype)
    ones = g.emit("Fill", [], {"shape": [m, k], "value": 1.0, "dtype": dtype})[0]
    diagonal = g.emit("Sub", [g.emit("CausalMask", [ones], {"value": 0.0})[0], strict])[0]
    low = g.emit("Add", [g.emit("Mul", [_cut(g, lu, (0, m), (0, k)), strict])[0],
                         diagonal])[0]
    u = g.emit("Mul", [_cut(g, lu, (0, k), (0, n)), _lu_masks(g, k, n, dtype)[1]])[0]
    dl, du = _cut(g, dlu, (0, m), (0, k)), _cut(g, dlu, (0, k), (0, n))
    x = _lu_wide(g, low, u, dl, du, dtype) if m <= n else \
        _lu_tall(g, low, u, dl, du, strict, dtype)
    p = g.emit("LuPermutation", [pivots], {"dtype": dtype, "rows": m})[0]
    return [_matmul(g, p, x)]


register(OpDef(
    name="MatrixLuFactor", arity=1, cost_class="gemm", recompute="expensive", attrs=_INFO,
    infer=_lu_factor_infer, reference=_lu_factor, gradient=_lu_factor_gradient,
    flops=lambda ins, outs, a: _batch(ins[0]) * 2 * ins[0].shape[-1] ** 3 // 3,
    scratch=_lapack_scratch("MatrixLuFactor"),
    doc="LU with partial pivoting of each matrix: L and U packed, LAPACK's pivots.",
))


def _permutation_infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    p = ins[0]
    if p.dtype != "int32" or p.rank < 1:
        raise OpError(f"LuPermutation: pivots must be int32 (..., n), got {p.dtype} "
                      f"{list(p.shape)}")
    rows = a.get("rows") or p.shape[-1]
    if rows < p.shape[-1]:
        raise OpError(f"LuPermutation: rows {rows} fewer than the {p.shape[-1]} pivots")
    return [TensorType((*p.shape[:-1], rows, rows), a["dtype"])]


def _permutation(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    """P (rows x rows, attr rows: A's, default the pivots' count) with A = P L U from 1-based
    pivots: the swaps (k, pivots[k] - 1) applied in order to the rows of I, transposed."""
    piv = np.asarray(xs[0], np.int64)
    n = a.get("rows") or piv.shape[-1]
    out = np.zeros((*piv.shape[:-1], n, n))
    for idx in np.ndindex(piv.shape[:-1]):
        order = np.arange(n)
        for k, p in enumerate(piv[idx]):
            if not 1 <= p <= n:
                raise OpError(f"LuPermutation: pivot {int(p)} out of range [1, {n}]")
            order[[k, p - 1]] = order[[p - 1, k]]
        out[idx] = np.eye(n)[order].T
    return [out.astype(a["dtype"])]


register(OpDef(
    name="LuPermutation", arity=1, cost_class="elementwise",
    attrs={"dtype": Attr("str", "float32"), "rows": Attr("int", 0, optional=True)},
    infer=_permutation_infer, reference=_permutation, nondiff_inputs=(0,),
    flops=lambda ins, outs, a: 0,
    doc="The permutation matrix P of A = P L U from LAPACK's 1-based pivots.",
))


# ---- MatrixSvd -------------------------------------------------------------------------------

def _svd_infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    x = ins[0]
    require_float("MatrixSvd", x, "A")
    if x.rank < 2:
        raise OpError(f"MatrixSvd: A must be matrices (..., m, n), got shape {list(x.shape)}")
    *batch, m, n = x.shape
    k = min(m, n)
    return [TensorType((*batch, m, k), x.dtype), TensorType((*batch, k), x.dtype),
            TensorType((*batch, k, n), x.dtype)]


def _svd(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    """numpy.linalg.svd (thin), each pair (u_j, vh_j) signed as the kernels sign theirs: u_j's
    entry of largest magnitude (the first such) positive."""
    x = _wide(xs[0])
    *batch, m, n = x.shape
    k = min(m, n)
    if x.size == 0:
        u, s, vh = np.zeros((*batch, m, k)), np.zeros((*batch, k)), np.zeros((*batch, k, n))
    else:
        u, s, vh = np.linalg.svd(x, full_matrices=False)
        top = np.take_along_axis(u, np.argmax(np.abs(u), axis=-2)[..., None, :], axis=-2)
        flip = np.where(top < 0, -1.0, 1.0)
        u, vh = u * flip, vh * np.swapaxes(flip, -1, -2)
    return [v.astype(xs[0].dtype) for v in (u, s, vh)]


def _svd_gradient(g: GradBuilder, node: Node, grads: list[str | None]) -> list[str | None]:
    """derivatives.yaml's svd_backward (thin SVD, real): with E_jk = S_k^2 - S_j^2 (1 on the
    diagonal) and skew(X) = X - X^T,

        G  = (skew(U^T dU) S_k + S_j skew(V^T dV)) / E + diag(dS)
        dA = U G Vh, plus (I - U U^T) dU S^-1 Vh when m > k,
                     or U S^-1 dVh (I - V Vh) when n > k.

    It is invariant to the signs of the pairs (u_j, vh_j) where the loss is (torch's pinv),
    and, as torch's, not defined at repeated singular values."""
    du, ds, dvh = grads
    a = node.inputs[0]
    if not g.needs(a) or (du is None and ds is None and dvh is None):
        return [None]
    u, s, vh = node.outputs
    *batch, k = g.type(s).shape
    m, n = g.type(a).shape[-2:]

    def emit(op: str, *ins: str, **attrs) -> str:
        return g.emit(op, list(ins), attrs)[0]

    row = emit("Reshape", s, shape=[*batch, 1, k])
    if du is None and dvh is None:  # the singular values alone: U diag(dS) Vh
        return [_matmul(g, emit("Mul", u, emit("Reshape", ds, shape=[*batch, 1, k])), vh)]
    col = emit("Reshape", s, shape=[*batch, k, 1])
    lower = emit("CausalMask", emit("Fill", shape=[k, k], value=1.0, dtype=g.type(s).dtype),
                 value=0.0)
    eye = emit("Mul", lower, emit("Transpose", lower, perm=[1, 0]))
    square = emit("Mul", s, s)
    gap = emit("Add", emit("Sub", emit("Reshape", square, shape=[*batch, 1, k]),
                           emit("Reshape", square, shape=[*batch, k, 1])), eye)
    terms = []
    if du is not None:
        x = _matmul(g, u, du, ta=True)
        terms.append(emit("Mul", emit("Sub", x, _transpose(g, x)), row))
    if dvh is not None:
        x = _matmul(g, vh, dvh, tb=True)  # V^T dV, dV = dVh^T
        terms.append(emit("Mul", col, emit("Sub", x, _transpose(g, x))))
    inner = emit("Div", terms[0] if len(terms) == 1 else emit("Add", *terms), gap)
    if ds is not None:
        inner = emit("Add", inner, emit("Mul", eye, emit("Reshape", ds, shape=[*batch, 1, k])))
    if m > k and du is not None:
        scaled = emit("Div", du, row)  # dU S^-1
        outer = emit("Sub", scaled, _matmul(g, u, _matmul(g, u, scaled, ta=True)))
        return [_matmul(g, emit("Add", _matmul(g, u, inner), outer), vh)]
    if n > k and dvh is not None:
        scaled = emit("Div", dvh, col)  # S^-1 dVh
        outer = emit("Sub", scaled, _matmul(g, _matmul(g, scaled, vh, tb=True), vh))
        return [_matmul(g, u, emit("Add", _matmul(g, inner, vh), outer))]
    return [_matmul(g, u, _matmul(g, inner, vh))]


def _svd_gpu_scratch(ins: list[TensorType], outs: list[TensorType], a: Attrs) -> int:
    """The CUDA kernel's workspace per matrix (common/small_linalg.h's one-sided Jacobi): A's
    tall orientation (r x c), the rotations (c x c), c norms, in float64."""
    m, n = ins[0].shape[-2:]
    r, c = max(m, n), min(m, n)
    return _batch(ins[0]) * 8 * (r * c + c * c + c)


register(OpDef(
    name="MatrixSvd", arity=1, cost_class="gemm", recompute="expensive",
    infer=_svd_infer, reference=_svd, gradient=_svd_gradient,
    scratch=_lapack_scratch("MatrixSvd"), gpu_scratch=_svd_gpu_scratch,
    # Golub and Van Loan's count for the thin SVD with U and V (R-SVD): 6 r c^2 + 20 c^3
    flops=lambda ins, outs, a: _batch(ins[0]) * (6 * max(ins[0].shape[-2:]) *
                                                 min(ins[0].shape[-2:]) ** 2 +
                                                 20 * min(ins[0].shape[-2:]) ** 3),
    doc="Thin SVD A = U diag(S) Vh of each matrix of the last two axes (CPU: LAPACK gesdd; "
        "CUDA: one-sided Jacobi).",
))


# ---- MatrixQr --------------------------------------------------------------------------------

def _qr_infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    x = ins[0]
    require_float("MatrixQr", x, "A")
    if x.rank < 2 or x.shape[-2] < x.shape[-1]:
        raise OpError(f"MatrixQr: A must be tall or square matrices (..., m, n), m >= n, got "
                      f"shape {list(x.shape)}")
    n = x.shape[-1]
    return [x, TensorType((*x.shape[:-2], n, n), x.dtype)]


def _qr(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    """numpy.linalg.qr (LAPACK's geqrf and orgqr: the kernels' Householder signs)."""
    x = _wide(xs[0])
    if x.size == 0:
        q, r = np.zeros(x.shape), np.zeros((*x.shape[:-2], x.shape[-1], x.shape[-1]))
    else:
        q, r = np.linalg.qr(x)
    return [q.astype(xs[0].dtype), r.astype(xs[0].dtype)]


def _qr_gradient(g: GradBuilder, node: Node, grads: list[str | None]) -> list[str | None]:
    """derivatives.yaml's linalg_qr_backward for m >= n: with M = R dR^T - dQ^T Q,
    dA = (dQ + Q copyltu(M)) R^-T, copyltu(M) the symmetric matrix of M's lower triangle."""
    dq, dr = grads
    a = node.inputs[0]
    if not g.needs(a) or (dq is None and dr is None):
        return [None]
    q, r = node.outputs
    terms = []
    if dr is not None:
        terms.append(_matmul(g, r, dr, tb=True))
    if dq is not None:
        terms.append(g.emit("Neg", [_matmul(g, dq, q, ta=True)])[0])
    m = terms[0] if len(terms) == 1 else g.emit("Add", terms)[0]
    low = g.emit("CausalMask", [m], {"value": 0.0})[0]
    up = _transpose(g, low)
    sym = g.emit("Sub", [g.emit("Add", [low, up])[0],
                         g.emit("CausalMask", [up], {"value": 0.0})[0]])[0]
    x = _matmul(g, q, sym)
    if dq is not None:
        x = g.emit("Add", [dq, x])[0]
    # X R^-T = (R^-1 X^T)^T
    return [_transpose(g, g.emit("MatrixSolve", [r, _transpose(g, x)])[0])]


def _qr_gpu_scratch(ins: list[TensorType], outs: list[TensorType], a: Attrs) -> int:
    """The CUDA kernel's workspace per matrix (common/small_linalg.h's Householder): the
    vectors and R, Q, the scales (float64)."""
    m, n = ins[0].shape[-2:]
    return _batch(ins[0]) * 8 * (2 * m * n + n)


register(OpDef(
    name="MatrixQr", arity=1, cost_class="gemm", recompute="expensive",
    infer=_qr_infer, reference=_qr, gradient=_qr_gradient, scratch=_lapack_scratch("MatrixQr"),
    gpu_scratch=_qr_gpu_scratch,
    # Householder: 2 n^2 (m - n/3) for R, as much again for Q
    flops=lambda ins, outs, a: _batch(ins[0]) * 4 * ins[0].shape[-1] ** 2 *
    max(ins[0].shape[-2] - ins[0].shape[-1] // 3, 1),
    doc="Reduced QR A = Q R of each tall or square matrix (CPU: LAPACK geqrf, orgqr; CUDA: "
        "Householder, LAPACK's signs).",
))


# ---- MatrixGeqrf -----------------------------------------------------------------------------

def _geqrf_infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    x = ins[0]
    require_float("MatrixGeqrf", x, "A")
    if x.rank < 2:
        raise OpError(f"MatrixGeqrf: A must be matrices (..., m, n), got shape {list(x.shape)}")
    return [x, TensorType((*x.shape[:-2], min(x.shape[-2:])), x.dtype)]


def _geqrf(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    """LAPACK geqrf's A = Q R (numpy.linalg.qr's raw mode, transposed to row-major): R in the
    upper triangle, the Householder vectors v_j below the diagonal (v_j[j] = 1 implied), and
    tau: Q = H_1 ... H_k, H_j = I - tau_j v_j v_j^T."""
    x = _wide(xs[0])
    k = min(x.shape[-2:])
    if x.size == 0:
        return [x.astype(xs[0].dtype), np.zeros((*x.shape[:-2], k), xs[0].dtype)]
    h, tau = np.linalg.qr(x, mode="raw")
    return [np.swapaxes(h, -1, -2).astype(xs[0].dtype), tau.astype(xs[0].dtype)]


register(OpDef(
    name="MatrixGeqrf", arity=1, cost_class="gemm", recompute="expensive",
    infer=_geqrf_infer, reference=_geqrf, scratch=_lapack_scratch("MatrixGeqrf"),
    # Householder QR without Q: 2 n^2 (m - n/3) (of the min(m, n) reflected columns)
    flops=lambda ins, outs, a: _batch(ins[0]) * 2 * min(ins[0].shape[-2:]) ** 2 *
    max(max(ins[0].shape[-2:]) - min(ins[0].shape[-2:]) // 3, 1),
    doc="LAPACK geqrf of each matrix: R and the Householder vectors packed, and their tau.",
))


# ---- MatrixExp -------------------------------------------------------------------------------

def _exp_infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    _square("MatrixExp", ins[0])
    return [ins[0]]


def _expm(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    """scipy.linalg.expm in float64 (scaling and squaring, Padé, as the kernel); a matrix
    holding NaN or inf gives NaN throughout, as the kernel's."""
    import scipy.linalg

    x = _wide(xs[0])
    if x.size == 0:
        return [x.astype(xs[0].dtype)]
    bad = ~np.isfinite(x).all(axis=(-2, -1))
    y = scipy.linalg.expm(np.where(bad[..., None, None], 0.0, x))
    return [np.where(bad[..., None, None], np.nan, y).astype(xs[0].dtype)]


def _exp_gradient(g: GradBuilder, node: Node, grads: list[str | None]) -> list[str | None]:
    """The exact Fréchet derivative's adjoint (Mathias 1996; torch's differential_analytic_
    matrix_function): dA = L(A^T, dY), the upper-right block of

        exp([[A^T, dY],
             [0,   A^T]]),

    one MatrixExp of a 2n x 2n matrix (whose own gradient is this rule again)."""
    dy = grads[0]
    a = node.inputs[0]
    if dy is None or not g.needs(a):
        return [None]
    t = g.type(a)
    n = t.shape[-1]
    at = _transpose(g, a)
    zeros = g.emit("Fill", [], {"shape": list(t.shape), "value": 0.0, "dtype": t.dtype})[0]
    top = g.emit("Concat", [at, dy], {"axis": -1})[0]
    bottom = g.emit("Concat", [zeros, at], {"axis": -1})[0]
    block = g.emit("Concat", [top, bottom], {"axis": -2})[0]
    return [_cut(g, g.emit("MatrixExp", [block])[0], (0, n), (n, 2 * n))]


register(OpDef(
    name="MatrixExp", arity=1, cost_class="gemm", recompute="expensive",
    infer=_exp_infer, reference=_expm, gradient=_exp_gradient,
    scratch=_lapack_scratch("MatrixExp"),
    # Padé 13: 6 products of n x n matrices and an LU solve, then a few squarings
    flops=lambda ins, outs, a: _batch(ins[0]) * 20 * ins[0].shape[-1] ** 3,
    doc="The matrix exponential of each square matrix (scaling and squaring, Padé).",
))


# ---- MatrixLdlFactor, MatrixLdlSolve ---------------------------------------------------------

def _ldl_factor_infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    n = _square("MatrixLdlFactor", ins[0])
    return [ins[0], TensorType((*ins[0].shape[:-2], n), "int32"), *_info_type(ins[0], a)]


def _ldl_factor(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    """LAPACK sytrf's (Bunch-Kaufman, lower) A = P L D L^T P^T of A's lower triangle (here
    float64's, through scipy), matrix by matrix: L and the 1 x 1 and 2 x 2 blocks of D packed
    in the lower triangle, zeros above (torch's), LAPACK's 1-based pivots (a negative pair: a
    2 x 2 block); info the 1-based index of a zero diagonal of D (the factors still given)."""
    import scipy.linalg.lapack

    x = _wide(xs[0])
    ld = np.zeros_like(x)
    piv = np.zeros(x.shape[:-1], np.int32)
    failures = np.zeros(x.shape[:-2], np.int32)
    for idx in np.ndindex(x.shape[:-2]):
        if x.shape[-1]:
            ld[idx], piv[idx], failures[idx] = scipy.linalg.lapack.dsytrf(x[idx], lower=1)
    info = _failed(x, failures, a)
    return [np.tril(ld).astype(xs[0].dtype), piv, *info]


register(OpDef(
    name="MatrixLdlFactor", arity=1, cost_class="gemm", recompute="expensive", attrs=_INFO,
    infer=_ldl_factor_infer, reference=_ldl_factor, scratch=_lapack_scratch("MatrixLdlFactor"),
    flops=lambda ins, outs, a: _batch(ins[0]) * ins[0].shape[-1] ** 3 // 3,
    doc="LDL^T with Bunch-Kaufman pivoting of each symmetric matrix's lower triangle (sytrf).",
))


def _ldl_solve_infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    ld, piv, b = ins
    n = _square("MatrixLdlSolve", ld)
    require_float("MatrixLdlSolve", b, "B")
    if piv.dtype != "int32" or piv.shape != (*ld.shape[:-2], n):
        raise OpError(f"MatrixLdlSolve: pivots must be int32 {[*ld.shape[:-2], n]}, got "
                      f"{piv.dtype} {list(piv.shape)}")
    if b.rank != ld.rank or b.shape[:-1] != ld.shape[:-1]:
        raise OpError(f"MatrixLdlSolve: B must be (..., {n}, k) with LD's batch axes "
                      f"{list(ld.shape[:-2])}, got {list(b.shape)}")
    return [b]


def _ldl_solve(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    """LAPACK sytrs: X with A X = B from MatrixLdlFactor's LD and pivots (float64, scipy)."""
    import scipy.linalg.lapack

    ld, piv, b = _wide(xs[0]), np.asarray(xs[1]), _wide(xs[2])
    out = np.zeros_like(b)
    for idx in np.ndindex(b.shape[:-2]):
        if b[idx].size:
            out[idx] = scipy.linalg.lapack.dsytrs(ld[idx], piv[idx], b[idx], lower=1)[0]
    return [out.astype(xs[2].dtype)]


register(OpDef(
    name="MatrixLdlSolve", arity=3, cost_class="gemm", recompute="expensive",
    infer=_ldl_solve_infer, reference=_ldl_solve, scratch=_lapack_scratch("MatrixLdlSolve"),
    nondiff_inputs=(1,),
    flops=lambda ins, outs, a: _batch(ins[2]) * 2 * ins[0].shape[-1] ** 2 * ins[2].shape[-1],
    doc="X with A X = B from A's LDL^T factors (LAPACK sytrs).",
))
