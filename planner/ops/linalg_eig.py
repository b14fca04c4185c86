"""The eigendecomposition of general (non-symmetric) real matrices, torch.linalg.eig's:

    MatrixEig  [A (..., n, n)] -> L (..., n, 2), V (..., n, n, 2)

L and V are complex, given as planes (real then imaginary part on a trailing axis of 2, the
layout of torch.view_as_real, which the torch front end lowers complex tensors to): A V =
V diag(L). The eigenvalues come in LAPACK geev's order (a complex conjugate pair together,
the one of positive imaginary part first), the order numpy.linalg.eig and torch's float64
eig give. Each eigenvector (a column of V) has norm 1, as geev's and torch's, and its phase
is fixed so that its entry of largest modulus (the first within a relative 1e-9 of it) is
real and positive. torch's phase is its LAPACK's (MKL's) choice: of unit norm with that
entry real, but of either sign; which is why the torch front end offers V only to readers
that do not see the phase (docs/front-end.md, "Eigenvalues of general matrices").

Both the CPU kernel (templates/cpu/runtime/kernels/lapack.cpp, `LapackEig`) and the reference
compute in float64 (LAPACK dgeev) for float32 and float64 inputs alike and round once: the
order of eigenvalues then is float64 geev's, which a float32 geev need not keep (MKL's sgeev,
torch's float32 eig, reordered 126 of 2000 normal n x n matrices, n in 1..8, against MKL's
dgeev, bench/eig_orders.py; numpy's float32 eig, OpenBLAS's sgeev, kept that order on all
2000). A matrix holding NaN or inf gives NaN throughout (LAPACK's geev is not defined there),
as does one where geev does not converge. CPU only.

Gradient: derivatives.yaml's linalg_eig_backward (torch/csrc/autograd/FunctionsManual.cpp)
for a real A, with E_ij = conj(L_j) - conj(L_i) (1 on the diagonal):

    M  = (V^H dV - V^H V diag(Re diag(V^H dV))) / E,  its diagonal dL where dL is given
    dA = Re(V^-H M V^H)

in the graph's real ops on the planes (a complex product four MatMuls; the complex solve
with V^H one real MatrixSolve of the 2n x 2n matrix [[Vr, -Vi], [Vi, Vr]], transposed). It
holds for any loss that does not depend on the eigenvectors' phases; torch raises where
one does ("specified up to multiplication by e^{i phi}"), which this rule cannot check:
the torch front end lets V reach only such losses (its moduli), so every gradient it
differentiates is phase-free. Eigenvalues alone (eigvals): dA = Re(V^-H diag(dL) V^H),
which does not depend on V's phases or scale. As torch's, not defined at repeated
eigenvalues when the loss reads V, nor where V is singular (a defective A).

FLOPs: 25 n^3 per matrix (Golub and Van Loan's count for the real Schur form with vectors).

Example:
    >>> import numpy as np
    >>> from planner.ops import get_op
    >>> rotation = np.array([[0.0, -2.0], [2.0, 0.0]])
    >>> values, vectors = get_op("MatrixEig").reference([rotation], {})
    >>> values.round(12) + 0.0
    array([[ 0.,  2.],
           [ 0., -2.]])
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from planner.ops.base import Attrs, GradBuilder, OpDef, TensorType, register
from planner.ops.linalg import _batch, _square

if TYPE_CHECKING:
    from planner.ir.graph import Node

# an entry within this relative distance of the largest modulus counts as a tie: the first
# such is made real and positive (a rotation's eigenvectors have entries of equal modulus,
# which rounding would otherwise pick between)
TIE = 1e-9


def _infer(ins: list[TensorType], a: Attrs) -> list[TensorType]:
    n = _square("MatrixEig", ins[0])
    batch = ins[0].shape[:-2]
    return [TensorType((*batch, n, 2), ins[0].dtype), TensorType((*batch, n, n, 2), ins[0].dtype)]


def phased(v: np.ndarray) -> np.ndarray:
    """Each column of the complex `v` (..., n, n) multiplied by the unit number that makes
    its entry of largest modulus (the first within TIE of it) real and positive."""
    size = np.abs(v)
    top = np.argmax(size >= size.max(axis=-2, keepdims=True) * (1 - TIE), axis=-2)
    pick = np.take_along_axis(v, top[..., None, :], axis=-2)
    return v * np.where(pick == 0, 1, np.conj(pick) / np.where(pick == 0, 1, np.abs(pick)))


def _reference(xs: list[np.ndarray], a: Attrs) -> list[np.ndarray]:
    """numpy.linalg.eig in float64 (LAPACK dgeev: its order, unit eigenvectors), phased."""
    x = np.asarray(xs[0], np.float64)
    n = x.shape[-1]
    bad = ~np.isfinite(x).all(axis=(-2, -1))
    if x.size == 0:
        w, v = np.zeros(x.shape[:-1], complex), np.zeros(x.shape, complex)
    else:
        w, v = np.linalg.eig(np.where(bad[..., None, None], 0.0, x))
        v = phased(v.astype(complex))
    w = np.stack([w.real, w.imag], -1)
    v = np.stack([v.real, v.imag], -1).reshape((*x.shape[:-2], n, n, 2))
    dtype = xs[0].dtype
    return [np.where(bad[..., None, None], np.nan, w).astype(dtype),
            np.where(bad[..., None, None, None], np.nan, v).astype(dtype)]


# ---- the gradient, on planes -----------------------------------------------------------------

class _Planes:
    """Complex matrices as pairs of real tensors (re, im) of shape (..., r, c) in a gradient
    rule: the few complex operations linalg_eig_backward needs, each in the graph's real ops."""

    def __init__(self, g: GradBuilder) -> None:
        self.g = g

    def op(self, name: str, *ins: str, **attrs) -> str:
        return self.g.emit(name, list(ins), attrs)[0]

    def split(self, x: str) -> tuple[str, str]:
        """A planes tensor (..., 2) as its real and imaginary parts."""
        shape = list(self.g.type(x).shape[:-1])
        return tuple(self.op("Reshape", self.op("Slice", x, starts=[k], ends=[k + 1],
                                                axes=[-1]), shape=shape)
                     for k in (0, 1))

    def t(self, x: str) -> str:
        rank = len(self.g.type(x).shape)
        return self.op("Transpose", x, perm=[*range(rank - 2), rank - 1, rank - 2])

    def mm(self, a: str, b: str, ta: bool = False) -> str:
        return self.op("MatMul", a, b, transpose_a=ta, transpose_b=False)

    def hmm(self, a: tuple[str, str], b: tuple[str, str]) -> tuple[str, str]:
        """a^H b."""
        (ar, ai), (br, bi) = a, b
        return (self.op("Add", self.mm(ar, br, True), self.mm(ai, bi, True)),
                self.op("Sub", self.mm(ar, bi, True), self.mm(ai, br, True)))

    def times_h(self, m: tuple[str, str], v: tuple[str, str]) -> tuple[str, str]:
        """m v^H."""
        (mr, mi), (vr, vi) = m, v

        def mt(a: str, b: str) -> str:
            return self.op("MatMul", a, b, transpose_a=False, transpose_b=True)

        return (self.op("Add", mt(mr, vr), mt(mi, vi)), self.op("Sub", mt(mi, vr), mt(mr, vi)))

    def solve_h(self, v: tuple[str, str], b: tuple[str, str]) -> str:
        """Re(X) of V^H X = B: the real 2n x 2n system W^T [Xr; Xi] = [Br; Bi] with W =
        [[Vr, -Vi], [Vi, Vr]] (V^H's real form is W^T), one MatrixSolve."""
        vr, vi = v
        n = self.g.type(vr).shape[-1]
        w = self.op("Concat", self.op("Concat", vr, self.op("Neg", vi), axis=-1),
                    self.op("Concat", vi, vr, axis=-1), axis=-2)
        x = self.op("MatrixSolve", w, self.op("Concat", *b, axis=-2), transpose=True)
        return self.op("Slice", x, starts=[0], ends=[n], axes=[-2])

    def diagonal(self, values: tuple[str, str], eye: str) -> tuple[str, str]:
        """diag(values) of values (..., n) as planes of (..., n, n)."""
        return tuple(self.op("Mul", eye, self.row(x)) for x in values)

    def row(self, x: str) -> str:
        """x (..., n) as (..., 1, n); `column`: (..., n, 1)."""
        *batch, n = self.g.type(x).shape
        return self.op("Reshape", x, shape=[*batch, 1, n])

    def column(self, x: str) -> str:
        *batch, n = self.g.type(x).shape
        return self.op("Reshape", x, shape=[*batch, n, 1])


