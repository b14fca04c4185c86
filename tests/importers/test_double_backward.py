"""Second-order gradients (`torch.autograd.grad(..., create_graph=True)`: WGAN-GP's gradient
penalty, R1, MAML) through both entry points: never a silently non-differentiable gradient.

torch.compile(backend="planner") refuses a gradient asked of a planned graph's backward
(DoubleBackward, naming the graph and create_graph), as Inductor's aot_autograd does, and what
the refusal advises (the penalty through the uncompiled module, `_orig_mod`) trains as eager
does. Each kind of graph the backend plans is called under create_graph: a forward-only plan
(no gradient wanted: its outputs need none, as eager's), a forward+backward one (refused) and a
compiled optimizer step (a step under no_grad whose parameters keep their autograd after it).
The trainer refuses the same program in one line naming the call and its line.

Tolerance: the compiled terms of the loss are the planner's float32 sums in another order, a
few ulps of the largest value over the few dozen terms summed here: 1e-5 of it (a missing
penalty term is off by percents), as tests/test_torch_compile.py.
"""

from __future__ import annotations

import copy
import warnings

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

import planner.torch  # noqa: E402,F401  (registers the backend)
from planner.torch import TorchImportError  # noqa: E402
from planner.torch.piece import DoubleBackward, PlannerFallback  # noqa: E402
from planner.torch.training import export  # noqa: E402

OPTIONS = {"costs": "analytical"}
RTOL = 1e-5
REFUSED = (r"^graph planner_\d+: torch\.autograd\.grad\(\.\.\., create_graph=True\) .*"
           r"not differentiable again; compute that gradient with the module uncompiled "
           r"\(the compiled module's _orig_mod\)")


def compiled(model):
    torch._dynamo.reset()
    return torch.compile(model, backend="planner", options=OPTIONS)


def critic() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))


def batches(steps: int = 2) -> list:
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(5, 4, generator=g), torch.randn(5, 4, generator=g),
             torch.rand(5, 1, generator=g)) for _ in range(steps)]


def penalty(net, real, fake, eps):
    """WGAN-GP's: the critic's input gradient at a random interpolate, its norm pulled to 1."""
    interp = (eps * real + (1 - eps) * fake).requires_grad_(True)
    g, = torch.autograd.grad(net(interp).sum(), interp, create_graph=True)
    return ((g.norm(2, dim=1) - 1) ** 2).mean()


def assert_close(got, want, what: str) -> None:
    scale = max(float(want.detach().abs().max()), 1e-3)
    err = float((got.detach().double() - want.detach().double()).abs().max())
    assert err <= RTOL * scale, f"{what}: |diff| {err:.3g} > {RTOL} x {scale:.3g}"


def test_wgan_gp_through_the_backend_is_refused_in_one_line():
    net = compiled(critic())
    real, fake, eps = batches(1)[0]
    with warnings.catch_warnings():
        warnings.simplefilter("error", PlannerFallback)
        with pytest.raises(DoubleBackward, match=REFUSED) as e:
            penalty(net, real, fake, eps)
    assert "\n" not in str(e.value)
    # backward(create_graph=True) (a Hessian-vector product) is the same second backward
    x = real.clone().requires_grad_(True)
    with pytest.raises(DoubleBackward, match=REFUSED):
        net(x).sum().backward(create_graph=True)


def run_wgan_gp(net_for_critic, net_for_penalty, model, steps: int = 2) -> list:
    opt = torch.optim.Adam(model.parameters(), lr=1e-2, betas=(0.5, 0.9))
    losses = []
    for real, fake, eps in batches(steps):
        opt.zero_grad()
        loss = (net_for_critic(fake).mean() - net_for_critic(real).mean()
                + 10 * penalty(net_for_penalty, real, fake, eps))
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    return losses


