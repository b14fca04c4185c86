"""torch.linalg's solve, cholesky, inv, slogdet, eigh, eig, eigvals, lu_factor, lu_solve, lu,
qr, svdvals, householder_product, matrix_exp and torch's geqrf and ormqr on the CPU executor,
whose kernels call LAPACK in float32 (templates/cpu/runtime/kernels/lapack.cpp; matrix_exp:
float64 GEMMs and an LU solve, eig: dgeev, each rounded once): forward and gradients against
torch in float32 and float64 (within 10x torch's own float32 error plus 16 ulps: both factor
in float32, each with an error that grows with the matrix's condition number, which these
cases keep below about 100), torch's error at step time for a matrix that does not factor,
and layers solving a small SPD system and a flow's LU-factored linear map trained through
planner.torch.trainer as PyTorch trains them."""

from __future__ import annotations

import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

from tests.importers.opinfo_cases import compare  # noqa: E402
from tests.importers.torch_step import Step, mismatches, sgd_run  # noqa: E402


class Factorizations(torch.nn.Module):
    """Each op on a matrix made from parameters: SPD ones for cholesky and eigh (eigenvectors
    read through V diag(f(L)) V^T, which does not depend on their signs)."""

    def __init__(self) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.a = torch.nn.Parameter(torch.randn(2, 4, 4, generator=g) + 3 * torch.eye(4))
        self.b = torch.nn.Parameter(torch.randn(2, 4, 3, generator=g))

    def forward(self):
        spd = self.a @ self.a.mT + torch.eye(4)
        w, v = torch.linalg.eigh(spd)
        sign, logabs = torch.linalg.slogdet(self.a)
        lu, pivots = torch.linalg.lu_factor(self.a)
        p, low, up = torch.linalg.lu(self.a)
        wide_p, wide_low, wide_up = torch.linalg.lu(self.b.mT)  # 3 x 4
        return (torch.linalg.solve(self.a, self.b), torch.linalg.cholesky(spd),
                torch.linalg.inv(self.a), sign * logabs, w, (v * w.sqrt().unsqueeze(-2)) @ v.mT,
                torch.linalg.solve(self.a.mT, self.b), lu,
                torch.linalg.lu_solve(lu, pivots, self.b), p @ low, up,
                torch.linalg.lu_factor(self.b).LU, wide_p @ wide_low, wide_up)


def _eager(module, cotangents, dtype, differentiable=None):
    """Outputs and parameter gradients of the module in `dtype`, the gradients of the first
    `differentiable` outputs (all by default)."""
    m = copy.deepcopy(module).to(dtype)
    outs = m()
    torch.autograd.backward(outs[:differentiable],
                            [c.to(dtype) for c in cotangents[:differentiable]])
    return ([o.detach().numpy() for o in outs],
            {k: p.grad.numpy() for k, p in m.named_parameters()})


def _assert_matches_torch(module: torch.nn.Module, seed: int,
                          differentiable: int | None = None) -> None:
    """`module` (no inputs: its parameters are the matrices) through torch.compile(backend=
    "planner") against torch in float32, float64 the noise floor: every output, and every
    parameter's gradient of the first `differentiable` outputs (all: None) against seeded
    cotangents."""
    g = torch.Generator().manual_seed(seed)
    cotangents = [torch.randn(o.shape, generator=g) for o in module()]
    (o32, g32), (o64, g64) = (_eager(module, cotangents, d, differentiable)
                              for d in (torch.float32, torch.float64))
    mine = copy.deepcopy(module)
    outs = torch.compile(mine, backend="planner", options={"fallback": False})()
    torch.autograd.backward(outs[:differentiable], cotangents[:differentiable])
    for k, out in enumerate(outs):
        assert not compare(f"output {k}", out.detach().numpy(), o32[k], o64[k])
    for name, p in mine.named_parameters():
        assert not compare(name, p.grad.numpy(), g32[name], g64[name])


def test_cpu_executor_matches_torch_forward_and_backward():
    _assert_matches_torch(Factorizations(), seed=5)


