"""MatrixEig (planner/ops/linalg_eig.py): the reference against torch.linalg.eig in float64
(eigenvalues in the same order, eigenvectors the same up to phase), its phase convention, and
the gradient of losses that do not depend on the eigenvectors' phases (the eigenvalues; the
eigenvectors' moduli) against torch autograd and central differences."""

from __future__ import annotations

import numpy as np
import pytest

from planner.frontend.autodiff import gradients
from planner.graph import GraphBuilder
from planner.graph.interpret import run
from tests.ops.opcheck import apply_rule, checked_reference, reference, torch_gradients

torch = pytest.importorskip("torch")

from tests.helpers.linalg_cases import normal  # noqa: E402


def _complex(planes):
    return planes[..., 0] + 1j * planes[..., 1]


@pytest.mark.parametrize("shape,seed", [((3, 5, 5), 0), ((6, 6), 1), ((2, 1, 1), 2)])
def test_eig_reference_is_torchs(shape, seed):
    """Eigenvalues torch's float64 ones in the same order (geev's); each eigenvector of norm 1
    with A v = l v, torch's up to a unit factor (|v^H v_torch| = 1), its entry of largest
    modulus real and positive."""
    a = normal(shape, seed)
    w, v = (_complex(p) for p in checked_reference("MatrixEig", [a]))
    lt, vt = (t.numpy() for t in torch.linalg.eig(torch.tensor(a)))
    np.testing.assert_allclose(w, lt, rtol=1e-12, atol=1e-12)
    assert (np.abs(w.imag) > 1e-3).any() or shape[-1] == 1  # complex pairs among them
    np.testing.assert_allclose(a @ v, v * w[..., None, :], atol=1e-12)
    np.testing.assert_allclose(np.linalg.norm(v, axis=-2), 1, rtol=1e-12)
    np.testing.assert_allclose(np.abs(np.sum(v.conj() * vt, axis=-2)), 1, rtol=1e-12)
    top = np.take_along_axis(v, np.argmax(np.abs(v), axis=-2)[..., None, :], axis=-2)
    assert (top.real > 0).all() and np.allclose(top.imag, 0, atol=1e-15)


def test_ties_and_bad_matrices():
    """A rotation's eigenvectors have entries of one modulus: the first is made real; a
    matrix holding NaN or inf is NaN throughout, the others of its batch computed."""
    w, v = reference("MatrixEig", [np.array([[0.0, -2.0], [2.0, 0.0]])])
    np.testing.assert_allclose(_complex(w), [2j, -2j], atol=1e-15)
    np.testing.assert_allclose(_complex(v), np.array([[1, 1], [-1j, 1j]]) / np.sqrt(2),
                               atol=1e-15)
    a = normal((3, 3, 3), 4).astype(np.float32)
    a[1, 2, 0] = np.inf
    w, v = checked_reference("MatrixEig", [a])
    assert np.isnan(w[1]).all() and np.isnan(v[1]).all()
    assert np.isfinite(w[[0, 2]]).all() and np.isfinite(v[[0, 2]]).all()
    assert w.dtype == v.dtype == np.float32


def test_eigenvalues_gradient_is_torchs():
    """eigvals: dA = Re(V^-H diag(dL) V^H), torch's (complex cotangents as planes), and the
    central differences of the reference."""
    a = normal((2, 5, 5), 5)
    grads, dys, _ = apply_rule("MatrixEig", [a], of=[0])

    def planes(x):
        return torch.view_as_real(torch.linalg.eigvals(x))

    (want,) = torch_gradients(planes, [a], dys, [0])
    np.testing.assert_allclose(grads[0], want, rtol=1e-10, atol=1e-12)
    _central(lambda x: float((reference("MatrixEig", [x])[0] * dys[0]).sum()), a, grads[0])


def _central(loss, a, grad, h=1e-6, tol=1e-6):
    """<grad, e> against (loss(a + h e) - loss(a - h e)) / 2h along a few random e."""
    for seed in range(3):
        e = normal(a.shape, 20 + seed)
        numeric = (loss(a + h * e) - loss(a - h * e)) / (2 * h)
        np.testing.assert_allclose(float((grad * e).sum()), numeric, rtol=tol, atol=tol)


def _moduli_graph(shape, with_values):
    """A -> (L, |V|) (or |V| alone) through MatrixEig and a 2-norm over V's planes, and its
    gradient graph."""
    b = GraphBuilder("moduli")
    x = b.input("a", shape, "float64")
    values, vectors = b.op_n("MatrixEig", [x])
    moduli = b.op_n("ReduceNorm", [vectors], {"axes": [len(shape)], "keepdims": False,
                                              "p": 2.0})[0]
    outs = [values, moduli] if with_values else [moduli]
    graph, names = gradients(b.build(outputs=outs), wrt=[x], of=outs)
    return graph, x, outs, names[x]


@pytest.mark.parametrize("with_values", [True, False])
def test_gradient_through_the_eigenvectors_moduli_is_torchs(with_values):
    """A loss of the eigenvalues and of |V| (which no phase changes; torch's phase check
    passes): linalg_eig_backward's projected formula, against torch autograd and central
    differences of the reference."""
    a = normal((2, 4, 4), 6)
    graph, x, outs, grad = _moduli_graph(a.shape, with_values)
    dys = [normal(graph.tensor(o).shape, 7 + k) for k, o in enumerate(outs)]
    got = run(graph, {x: a, **{f"grad/{o}": d for o, d in zip(outs, dys, strict=True)}},
              {})[grad]

    def torch_outs(t):
        values, vectors = torch.linalg.eig(t)
        return [torch.view_as_real(values), vectors.abs()] if with_values else [vectors.abs()]

    (want,) = torch_gradients(torch_outs, [a], dys, [0])
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-11)

    def loss(m):
        w, v = reference("MatrixEig", [m])
        ys = [w, np.linalg.norm(v, axis=-1)] if with_values else [np.linalg.norm(v, axis=-1)]
        return sum(float((y * d).sum()) for y, d in zip(ys, dys, strict=True))

    _central(loss, a, got)
