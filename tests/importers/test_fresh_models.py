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

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch.nn import functional as F  # noqa: E402

from planner.ops.base import get_op  # noqa: E402
from planner.torch.training import trainer  # noqa: E402
from tests.helpers.fresh_models import LR, equal_to_torch  # noqa: E402
from tests.importers import fresh_models  # noqa: E402
from tests.importers.fresh_models import MODELS  # noqa: E402

STEPS = 3


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


def _trainer(model, name: str, batches, optimizer: str, out_dir, loss=None):
    *inputs, labels = batches[0]
    return trainer(model, tuple(inputs), loss=loss or MODELS[name].loss, labels=labels,
                   optimizer=optimizer, lr=LR[optimizer], out_dir=out_dir, costs="analytical")


@pytest.mark.parametrize(("name", "optimizer"), [
    ("moe", "sgd"), ("moe", "adam"), ("gnn", "sgd"), ("dlrm", "sgd"), ("dlrm", "adam"),
    ("mae_fixed_noise", "sgd"), ("focal", "sgd"), ("gpt", "adam")])
def test_trains_like_pytorch(name, optimizer, tmp_path):
    model = _model(name)
    batches = _batches(name)
    t = _trainer(model, name, batches, optimizer, tmp_path)
    losses = [t.step(*b) for b in batches]
    equal_to_torch(losses, t.params(), model, MODELS[name].loss, batches, optimizer)


# ---- random models: the planner's draws reproduced, determinism, statistics ----------------


def _draws(t, op: str, step: int) -> list[np.ndarray]:
    """What each `op` node of the trainer's graph draws at training step `step`, in seed
    order (= graph order: the order the module's forward runs them), by the op's numpy
    reference, which the CPU executor equals bit for bit (tests/importers/test_torch_random.py).
    """
    nodes = sorted((n for n in t.graph.nodes if n.op == op), key=lambda n: n.attrs["seed"])
    ref = get_op(op)
    return [ref.reference([np.array(step, dtype=np.int64)], ref.normalize_attrs(n.attrs))[0]
            for n in nodes]


def _mae_steps(t, batches):
    """The executor's steps: (loss, mask) of each."""
    out = []
    for x, y in batches:
        o = t.executor.step({f.name: v.numpy() for f, v in zip(t._feeds, (x, y), strict=True)})
        out.append((float(o[t.graph.outputs[0]]), np.array(o[t.graph.outputs[2]])))
    return out


def test_mae_trains_like_pytorch_on_the_planners_noise(tmp_path):
    """MAE with torch.rand inside: each step's noise is the RandomUniform node's draw; PyTorch's
    module fed that noise (MAE.forward's `noise`) shuffles, keeps and restores the same patches,
    and its losses and parameters after the steps equal ours."""
    model = _model("mae")
    batches = _batches("mae")
    t = _trainer(model, "mae", batches, "sgd", tmp_path)
    steps = _mae_steps(t, batches)
    noise = [torch.from_numpy(_draws(t, "RandomUniform", k)[0]) for k in range(STEPS)]
    assert not torch.equal(noise[0], noise[1])  # every step draws anew
    with torch.no_grad():
        for (x, _), z, (_, mask) in zip(batches, noise, steps, strict=True):
            np.testing.assert_array_equal(mask, model(x, z)[1].numpy())
    fed = [(x, z, y) for (x, y), z in zip(batches, noise, strict=True)]
    equal_to_torch([loss for loss, _ in steps], t.params(), model, MODELS["mae"].loss, fed, "sgd")


def test_mae_masking_is_deterministic_with_the_ratio(tmp_path):
    """Two trainers of one module draw the same masks and compute the same bits step by step;
    each mask drops exactly 75% of a sample's patches, and over the steps every position is
    dropped 75% of the time (within 5 standard deviations of the binomial)."""
    model = _model("mae")
    steps = 60
    batches = _batches("mae", steps)
    a = _mae_steps(_trainer(model, "mae", batches, "sgd", tmp_path / "a"), batches[:3])
    b = _mae_steps(_trainer(model, "mae", batches, "sgd", tmp_path / "b"), batches[:3])
    for (la, ma), (lb, mb) in zip(a, b, strict=True):
        assert la == lb
        np.testing.assert_array_equal(ma, mb)
    masks = np.stack([m for _, m in a] + [m for _, m in _mae_steps(
        _trainer(model, "mae", batches, "sgd", tmp_path / "c"), batches)])
    n, length = masks.shape[1:]
    keep = fresh_models.MAE().keep
    assert np.all(masks.sum(-1) == length - keep)  # exactly the ratio, per sample
    assert len({m.tobytes() for m in masks}) > 0.9 * len(masks)  # each step draws anew
    freq = masks.reshape(-1, length).mean(0)
    ratio = 1 - keep / length
    sigma = np.sqrt(ratio * (1 - ratio) / (masks.shape[0] * n))
    assert np.all(np.abs(freq - ratio) < 5 * sigma), freq


def test_stochastic_depth_that_keeps_every_branch_trains_like_pytorch(tmp_path):
    """p = 0: bernoulli_(1.0) keeps every branch; the Bernoulli ops are in the step and the
    model trains as PyTorch's."""
    model = _model("stochastic_depth", p=0.0)
    batches = _batches("stochastic_depth")
    t = _trainer(model, "stochastic_depth", batches, "sgd", tmp_path)
    assert sum(n.op == "Bernoulli" for n in t.graph.nodes) == 3
    losses = [t.step(*b) for b in batches]
    equal_to_torch(losses, t.params(), model, F.cross_entropy, batches, "sgd")


