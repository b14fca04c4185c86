"""The seven fresh models of tests/importers/fresh_models.py through planner.torch's trainer
(torch.export, import, plan, generated CPU executor): after a few steps on fixed batches their
losses and params(), keyed by state_dict() names, equal PyTorch's within float32 noise
(tests/importers/torch_step.py `mismatches`: 10x PyTorch's own float32 error against float64,
plus 16 ulps of the tensor's scale; losses to 1e-4 relative).

The random ones draw from the planner's generator, not torch's, so they are compared where the
draw can be reproduced: the masked autoencoder's noise is computed from its RandomUniform
node's reference (planner/ops/random.py) and handed to PyTorch's module, and the stochastic
depth masks likewise from the Bernoulli nodes; besides, each is deterministic for its seeds
(two trainers draw the same bits step by step, each step draws anew) with the statistics
asked for (MAE's masking ratio exactly per sample and uniform over positions; the drop rate of
each block).
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from planner.ops.base import get_op  # noqa: E402
from planner.torch.training import trainer  # noqa: E402
from tests.importers import fresh_models  # noqa: E402
from tests.importers.fresh_models import MODELS  # noqa: E402
from tests.importers.torch_step import Step, mismatches  # noqa: E402

STEPS = 3
LR = {"sgd": 0.05, "adam": 0.01}


def _batches(name: str, steps: int = STEPS, seed: int = 1) -> list[tuple]:
    g = torch.Generator().manual_seed(seed)
    return [MODELS[name].batch(g, False) for _ in range(steps)]


def _model(name: str, **kw):
    torch.manual_seed(0)
    model = (MODELS[name].make(False) if not kw else _MAKE[name](**kw)).train()
    with torch.no_grad():  # off the init constants (norms' ones and zeros)
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return model


_MAKE = {"stochastic_depth": fresh_models.StochasticDepthResNet}


def _cast(v, dtype):
    return v.to(dtype) if v.is_floating_point() else v


def torch_run(model, loss, batches, optimizer: str, dtype) -> Step:
    """PyTorch's own steps of a copy of `model` in `dtype`: the losses and the state_dict()."""
    model = copy.deepcopy(model).to(dtype)
    opt = (torch.optim.SGD(model.parameters(), lr=LR["sgd"]) if optimizer == "sgd"
           else torch.optim.Adam(model.parameters(), lr=LR["adam"]))
    losses = []
    for *inputs, labels in batches:
        opt.zero_grad()
        value = loss(model(*(_cast(x, dtype) for x in inputs)), _cast(labels, dtype))
        value.backward()
        opt.step()
        losses.append(value.item())
    return Step(losses, {k: v.detach().numpy().copy() for k, v in model.state_dict().items()})


def _trainer(model, name: str, batches, optimizer: str, out_dir, loss=None):
    *inputs, labels = batches[0]
    return trainer(model, tuple(inputs), loss=loss or MODELS[name].loss, labels=labels,
                   optimizer=optimizer, lr=LR[optimizer], out_dir=out_dir, costs="analytical")


def _equal(ours_losses, ours_state, model, loss, batches, optimizer):
    f32 = torch_run(model, loss, batches, optimizer, torch.float32)
    f64 = torch_run(model, loss, batches, optimizer, torch.float64)
    assert set(ours_state) == set(model.state_dict())
    for k, (a, b) in enumerate(zip(ours_losses, f32.loss, strict=True)):
        assert abs(a - b) <= 1e-4 * abs(b), f"step {k}: loss {a} vs torch {b}"
    last = Step(ours_losses[-1], ours_state)
    assert mismatches(last, Step(f32.loss[-1], f32.state), Step(f64.loss[-1], f64.state)) == []


@pytest.mark.parametrize(("name", "optimizer"), [
    ("moe", "sgd"), ("moe", "adam"), ("gnn", "sgd"), ("dlrm", "sgd"), ("dlrm", "adam"),
    ("mae_fixed_noise", "sgd"), ("focal", "sgd"), ("gpt", "adam")])
def test_trains_like_pytorch(name, optimizer, tmp_path):
    model = _model(name)
    batches = _batches(name)
    t = _trainer(model, name, batches, optimizer, tmp_path)
    losses = [t.step(*b) for b in batches]
    _equal(losses, t.params(), model, MODELS[name].loss, batches, optimizer)
