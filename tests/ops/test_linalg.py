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


def test_a_singular_matrix_gives_infinities_not_an_error():
    """torch raises for the inverse of a singular matrix; the planner's op computes through the
    zero pivot, as its kernels do (inf or NaN), and slogdet gives sign 0, log|det| -inf, as
    torch.s; Cholesky of a matrix that is not positive definite NaN from the failing pivot on."""
    a = np.array([[1.0, 2.0], [2.0, 4.0]])
    (y,) = get_op("MatrixInverse").reference([a], {})
    assert not np.isfinite(y).all()
    sign, logabs = get_op("MatrixSlogdet").reference([a], {})
    assert sign == 0 and logabs == -np.inf
    (low,) = get_op("Cholesky").reference([-np.eye(2)], {})
    assert np.isnan(low[np.tril_indices(2)]).all()  # the upper triangle stays 0


def test_float32_is_rounded_once_from_float64():
    """The kernels factor in float64: the float32 reference is the float64 one rounded."""
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