def _eye(c: _Planes, n: int, dtype: str) -> str:
    """I (n x n): a lower triangle of ones times its transpose."""
    lower = c.op("CausalMask", c.op("Fill", shape=[n, n], value=1.0, dtype=dtype), value=0.0)
    return c.op("Mul", lower, c.op("Transpose", lower, perm=[1, 0]))


def _projected(c: _Planes, v: tuple[str, str], dv: tuple[str, str], values: tuple[str, str],
               eye: str) -> tuple[str, str]:
    """(V^H dV - V^H V diag(Re diag(V^H dV))) / E, E_ij = conj(L_j) - conj(L_i), 1 on the
    diagonal: the part of torch's M that dV gives."""
    pr, pi = c.hmm(v, dv)
    d = c.op("ReduceSum", c.op("Mul", pr, eye), axes=[-2], keepdims=True)  # Re diag, a row
    gr, gi = c.hmm(v, v)
    pr, pi = c.op("Sub", pr, c.op("Mul", gr, d)), c.op("Sub", pi, c.op("Mul", gi, d))
    lr, li = values
    er = c.op("Add", c.op("Sub", c.row(lr), c.column(lr)), eye)  # Re(conj L_j - conj L_i)
    ei = c.op("Sub", c.column(li), c.row(li))                     # Im(conj L_j - conj L_i)
    size = c.op("Add", c.op("Mul", er, er), c.op("Mul", ei, ei))
    return (c.op("Div", c.op("Add", c.op("Mul", pr, er), c.op("Mul", pi, ei)), size),
            c.op("Div", c.op("Sub", c.op("Mul", pi, er), c.op("Mul", pr, ei)), size))


