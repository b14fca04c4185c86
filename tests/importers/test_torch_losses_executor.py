"""The losses' and random ops' kernels inside a training executor (planner.torch.trainer, the CPU
executor): losses with options train as PyTorch does (tests/importers/torch_training_check.py's
float32-noise rule), and a step with random ops is the reference interpreter's step (the same
draws, the step counter moving on), deterministic for the plan.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

from planner.frontend.autodiff import make_training_graph  # noqa: E402
from planner.graph import Optimizer, init_params  # noqa: E402
from planner.graph.interpret import train_step  # noqa: E402
from planner.importers.torch.convert import convert  # noqa: E402
from planner.torch.training import export, trainer  # noqa: E402
from tests.helpers.random_modules import Residual  # noqa: E402
from tests.importers.torch_training_check import trains_like_pytorch  # noqa: E402

WEIGHT = torch.tensor([0.5, 2.0, 1.0, 0.25, 3.0])


def smoothed_weighted_focal(z, y):
    """Cross-entropy with class weights and label smoothing, per sample, focal-weighted by the
    user: NLLLoss and its gradient, LogSoftmax, and arithmetic after a reduction='none' loss."""
    ce = F.cross_entropy(z, y, weight=WEIGHT.to(z.dtype), label_smoothing=0.1, reduction="none",
                         ignore_index=3)
    return ((-torch.exp(-ce) + 1) ** 2 * ce).sum() / 8


def tagged_bce(z, t):
    return F.binary_cross_entropy_with_logits(z, t, pos_weight=torch.linspace(0.5, 3, 5,
                                                                              dtype=z.dtype))


@pytest.mark.parametrize("loss,target", [
    (smoothed_weighted_focal, lambda g: torch.randint(0, 5, (8,), generator=g)),
    (tagged_bce, lambda g: torch.rand(8, 5, generator=g)),
], ids=["focal_ce", "bce_pos_weight"])
def test_losses_with_options_train_as_pytorch_on_the_executor(loss, target, tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 5))
    g = torch.Generator().manual_seed(1)
    batches = [(torch.randn(8, 6, generator=g), target(g)) for _ in range(3)]
    trains_like_pytorch(model, loss, batches, "sgd", tmp_path)


def test_a_step_with_random_ops_is_the_reference_step(tmp_path):
    """Stochastic depth and a random noise input: the executor's parameters after three steps
    are the reference interpreter's (the same masks each step: rng/step moves on alike)."""
    torch.manual_seed(0)

    class Noisy(Residual):
        def forward(self, x):
            return super().forward(x + 0.1 * torch.randn_like(x))

    model = Noisy()
    x, y = torch.randn(8, 3, 4, 4), torch.randint(0, 5, (8,))
    t = trainer(model, (x,), loss=F.cross_entropy, labels=y, optimizer="sgd", lr=0.1,
                out_dir=tmp_path / "noisy")
    losses = [t.step(x, y) for _ in range(3)]
    assert len(set(losses)) == 3  # fresh draws each step

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        imported = convert(export(model, (x,), F.cross_entropy, y), module_root="model")
    graph = make_training_graph(imported.graph, Optimizer.parse("sgd", lr=0.1))
    state = {**init_params(graph), **imported.params()}
    feeds = dict(zip(imported.inputs, (x.numpy(), y.numpy()), strict=True))
    reference = []
    for _ in range(3):
        out, state = train_step(graph, feeds, state)
        reference.append(float(out[graph.outputs[0]]))
    # The same draws on both sides; what differs is the order of float32 sums (oneDNN's
    # blocked convolution and GEMMs against numpy's): a few ulps per op, ~1e-6 relative after
    # three steps of this net, far below what a different mask moves (a dropped residual row).
    np.testing.assert_allclose(losses, reference, rtol=1e-5)
    ours = t.params()
    for name in model.state_dict():
        np.testing.assert_allclose(ours[name], state["model." + name], rtol=1e-4, atol=1e-6)


def test_resuming_from_a_checkpoint_continues_the_random_stream(tmp_path):
    """Two steps, a state_dict, a fresh executor loading it, one more step: the parameters of
    the uninterrupted three steps bit for bit (rng/step is in the checkpoint, so the third
    step draws the third step's masks, not the first's)."""
    torch.manual_seed(0)
    model = Residual(p=0.5)
    x, y = torch.randn(8, 3, 4, 4), torch.randint(0, 5, (8,))

    def fresh(name):
        t = trainer(model, (x,), loss=F.cross_entropy, labels=y, optimizer="sgd", lr=0.1,
                    out_dir=tmp_path / name)
        t.executor.set_variant("main")  # one schedule throughout: bit for bit
        return t

    whole = fresh("whole")
    for _ in range(3):
        whole.step(x, y)
    first = fresh("first")
    first.step(x, y)
    first.step(x, y)
    saved = first.executor.state_dict()
    assert int(saved["planner"]["rng/step"]) == 2
    resumed = fresh("resumed")
    resumed.executor.load_state_dict(saved)
    resumed.step(x, y)
    want, got = whole.params(), resumed.params()
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)


def test_a_label_out_of_range_stops_the_step_naming_the_loss(tmp_path):
    torch.manual_seed(0)
    model = nn.Linear(6, 5)

    def weighted(z, y):
        return F.cross_entropy(z, y, weight=WEIGHT.to(z.dtype), ignore_index=-1)

    x, y = torch.randn(4, 6), torch.tensor([0, 4, -1, 2])
    t = trainer(model, (x,), loss=weighted, labels=y, optimizer="sgd", lr=0.1,
                out_dir=tmp_path / "weighted")
    before = t.params()
    with pytest.raises(RuntimeError, match=r"NLLLoss\): label 7 out of range \[0, 5\) "
                                           r"\(ignore_index -1\)"):
        t.step(x, torch.tensor([0, 7, -1, 2]))
    after = t.params()
    assert all(np.array_equal(before[k], after[k]) for k in before)  # nothing half-done
    t.step(x, y)  # the ignored -1 is no error