def test_wgan_gp_with_the_penalty_through_orig_mod_trains_as_eager():
    """The refusal's advice: the compiled critic for the Wasserstein terms, the uncompiled
    one (`_orig_mod`, the same parameters) for the penalty."""
    eager = critic()
    model = copy.deepcopy(eager)
    net = compiled(model)
    with warnings.catch_warnings():
        warnings.simplefilter("error", PlannerFallback)
        ours = run_wgan_gp(net, net._orig_mod, model)
    want = run_wgan_gp(eager, eager, eager)
    for k, (a, b) in enumerate(zip(ours, want, strict=True)):
        assert_close(a, b, f"loss of step {k}")
    for (name, p), q in zip(model.named_parameters(), eager.parameters(), strict=True):
        assert_close(p, q, name)


def test_every_planned_graph_kind_keeps_create_graph_honest():
    """Under create_graph, each kind of planned graph either gives what eager gives or
    refuses: never a gradient that silently carries no autograd graph."""
    eager = critic()
    model = copy.deepcopy(eager)
    net = compiled(model)
    x = torch.randn(5, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("error", PlannerFallback)
        # forward only: no input needs a gradient (a frozen copy, an input without one)
        frozen, frozen_eager = copy.deepcopy(model).requires_grad_(False), \
            copy.deepcopy(eager).requires_grad_(False)
        out, want = compiled(frozen)(x), frozen_eager(x)
        assert out.requires_grad is want.requires_grad is False
        assert_close(out, want, "forward-only output")
        with torch.no_grad():
            assert not net(x).requires_grad
        # forward + backward: a first-order gradient as eager's, a second refused
        xs = x.clone().requires_grad_(True)
        g, = torch.autograd.grad(net(xs).sum(), xs)
        ge, = torch.autograd.grad(eager(xs).sum(), xs)
        assert_close(g, ge, "first-order input gradient")
        with pytest.raises(DoubleBackward, match=REFUSED):
            torch.autograd.grad(net(xs).sum(), xs, create_graph=True)
        # a compiled optimizer step: planned under no_grad; the parameters it updates in
        # place keep their autograd, so a second-order gradient after it is eager's
        opt, opt_eager = (torch.optim.SGD(m.parameters(), lr=0.1) for m in (model, eager))
        net(x).sum().backward()
        eager(x).sum().backward()
        step = torch.compile(opt.step, backend="planner", options=OPTIONS)
        step()
        opt_eager.step()
    for (name, p), q in zip(model.named_parameters(), eager.parameters(), strict=True):
        assert p.requires_grad and p.is_leaf, name
        assert_close(p, q, name)
    g, = torch.autograd.grad(model(xs).sum(), xs, create_graph=True)
    ge, = torch.autograd.grad(eager(xs).sum(), xs, create_graph=True)
    assert g.requires_grad and ge.requires_grad
    assert_close(g, ge, "input gradient after the compiled step")
    first = [model[0].weight, model[0].bias, model[2].weight]  # (the last bias: no part of g)
    gg = torch.autograd.grad(g.pow(2).sum(), first)
    gge = torch.autograd.grad(ge.pow(2).sum(), [eager[0].weight, eager[0].bias, eager[2].weight])
    for a, b in zip(gg, gge, strict=True):
        assert_close(a, b, "second-order gradient after the compiled step")


class GradientPenalty(nn.Module):
    """WGAN-GP's critic loss as one module (the trainer's unit: loss(module(*inputs)))."""

    def __init__(self) -> None:
        super().__init__()
        self.critic = critic()

    def forward(self, real, fake, eps):
        return (self.critic(fake).mean() - self.critic(real).mean()
                + 10 * penalty(self.critic, real, fake, eps))


def test_the_trainer_refuses_a_gradient_penalty_in_one_line():
    real, fake, eps = batches(1)[0]
    with pytest.raises(TorchImportError,
                       match=r"^GradientPenalty: torch\.autograd\.grad\(\.\.\., "
                             r"create_graph=True\) at .*test_double_backward\.py:\d+: the "
                             r"trainer differentiates the traced step once.*PyTorch's own "
                             r"loop") as e:
        export(GradientPenalty(), (real, fake, eps), lambda out, y: out, torch.zeros(()))
    assert "\n" not in str(e.value)
    line = int(str(e.value).split(".py:")[1].split(":")[0])
    with open(__file__) as f:
        assert "torch.autograd.grad(" in f.read().splitlines()[line - 1]