def test_stochastic_depth_in_eval_mode_trains_like_pytorch(tmp_path):
    """A module in eval(): stochastic depth is the identity (and BatchNorm uses its running
    statistics), as PyTorch's eval-mode steps."""
    model = _model("stochastic_depth", p=0.5).eval()
    batches = _batches("stochastic_depth")
    t = _trainer(model, "stochastic_depth", batches, "sgd", tmp_path)
    assert not any(n.op == "Bernoulli" for n in t.graph.nodes)
    losses = [t.step(*b) for b in batches]
    equal_to_torch(losses, t.params(), model, F.cross_entropy, batches, "sgd")


def test_stochastic_depth_trains_like_pytorch_on_the_planners_masks(tmp_path, monkeypatch):
    """p = 0.5 (blocks drop 1/6, 1/3, 1/2): each step's per-sample keep masks are the
    Bernoulli nodes' draws; PyTorch's module given those masks trains to the same parameters
    and buffers."""
    model = _model("stochastic_depth", p=0.5)
    batches = _batches("stochastic_depth", 4)
    t = _trainer(model, "stochastic_depth", batches, "sgd", tmp_path)
    losses = [t.step(*b) for b in batches]
    masks = [m for k in range(len(batches)) for m in _draws(t, "Bernoulli", k)]
    assert 0 < sum(float(m.sum()) for m in masks) < sum(m.size for m in masks)  # some drop
    queue = []

    def drawn(x, p, training):  # torchvision's rule on the planner's draw
        return x * (torch.from_numpy(queue.pop(0)).to(x.dtype) / (1.0 - p))

    monkeypatch.setattr(fresh_models, "stochastic_depth", drawn)
    queue.extend(masks * 2)  # for torch_run's float32 run, then its float64 one
    equal_to_torch(losses, t.params(), model, F.cross_entropy, batches, "sgd")
    assert queue == []


def test_stochastic_depth_drop_rates_and_seeds():
    """The drop rate of each block is its p (5 standard deviations over 400 steps of 4
    samples); blocks draw independently (their seeds differ) and the same (seed, step) draws
    the same bits."""
    ref = get_op("Bernoulli")

    def draw(seed, step, p):
        attrs = ref.normalize_attrs({"shape": [4, 1, 1, 1], "p": p, "seed": seed})
        return ref.reference([np.array(step, dtype=np.int64)], attrs)[0].ravel()

    for seed, p in ((1, 1 / 6), (2, 1 / 3), (3, 1 / 2)):
        kept = np.concatenate([draw(seed, k, 1 - p) for k in range(400)])
        sigma = np.sqrt(p * (1 - p) / kept.size)
        assert abs((1 - kept.mean()) - p) < 5 * sigma
    np.testing.assert_array_equal(draw(2, 7, 0.5), draw(2, 7, 0.5))
    a = np.concatenate([draw(1, k, 0.5) for k in range(50)])
    b = np.concatenate([draw(2, k, 0.5) for k in range(50)])
    assert not np.array_equal(a, b)



def test_an_in_step_profile_steps_on_the_example_batch(tmp_path):
    """costs="in-step" runs the step to measure it: on the trainer's example batch, since
    random feeds are not bags' offsets (rows of one (tables, batch) input each) and the
    EmbeddingBag would refuse them."""
    model = _model("dlrm")
    batches = _batches("dlrm", 1)
    *inputs, labels = batches[0]
    t = trainer(model, tuple(inputs), loss=MODELS["dlrm"].loss, labels=labels, optimizer="sgd",
                lr=LR["sgd"], out_dir=tmp_path, costs="in-step")
    assert (tmp_path / "costs.json").exists()
    assert np.isfinite(t.step(*batches[0]))


class _DLRMInForward(fresh_models.DLRM):
    """The DLRM with its interaction written as DLRM's reference code does, in forward: the
    lower triangle's pairs by torch.tril_indices and `Z[:, li, lj]` (a factory of constants
    torch evaluates at import, and an index on two axes)."""

    def forward(self, dense, indices, offsets):
        x = self.bottom(dense)
        vectors = [x] + [t(indices[k], offsets[k]) for k, t in enumerate(self.tables)]
        t = torch.stack(vectors, dim=1)
        z = torch.bmm(t, t.transpose(1, 2))
        li, lj = torch.tril_indices(t.shape[1], t.shape[1], offset=-1)
        return self.top(torch.cat([x, z[:, li, lj]], dim=1)).squeeze(1)


def test_dlrm_with_tril_indices_in_forward_trains_like_pytorch(tmp_path):
    torch.manual_seed(0)
    model = _DLRMInForward().train()
    batches = _batches("dlrm")
    *inputs, labels = batches[0]
    t = trainer(model, tuple(inputs), loss=MODELS["dlrm"].loss, labels=labels, optimizer="sgd",
                lr=LR["sgd"], out_dir=tmp_path, costs="analytical")
    losses = [t.step(*b) for b in batches]
    equal_to_torch(losses, t.params(), model, MODELS["dlrm"].loss, batches, "sgd")