class Reflections(torch.nn.Module):
    """householder_product and ormqr (each side, each transpose) of reflectors geqrf made,
    held as parameters; geqrf itself (which torch does not differentiate) and the Q it
    implies; matrix_exp of matrices of 1-norm near 1 and near 10 (squared twice); qr and
    svdvals (LAPACK's geqrf, orgqr and gesdd in the CPU kernels)."""

    def __init__(self) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(2)
        v, tau = torch.geqrf(torch.randn(2, 5, 3, generator=g))
        self.v, self.tau = torch.nn.Parameter(v), torch.nn.Parameter(tau)
        self.c = torch.nn.Parameter(torch.randn(2, 5, 4, generator=g))
        self.d = torch.nn.Parameter(torch.randn(2, 4, 5, generator=g))
        self.m = torch.nn.Parameter(torch.randn(2, 4, 4, generator=g))
        self.x = torch.nn.Parameter(torch.randn(6, 4, generator=g))

    def forward(self):
        packed, tau = torch.geqrf(self.x.detach())
        q, r = torch.linalg.qr(self.x)
        return (torch.linalg.householder_product(self.v, self.tau),
                torch.ormqr(self.v, self.tau, self.c),
                torch.ormqr(self.v, self.tau, self.c, transpose=True),
                torch.ormqr(self.v, self.tau, self.d, left=False),
                torch.ormqr(self.v, self.tau, self.d, left=False, transpose=True),
                torch.linalg.matrix_exp(0.3 * self.m), torch.linalg.matrix_exp(3 * self.m),
                q, r, torch.linalg.svdvals(self.x),
                packed, tau, torch.linalg.householder_product(packed, tau))


class Eigen(torch.nn.Module):
    """eig and eigvals of general matrices (complex pairs and real eigenvalues): the
    eigenvalues as planes, their moduli, and the eigenvectors' moduli (the reader of V that
    sees no phase, which is all the import offers of V)."""

    def __init__(self) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(3)
        self.a = torch.nn.Parameter(torch.randn(2, 4, 4, generator=g))
        self.b = torch.nn.Parameter(torch.randn(5, 5, generator=g))

    def forward(self):
        values, vectors = torch.linalg.eig(self.a)
        return (torch.view_as_real(torch.linalg.eigvals(self.b)), torch.view_as_real(values),
                vectors.abs(), values.abs().square().sum())


def test_eig_matches_torch_forward_and_backward():
    _assert_matches_torch(Eigen(), seed=6)


class _Vectors(torch.nn.Module):
    def __init__(self, read) -> None:
        super().__init__()
        self.read = read

    def forward(self, x):
        return self.read(torch.linalg.eig(x).eigenvectors)


@pytest.mark.parametrize("read,reader", [(lambda v: torch.view_as_real(v), "'view_as_real'"),
                                          (lambda v: v.real * 2, "'view_as_real' from real"),
                                          (lambda v: v[0].abs(), "'select'")])
def test_eigenvectors_read_by_their_phase_are_refused(read, reader):
    """Any reader of V but its modulus sees the phase, which is LAPACK's choice (torch's MKL's,
    not the planner's OpenBLAS's): one line naming the reader, V and the node."""
    import planner.torch

    with pytest.raises(planner.torch.TorchImportError) as e:
        planner.torch.convert(torch.export.export(_Vectors(read), (torch.randn(3, 3),)))
    assert f"node {reader}" in str(e.value)
    assert "reads V (the eigenvectors) of node 'linalg_eig'" in str(e.value)
    assert "only their moduli (.abs()) and the eigenvalues are offered" in str(e.value)


def test_reflections_and_matrix_exp_match_torch_forward_and_backward():
    """(geqrf's outputs and what is made of them carry no gradient: torch's backward skips
    them, as the planner's.)"""
    _assert_matches_torch(Reflections(), seed=6, differentiable=10)  # the outputs before geqrf's


class Whitened(torch.nn.Module):
    """A layer that solves a small SPD system: K = L L^T + I from a parameter, x -> K^-1 x by
    its Cholesky factor (cholesky, then two triangular solves as one torch.linalg.solve), and
    a log-determinant term, as a Gaussian-process layer's."""

    def __init__(self) -> None:
        super().__init__()
        self.low = torch.nn.Parameter(0.3 * torch.randn(6, 6))
        self.head = torch.nn.Linear(6, 3)

    def forward(self, x):
        k = self.low @ self.low.T + torch.eye(6)
        factor = torch.linalg.cholesky(k)
        solved = torch.linalg.solve(k, x.T).T
        logdet = 2 * torch.log(torch.diagonal(factor)).sum()
        return self.head(solved) + 0.01 * logdet



