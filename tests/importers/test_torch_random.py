"""torch's random ops through the torch front end (rules_random.py): each imports as the planner's
op on the shared generator, and a ResNet-style block with stochastic depth (torchvision's
`stochastic_depth`: bernoulli_ on an (N, 1, 1, 1) tensor, divided by the keep probability)
trains as PyTorch does given the same keep mask. torch's own bits are not the planner's: the
comparison feeds torch the planner's mask (as tests/importers/torch_step.py does for Dropout).
"""

from __future__ import annotations

import copy
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

from planner.frontend.autodiff import make_training_graph  # noqa: E402
from planner.graph import Optimizer, init_params, run  # noqa: E402
from planner.graph.interpret import train_step  # noqa: E402
from planner.importers.torch.convert import convert  # noqa: E402
from planner.ops import get_op  # noqa: E402
from tests.helpers.random_modules import Residual  # noqa: E402
from tests.importers.torch_step import Step, mismatches  # noqa: E402

LR = 0.1


def _export(model, args):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.export.export(model, args)


class Draws(nn.Module):
    """Every random op a model reaches, each summed into one output."""

    def forward(self, x):
        return (torch.rand_like(x), torch.randn(3, 4), torch.rand(5),
                torch.empty(6).uniform_(-1.0, 2.0), torch.normal(1.0, 3.0, (7,)),
                torch.bernoulli(torch.sigmoid(x)), torch.empty(8, 1).bernoulli_(0.25),
                torch.randint(2, 9, (10,)), torch.randperm(12), torch.randn_like(x),
                torch.empty(4, 3).bernoulli_(torch.full((3,), 0.5)), torch.normal(x, x.abs()))


def test_every_random_op_imports_on_the_shared_generator():
    x = torch.randn(2, 3)
    imported = convert(_export(Draws(), (x,)))
    g = imported.graph
    ops = [g.producer[o].op for o in g.outputs]
    assert ops == ["RandomUniform", "RandomNormal", "RandomUniform", "RandomUniform",
                   "RandomNormal", "Bernoulli", "Bernoulli", "RandomInt", "RandomPerm",
                   "RandomNormal", "Bernoulli", "Add"]
    seeds = [n.attrs["seed"] for n in g.nodes if "seed" in n.attrs]
    assert sorted(set(seeds)) == list(range(1, 13))  # one stream each
    out = run(g, {imported.inputs[0]: x.numpy()}, imported.params(), keep="outputs")
    values = [out[o] for o in g.outputs]
    assert [v.shape for v in values] == [tuple(t.shape) for t in Draws()(x)]
    low, high = values[3].min(), values[3].max()
    assert -1.0 <= low and high < 2.0
    assert values[7].min() >= 2 and values[7].max() < 9 and values[7].dtype == np.int64
    assert sorted(values[8].tolist()) == list(range(12))
    again = run(g, {imported.inputs[0]: x.numpy()}, imported.params(), keep="outputs")
    assert all(np.array_equal(out[o], again[o]) for o in g.outputs)  # deterministic


def test_masked_autoencoder_noise_imports():
    """The masked autoencoder's noise, torch.rand(N, L); its argsort and gather are the
    index ops' (another family)."""
    class Noise(nn.Module):
        def forward(self, x):
            return x + torch.rand(x.shape[0], x.shape[1])

    imported = convert(_export(Noise(), (torch.zeros(4, 16),)))
    assert "RandomUniform" in {n.op for n in imported.graph.nodes}


def test_stochastic_depth_trains_as_pytorch_given_the_same_mask():
    torch.manual_seed(0)
    model = Residual()
    x, y = torch.randn(8, 3, 4, 4), torch.randint(0, 5, (8,))

    class WithLoss(nn.Module):
        def __init__(self, m):
            super().__init__()
            self.model = m

        def forward(self, x, y):
            return F.cross_entropy(self.model(x), y)

    imported = convert(_export(WithLoss(model).train(), (x, y)), module_root="model")
    bern = [n for n in imported.graph.nodes if n.op == "Bernoulli"]
    assert len(bern) == 1 and bern[0].attrs["p"] == 0.5
    graph = make_training_graph(imported.graph, Optimizer.parse("sgd", lr=LR))
    state = {**init_params(graph), **imported.params()}
    feeds = dict(zip(imported.inputs, (x.numpy(), y.numpy()), strict=True))
    out, state = train_step(graph, feeds, state)
    # The mask drawn at step 0 (the step the training graph ran), then torch with that mask.
    opdef = get_op("Bernoulli")
    mask = opdef.reference([np.array(0, dtype=np.int64)],
                           opdef.normalize_attrs(bern[0].attrs))[0]
    assert 0 < mask.sum() < mask.size  # some rows dropped, some kept at this seed

    def torch_run(dtype):
        twin = Residual(mask=torch.from_numpy(mask)).to(dtype)
        twin.load_state_dict(model.state_dict())
        opt = torch.optim.SGD(twin.parameters(), lr=LR)
        loss = F.cross_entropy(twin(x.to(dtype)), y)
        loss.backward()
        opt.step()
        return Step(float(loss), {k: v.detach().numpy() for k, v in twin.state_dict().items()})

    ours = Step(float(out[graph.outputs[0]]), {k: state["model." + k]
                                               for k in model.state_dict()})
    assert mismatches(ours, torch_run(torch.float32), torch_run(torch.float64)) == []
    # The next step draws a fresh mask from the same stream (rng/step moved on).
    assert int(state["rng/step"]) == 1
    nxt = opdef.reference([np.array(1, dtype=np.int64)], opdef.normalize_attrs(bern[0].attrs))[0]
    assert not np.array_equal(nxt, mask)


def test_a_float64_draw_is_refused_naming_the_op():
    class Double(nn.Module):
        def forward(self, x):
            return x + torch.rand(3, dtype=torch.float64)

    from planner.importers.torch.context import TorchImportError

    with pytest.raises(TorchImportError, match="aten.rand.default"):
        convert(_export(Double(), (torch.zeros(3, dtype=torch.float64),)))


def test_copy_keeps_seeds_stable():
    """Two imports of one program give the same seeds (plans stay byte-identical)."""
    x = torch.randn(2, 3)
    a = convert(_export(Draws(), (x,))).graph
    b = convert(_export(copy.deepcopy(Draws()), (x,))).graph
    assert [n.attrs for n in a.nodes] == [n.attrs for n in b.nodes]


def test_dropout2d_drops_whole_channels_through_bernoulli():
    """nn.Dropout2d decomposes to bernoulli_ on an (N, C, 1, 1) tensor: each channel is all
    zero or all x / (1 - p), about p of them dropped."""
    x = torch.rand(16, 32, 3, 3) + 1.0
    model = nn.Dropout2d(0.25).train()
    imported = convert(_export(model, (x,)))
    assert [n.op for n in imported.graph.nodes][0] == "Bernoulli"
    out = run(imported.graph, {imported.inputs[0]: x.numpy()}, imported.params(),
              keep="outputs")[imported.graph.outputs[0]]
    kept = out.reshape(16 * 32, 9).any(axis=1)
    scaled = out.reshape(16 * 32, 9)[kept] / x.numpy().reshape(16 * 32, 9)[kept]
    np.testing.assert_allclose(scaled, 1 / 0.75, rtol=1e-6)
    # 512 channels kept with probability 0.75: 4 standard deviations either way.
    assert abs(kept.mean() - 0.75) < 4 * (0.75 * 0.25 / 512) ** 0.5
