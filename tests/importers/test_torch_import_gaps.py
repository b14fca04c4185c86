"""The PyTorch models that did not import (issue 35): the trainer called more than once, a
loss of several terms, `aten.as_strided` and `aten.index.Tensor`, and errors that name the
module path. PyTorch is the reference throughout."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

import planner.torch  # noqa: E402
from planner.graph import Graph  # noqa: E402
from planner.graph.autodiff import AutodiffError, find_loss  # noqa: E402
from planner.graph.validate import GraphError, check_graph  # noqa: E402
from planner.torch.convert import convert  # noqa: E402
from planner.torch.training import export  # noqa: E402
from tests.importers.torch_step import Step, mismatches  # noqa: E402

STEPS, LR = 3, 0.05


def test_trainer_can_be_called_again():
    """The package's `trainer` stays the function after its module is imported (a second
    call once raised "'module' object is not callable")."""
    for _ in range(3):
        with pytest.raises(ValueError, match="unknown optimizer 'nope'"):
            planner.torch.trainer(nn.Linear(2, 2), (torch.randn(1, 2),), loss=F.mse_loss,
                                  labels=torch.randn(1, 2), optimizer="nope")
    assert callable(planner.torch.trainer)


class VAE(nn.Module):
    """A tiny VAE; the reparametrization's noise is an input (PyTorch's random stream is not
    the planner's), so both sides see the same z."""

    def __init__(self) -> None:
        super().__init__()
        self.enc = nn.Linear(6, 8)
        self.mu, self.logvar = nn.Linear(8, 3), nn.Linear(8, 3)
        self.dec = nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 6))

    def forward(self, x, noise):
        h = torch.tanh(self.enc(x))
        mu, logvar = self.mu(h), self.logvar(h)
        return self.dec(mu + noise * torch.exp(0.5 * logvar)), mu, logvar


def vae_loss(out, x, beta=0.1):
    recon, mu, logvar = out
    kl = -0.5 * torch.mean(torch.sum(1 + logvar - mu.pow(2) - logvar.exp(), dim=1))
    return F.mse_loss(recon, x) + beta * kl


def _vae_torch_run(model, batches, dtype):
    model = copy.deepcopy(model).to(dtype)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    for x, noise in batches:
        opt.zero_grad()
        value = vae_loss(model(x.to(dtype), noise.to(dtype)), x.to(dtype))
        value.backward()
        opt.step()
    return Step(float(value), {k: v.detach().numpy().copy()
                               for k, v in model.state_dict().items()})


def test_vae_loss_of_two_terms_trains_like_pytorch(tmp_path):
    """F.mse_loss + beta * KL: the traced sum is the graph's loss (no loss op writes it)."""
    torch.manual_seed(0)
    model = VAE()
    batches = [(torch.randn(4, 6), torch.randn(4, 3)) for _ in range(STEPS)]
    x0, noise0 = batches[0]
    t = planner.torch.trainer(model, (x0, noise0), loss=vae_loss, labels=x0, lr=LR,
                              out_dir=tmp_path)
    assert t.imported.graph.loss == t.imported.graph.outputs[0]
    losses = [t.step(x, noise, x) for x, noise in batches]
    ours = Step(losses[-1], t.params())
    f32 = _vae_torch_run(model, batches, torch.float32)
    f64 = _vae_torch_run(model, batches, torch.float64)
    assert set(ours.state) == set(model.state_dict())
    assert mismatches(ours, f32, f64) == []


def test_a_marked_loss_must_be_a_float_scalar_output():
    """Graph.loss from a hand-written graph JSON is checked like the rest of the graph."""
    imported = convert(export(VAE(), (torch.randn(4, 6), torch.randn(4, 3)), vae_loss,
                              torch.randn(4, 6)))
    graph = imported.graph
    assert Graph.from_json(graph.to_json()) == graph
    hidden = next(n.outputs[0] for n in graph.nodes if n.op == "MatMul")
    for loss, problem in ((hidden, "is not one of the graph's outputs"),
                          ("nothing", "is not one of the graph's outputs")):
        bad = Graph.model_validate({**graph.model_dump(), "loss": loss})
        with pytest.raises(GraphError, match=f"graph loss {loss!r} {problem}"):
            check_graph(bad)
        with pytest.raises(AutodiffError, match=problem):
            find_loss(bad)
    wide = Graph.model_validate({**graph.model_dump(), "outputs": (*graph.outputs, hidden),
                                 "loss": hidden})
    with pytest.raises(GraphError, match="must be a float scalar"):
        check_graph(wide)