class LuFlow(torch.nn.Module):
    """A normalising-flow step of an invertible linear map W: z = W^-1 x by W's LU factors
    (lu_factor, lu_solve), log|det W| from U's diagonal, as a flow's likelihood reads it."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(6, 6) / 3 + torch.eye(6))
        self.head = torch.nn.Linear(6, 3)

    def forward(self, x):
        lu, pivots = torch.linalg.lu_factor(self.w)
        z = torch.linalg.lu_solve(lu, pivots, x.T).T
        logdet = torch.log(torch.diagonal(lu).abs()).sum()
        return self.head(z) - 0.01 * logdet


@pytest.mark.parametrize("model", [Whitened, LuFlow])
def test_linear_algebra_layers_train_as_pytorch(model, tmp_path):
    from planner.torch import trainer

    torch.manual_seed(0)
    model = model()
    g = torch.Generator().manual_seed(1)
    batches = [(torch.randn(8, 6, generator=g), torch.randint(0, 3, (8,), generator=g))
               for _ in range(4)]
    lr = 0.1
    t = trainer(copy.deepcopy(model), (batches[0][0],), loss=F.cross_entropy,
                labels=batches[0][1], optimizer="sgd", lr=lr, out_dir=tmp_path)
    for x, y in batches:
        value = t.step(x, y)
    ours = Step(value, {k: np.asarray(v) for k, v in t.params().items()})
    f32 = sgd_run(model, batches, torch.float32, lr)
    f64 = sgd_run(model, batches, torch.float64, lr)
    assert not mismatches(ours, f32, f64, set(f64.state))
    square = "low" if isinstance(model, Whitened) else "w"
    assert not np.allclose(ours.state[square], model.state_dict()[square].numpy())  # it trained


class Factor(torch.nn.Module):
    def forward(self, a, m):
        return torch.linalg.cholesky(a).sum() + torch.linalg.inv(m).sum()


def test_a_matrix_that_does_not_factor_is_torchs_error_at_step_time():
    """The executor raises torch's message (naming the op) and goes on: the next step, of
    matrices that factor, is torch's."""
    compiled = torch.compile(Factor(), backend="planner", options={"fallback": False})
    good, m = torch.eye(3).expand(2, 3, 3) * 2, torch.eye(3) + 0.5
    assert float(compiled(good, m)) == pytest.approx(float(Factor()(good, m)), rel=1e-6)
    not_positive_definite = good.clone()
    not_positive_definite[1, 2, 2] = -1.0
    for a, b in ((not_positive_definite, m), (good, torch.zeros(3, 3))):
        with pytest.raises(Exception) as want:
            Factor()(a, b)
        with pytest.raises(RuntimeError) as got:
            compiled(a, b)
        assert str(want.value).splitlines()[0] in str(got.value)
    assert float(compiled(good, m)) == pytest.approx(float(Factor()(good, m)), rel=1e-6)


class Ldl(torch.nn.Module):
    def forward(self, a, b):
        ld, pivots = torch.linalg.ldl_factor(a)
        return ld, pivots, torch.linalg.ldl_solve(ld, pivots, b)


def test_ldl_factor_and_solve_match_torch():
    """Symmetric indefinite matrices (the second with a zero diagonal: 2 x 2 pivots), only the
    lower triangle read; torch's LD and pivots, and X within float32 error of torch's float64
    one. A zero matrix is torch's error at step time (torch's words after its internal
    assert's preamble)."""
    g = torch.Generator().manual_seed(3)
    a = torch.randn(2, 5, 5, generator=g)
    a = a + a.mT
    a[1] -= torch.diag(torch.diag(a[1]))
    noisy = a + torch.triu(torch.randn(2, 5, 5, generator=g), 1)
    b = torch.randn(2, 5, 3, generator=g)
    compiled = torch.compile(Ldl(), backend="planner", options={"fallback": False})
    ours = [o.numpy() for o in compiled(noisy, b)]
    t32 = [o.numpy() for o in Ldl()(a, b)]
    t64 = [o.numpy() for o in Ldl()(a.double(), b.double())]
    assert (t64[1] < 0).any()  # a 2 x 2 block
    for k in range(3):
        assert not compare(f"output {k}", ours[k], t32[k], t64[k])
    with pytest.raises(RuntimeError) as want:
        Ldl()(torch.zeros(5, 5), b[0])
    with pytest.raises(RuntimeError) as got:
        compiled(torch.zeros(2, 5, 5), b)
    assert "torch.linalg.ldl_factor: Unknown error code: 1." in str(got.value)
    assert str(want.value).endswith("torch.linalg.ldl_factor: Unknown error code: 1.")
