"""The small-matrix ops (planner/ops/linalg.py): references against torch.linalg in float64,
gradients against torch autograd (derivatives.yaml's formulas, in float64) and finite
differences, what a singular matrix gives, and the shape errors."""

from __future__ import annotations

import numpy as np
import pytest

from planner.ops import OpError, TensorType, get_op
from tests.ops.opcheck import check_gradient, checked_reference, reference, torch_gradients

torch = pytest.importorskip("torch")

from tests.helpers.linalg_cases import CASES, normal, positive_definite  # noqa: E402


@pytest.mark.parametrize("shape", [(2, 5, 3), (3, 4), (4, 4)])
def test_svd_reference_and_its_singular_values_gradient_are_torchs(shape):
    """The thin SVD reconstructs A with orthonormal U, Vh and torch's singular values; the
    gradient of S (the only one MatrixSvd has) is torch.linalg.svdvals' and finite
    differences'."""
    x = normal(shape)
    u, s, vh = checked_reference("MatrixSvd", [x])
    np.testing.assert_allclose(u @ (s[..., None] * vh), x, atol=1e-12)
    k = min(shape[-2:])
    np.testing.assert_allclose(np.swapaxes(u, -1, -2) @ u, np.broadcast_to(np.eye(k), s.shape
                                                                           + (k,)), atol=1e-12)
    np.testing.assert_allclose(s, torch.linalg.svdvals(torch.tensor(x)).numpy(), rtol=1e-12)
    top = np.take_along_axis(u, np.argmax(np.abs(u), axis=-2)[..., None, :], axis=-2)
    assert (top > 0).all()  # the sign convention the kernels share
    grads, dys = check_gradient("MatrixSvd", [x], of=[1])
    (want,) = torch_gradients(torch.linalg.svdvals, [x], dys, [0])
    np.testing.assert_allclose(grads[0], want, rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("shape", [(2, 5, 3), (3, 4), (4, 4)])
def test_svd_gradient_through_its_vectors(shape):
    """svd_backward through U and Vh against finite differences (the kernels' signs are a
    smooth choice away from ties), and through torch.linalg.pinv, which does not depend on
    the signs, against torch autograd."""
    x = normal(shape, 3)
    check_gradient("MatrixSvd", [x], tol=1e-5)
    from planner.frontend.autodiff import gradients
    from planner.graph import GraphBuilder
    from planner.graph.interpret import run

    b = GraphBuilder("pinv")
    a = b.input("a", x.shape, "float64")
    u, s, vh = b.op_n("MatrixSvd", [a])
    k = min(shape[-2:])
    sinv = b.op_n("Reciprocal", [s])[0]
    scaled = b.op_n("Mul", [b.op_n("Transpose", [vh], {"perm": [*range(len(shape) - 2),
                                                                  len(shape) - 1,
                                                                  len(shape) - 2]})[0],
                            b.op_n("Reshape", [sinv], {"shape": [*shape[:-2], 1, k]})[0]])[0]
    pinv = b.op_n("MatMul", [scaled, u], {"transpose_a": False, "transpose_b": True})[0]
    graph, names = gradients(b.build(outputs=[pinv]), wrt=[a], of=[pinv])
    dy = normal(shape[:-2] + shape[::-1][:2], 4)
    got = run(graph, {a: x, f"grad/{pinv}": dy}, {})
    (want,) = torch_gradients(torch.linalg.pinv, [x], [dy], [0])
    np.testing.assert_allclose(got[pinv], np.linalg.pinv(x), rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(got[names[a]], want, rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize("op,inputs,attrs,fn", CASES, ids=[c[0] for c in CASES])
def test_reference_is_torchs(op, inputs, attrs, fn):
    got = checked_reference(op, inputs, **attrs)
    want = fn(*[torch.tensor(x) for x in inputs])
    want = want if isinstance(want, (tuple, list)) else [want]
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w.numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("op,inputs,attrs,fn", CASES, ids=[c[0] for c in CASES])
def test_gradient_is_torchs(op, inputs, attrs, fn):
    """Against torch autograd in float64; and finite differences, but for Cholesky, whose
    gradient (torch's) assumes a symmetric perturbation of A while its value reads only A's
    lower triangle."""
    if op == "Cholesky":
        from tests.ops.opcheck import apply_rule

        grads, dys, _ = apply_rule(op, inputs, attrs)
    else:
        grads, dys = check_gradient(op, inputs, attrs, of=[1] if op == "MatrixSlogdet" else None)
    if op == "MatrixSlogdet":  # sign has no gradient: torch's dy for it is zero
        dys = [np.zeros_like(dys[0]), *dys] if len(dys) == 1 else dys
    wrt = [k for k, g in enumerate(grads) if g is not None]
    want = torch_gradients(fn, inputs, dys, wrt)
    for k, w in zip(wrt, want, strict=True):
        np.testing.assert_allclose(grads[k], w, rtol=1e-8, atol=1e-10)


def test_a_singular_matrix_gives_nan_not_an_error():
    """Without attr `check`, a matrix that does not factor is no error (torch's `_ex` forms):
    a singular matrix's inverse and solve are NaN (the CPU kernels' LAPACK solve does not run
    on a failed factorization), slogdet gives sign 0, log|det| -inf, as torch's; Cholesky of a
    matrix that is not positive definite NaN from the failing pivot on."""
    a = np.array([[1.0, 2.0], [2.0, 4.0]])
    (y,) = get_op("MatrixInverse").reference([a], {})
    assert np.isnan(y).all()
    (x,) = reference("MatrixSolve", [np.stack([a, np.eye(2)]), np.ones((2, 2, 1))])
    assert np.isnan(x[0]).all() and (x[1] == 1).all()
    sign, logabs = get_op("MatrixSlogdet").reference([a], {})
    assert sign == 0 and logabs == -np.inf
    (low,) = get_op("Cholesky").reference([-np.eye(2)], {})
    assert np.isnan(low[np.tril_indices(2)]).all()  # the upper triangle stays 0


def test_float32_is_rounded_once_from_float64():
    """The reference factors in float64 (the CPU kernels' LAPACK in float32 is within its error
    of it, tests/codegen/test_op_kernels.py): the float32 reference is the float64 one
    rounded."""
    a = normal((3, 6, 6)).astype(np.float32)
    (y,) = get_op("MatrixInverse").reference([a], {})
    assert y.dtype == np.float32
    np.testing.assert_array_equal(y, np.linalg.inv(a.astype(np.float64)).astype(np.float32))


@pytest.mark.parametrize("op,shapes,attrs,message", [
    ("MatrixInverse", [(3, 4)], {}, "square matrices"),
    ("MatrixInverse", [(4,)], {}, "square matrices"),
    ("MatrixSolve", [(3, 3), (4, 2)], {}, "B must be"),
    ("MatrixSolve", [(2, 3, 3), (3, 3, 1)], {}, "B must be"),
    ("Cholesky", [(2, 3)], {}, "square matrices"),
])
def test_shape_errors_name_the_operand(op, shapes, attrs, message):
    opdef = get_op(op)
    with pytest.raises(OpError, match=message):
        opdef.infer([TensorType(s) for s in shapes], opdef.normalize_attrs(attrs))


def test_integer_matrices_are_refused():
    with pytest.raises(OpError, match="float"):
        get_op("MatrixInverse").infer([TensorType((2, 2), "int64")], {})


def test_info_is_torchs():
    """The `_ex` forms' info: the first zero LU pivot, the first failed Cholesky pivot (1-based),
    0 for a matrix that factors; torch's for the same matrices."""
    a = np.stack([np.array([[1.0, 2.0, 0.0], [2.0, 4.0, 1.0], [0.0, 1.0, 1.0]]),
                  np.zeros((3, 3)), np.eye(3)])
    info = reference("MatrixInverse", [a], {"info": True})[1]
    np.testing.assert_array_equal(info, torch.linalg.inv_ex(torch.tensor(a)).info.numpy())
    info = reference("MatrixSolve", [a, np.ones((3, 3, 1))], {"info": True})[1]
    np.testing.assert_array_equal(info, torch.linalg.inv_ex(torch.tensor(a)).info.numpy())
    spd = positive_definite((3, 4, 4))
    spd[1, 1:, 1:] *= -1
    spd[2, 3, 3] = -100.0
    info = reference("Cholesky", [spd], {"info": True})[1]
    assert info.dtype == np.int32
    np.testing.assert_array_equal(info, torch.linalg.cholesky_ex(torch.tensor(spd)).info.numpy())
    assert info.tolist() == [0, 2, 4]


@pytest.mark.parametrize("api,make,fn", [
    ("linalg.cholesky", lambda: np.stack([np.eye(3), -np.eye(3)]), torch.linalg.cholesky),
    ("linalg.cholesky", lambda: np.diag([1.0, 2.0, -1.0]), torch.linalg.cholesky),
    ("linalg.inv", lambda: np.zeros((3, 3)), torch.linalg.inv),
    ("torch.linalg.solve", lambda: np.stack([np.eye(3), np.zeros((3, 3))]),
     lambda a: torch.linalg.solve(a, torch.ones(a.shape[:-1], dtype=a.dtype))),
    ("torch.linalg.lu_factor", lambda: np.stack([np.eye(3), np.diag([1.0, 0.0, 1.0])]),
     torch.linalg.lu_factor),
])
def test_check_raises_torchs_error(api, make, fn):
    """With attr `check` (torch's name of the op that raises), a matrix that does not factor is
    torch's error, word for word (the CPU executor raises the same at step time)."""
    a = make()
    op = {"linalg.cholesky": "Cholesky", "linalg.inv": "MatrixInverse",
          "torch.linalg.lu_factor": "MatrixLuFactor"}.get(api, "MatrixSolve")
    inputs = [a, np.ones((*a.shape[:-1], 1))] if op == "MatrixSolve" else [a]
    with pytest.raises(Exception) as want:
        fn(torch.tensor(a))
    with pytest.raises(OpError) as got:
        reference(op, inputs, {"check": api})
    assert str(got.value) == str(want.value).splitlines()[0]
    fine = positive_definite(a.shape)
    reference(op, [fine, *inputs[1:]], {"check": api})  # no error where each factors


def _symmetric(shape, seed):
    x = normal(shape, seed)
    return x + np.swapaxes(x, -1, -2)


@pytest.mark.parametrize("shape,upper", [((3, 4, 4), False), ((5, 5), True)])
def test_eigh_reference_is_torchs(shape, upper):
    """Eigenvalues torch's (ascending), eigenvectors orthonormal with V diag(L) V^T = A, each
    signed as the kernels sign theirs; only the named triangle is read."""
    a = _symmetric(shape, 0)
    noisy = a + (np.tril(normal(shape, 1), -1) if upper else np.triu(normal(shape, 1), 1))
    w, v = checked_reference("MatrixEigh", [noisy], upper=upper)
    want = torch.linalg.eigvalsh(torch.tensor(noisy), UPLO="U" if upper else "L").numpy()
    np.testing.assert_allclose(w, want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose((v * w[..., None, :]) @ np.swapaxes(v, -1, -2), a, atol=1e-12)
    np.testing.assert_allclose(np.swapaxes(v, -1, -2) @ v,
                               np.broadcast_to(np.eye(shape[-1]), a.shape), atol=1e-12)
    top = np.take_along_axis(v, np.argmax(np.abs(v), axis=-2)[..., None, :], axis=-2)
    assert (top > 0).all()


@pytest.mark.parametrize("of", [None, [0], [1]])
def test_eigh_gradient_is_torchs(of):
    """Against torch autograd in float64 (torch's eigenvectors signed as the reference's, the
    sign held: the gradient is then the same function's), and against central differences
    along symmetric directions (the gradient, torch's, assumes a symmetric perturbation)."""
    from tests.ops.opcheck import apply_rule

    a = _symmetric((2, 4, 4), 2)
    grads, dys, _ = apply_rule("MatrixEigh", [a], of=of)
    w, v = reference("MatrixEigh", [a])
    dys = dys if of is None else [dys[0], np.zeros_like(v)] if of == [0] else \
        [np.zeros_like(w), dys[0]]

    def aligned(t):
        values, vectors = torch.linalg.eigh(t)
        return values, vectors * torch.sign((vectors * torch.tensor(v)).sum(-2, keepdim=True))

    (want,) = torch_gradients(aligned, [a], dys, [0])
    np.testing.assert_allclose(grads[0], want, rtol=1e-8, atol=1e-10)
    h = 1e-6
    for seed in range(3):
        e = _symmetric(a.shape, 10 + seed)

        def loss(x):
            return sum(float((y * dy).sum()) for y, dy in zip(reference("MatrixEigh", [x]), dys,
                                                               strict=True))

        numeric = (loss(a + h * e) - loss(a - h * e)) / (2 * h)
        np.testing.assert_allclose(float((grads[0] * e).sum()), numeric, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("shape", [(3, 5), (2, 5, 3)])
def test_rectangular_lu_factor_is_torchs(shape):
    a = normal(shape, 6)
    lu, pivots = checked_reference("MatrixLuFactor", [a])
    want = torch.linalg.lu_factor(torch.tensor(a))
    np.testing.assert_allclose(lu, want.LU.numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(pivots, want.pivots.numpy())
    (p,) = checked_reference("LuPermutation", [pivots], dtype="float64", rows=shape[-2])
    np.testing.assert_array_equal(p, torch.lu_unpack(want.LU, want.pivots)[0].numpy())


def test_lu_factor_and_its_permutation_are_torchs():
    """LU and the 1-based pivots of torch.linalg.lu_factor; P of torch.lu_unpack; the info of
    a singular matrix, torch's."""
    a = normal((2, 4, 4))
    a[1, :, 1] = 0.0  # singular: a zero column, exactly zero after each elimination step
    lu, pivots, info = checked_reference("MatrixLuFactor", [a], info=True)
    want = torch.linalg.lu_factor_ex(torch.tensor(a))
    np.testing.assert_allclose(lu, want.LU.numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(pivots, want.pivots.numpy())
    np.testing.assert_array_equal(info, want.info.numpy())
    (p,) = checked_reference("LuPermutation", [pivots], dtype="float64")
    np.testing.assert_array_equal(p, torch.lu_unpack(want.LU, want.pivots)[0].numpy())


@pytest.mark.parametrize("shape", [(2, 4, 4), (2, 3, 5), (5, 3)])
def test_lu_factor_gradient_is_torchs(shape):
    """Against torch autograd through lu_factor's LU in float64, and central differences (the
    pivots are constant near a matrix without ties); square, wide and tall."""
    a = normal(shape, 5)
    grads, dys = check_gradient("MatrixLuFactor", [a], of=[0], tol=1e-5)
    (want,) = torch_gradients(lambda t: torch.linalg.lu_factor(t).LU, [a], dys, [0])
    np.testing.assert_allclose(grads[0], want, rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("shape", [(2, 5, 3), (3, 5)])
def test_geqrf_reference_is_torchs(shape):
    """R and the reflectors packed, and tau, as torch.geqrf's (LAPACK's in float64), tall and
    wide; the reflectors' product is the reduced QR's Q."""
    a = normal(shape, 7)
    packed, tau = checked_reference("MatrixGeqrf", [a])
    want = torch.geqrf(torch.tensor(a))
    np.testing.assert_allclose(packed, want[0].numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(tau, want[1].numpy(), rtol=1e-12, atol=1e-12)
    if shape[-2] >= shape[-1]:
        q = torch.linalg.householder_product(want[0], want[1]).numpy()
        np.testing.assert_allclose(q, reference("MatrixQr", [a])[0], atol=1e-12)


def test_matrix_exp_of_a_nonfinite_matrix_is_nan():
    """A NaN or inf entry makes that matrix's exponential NaN throughout (the kernel's scaling
    has no norm to choose from), the others' unchanged."""
    a = np.stack([np.eye(3), np.eye(3)])
    a[1, 0, 2] = np.inf
    (y,) = reference("MatrixExp", [a])
    np.testing.assert_allclose(y[0], np.e * np.eye(3), rtol=1e-14)
    assert np.isnan(y[1]).all()


def _indefinite(shape, seed):
    """Symmetric, indefinite; the second matrix with a zero diagonal (2 x 2 pivots)."""
    a = _symmetric(shape, seed)
    a[1] -= np.diag(np.diag(a[1]))
    return a


def test_ldl_factor_and_solve_are_torchs():
    """LD (lower, zeros above), LAPACK's pivots (negative pairs: 2 x 2 blocks) and info of
    torch.linalg.ldl_factor_ex, only A's lower triangle read; ldl_solve's X torch's; a zero
    matrix's info 1 and, with `check`, torch's error's last words (torch raises it as an
    internal assert)."""
    a = _indefinite((3, 5, 5), 8)
    a[2] = 0.0
    noisy = a + np.triu(normal(a.shape, 9), 1)
    ld, piv, info = checked_reference("MatrixLdlFactor", [noisy], info=True)
    want = torch.linalg.ldl_factor_ex(torch.tensor(a))
    np.testing.assert_allclose(ld, want.LD.numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(piv, want.pivots.numpy())
    np.testing.assert_array_equal(info, want.info.numpy())
    assert (piv[1] < 0).any()
    b = normal((2, 5, 3), 10)
    (x,) = checked_reference("MatrixLdlSolve", [ld[:2], piv[:2], b])
    np.testing.assert_allclose(x, np.linalg.solve(a[:2], b), rtol=1e-10, atol=1e-12)
    with pytest.raises(Exception) as torchs:
        torch.linalg.ldl_factor(torch.tensor(a))
    with pytest.raises(OpError) as ours:
        reference("MatrixLdlFactor", [a], {"check": "torch.linalg.ldl_factor"})
    assert str(ours.value) == "torch.linalg.ldl_factor: Unknown error code: 1."
    assert str(torchs.value).endswith(f"please report a bug to PyTorch. {ours.value}")