def _gradient(g: GradBuilder, node: Node, grads: list[str | None]) -> list[str | None]:
    """linalg_eig_backward (the module docstring): dA = Re(V^-H M V^H)."""
    dl, dv = grads
    a = node.inputs[0]
    if not g.needs(a) or (dl is None and dv is None):
        return [None]
    c = _Planes(g)
    w, v = node.outputs
    n = g.type(a).shape[-1]
    eye = _eye(c, n, g.type(a).dtype)
    vv = c.split(v)
    if dv is None:
        m = c.diagonal(c.split(dl), eye)
    else:
        m = _projected(c, vv, c.split(dv), c.split(w), eye)
        if dl is not None:  # the diagonal is dL (torch's copy_)
            off = c.op("Sub", c.op("Fill", shape=[n, n], value=1.0, dtype=g.type(a).dtype), eye)
            m = tuple(c.op("Add", c.op("Mul", x, off), d)
                      for x, d in zip(m, c.diagonal(c.split(dl), eye), strict=True))
    return [c.solve_h(vv, c.times_h(m, vv))]


def _scratch(ins: list[TensorType], outs: list[TensorType], a: Attrs, threads: int) -> int:
    """The CPU kernel's float64 workspace per thread (kernels/lapack.cpp's `eig_doubles`): A,
    the right eigenvectors, the eigenvalues' two parts and dgeev's work."""
    n = ins[0].shape[-1] if ins[0].rank >= 2 else 0
    return threads * 8 * (2 * n * n + 2 * n + EIG_WORK * max(n, 1))


EIG_WORK = 66  # dgeev's work, doubles per column: 4 n at least, more for blocked reductions


register(OpDef(
    name="MatrixEig", arity=1, cost_class="gemm", recompute="expensive",
    infer=_infer, reference=_reference, gradient=_gradient, scratch=_scratch,
    flops=lambda ins, outs, a: _batch(ins[0]) * 25 * ins[0].shape[-1] ** 3,
    doc="Eigenvalues and right eigenvectors (complex, as planes) of each general real matrix "
        "(LAPACK geev's order; unit eigenvectors, the largest entry real and positive).",
))

