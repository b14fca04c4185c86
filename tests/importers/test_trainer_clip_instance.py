"""Clipping beside a torch.optim instance (issue 84): PyTorch clips outside the optimizer
(`clip_grad_norm_` before `opt.step()`), so the trainer takes `clip_grad_norm=` with an AdamW
whose two weight-decay groups are built by identity, and trains as that loop does.
Tolerance: tests/importers/torch_step.py's `mismatches` (float64 PyTorch the exact answer)."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional
nn = torch.nn

from planner.errors import UserError  # noqa: E402
from planner.torch import trainer  # noqa: E402
from tests.importers.torch_step import Step, mismatches  # noqa: E402


def groups(model):
    decay = [p for p in model.parameters() if p.ndim > 1]
    rest = [p for p in model.parameters() if p.ndim <= 1]
    return torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                              {"params": rest, "weight_decay": 0.0}], lr=0.01)


def torch_loop(model, batches, dtype):
    model = copy.deepcopy(model).to(dtype)
    opt = groups(model)
    for x, y in batches:
        loss = F.cross_entropy(model(x.to(dtype)), y)
        opt.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        opt.step()
    return Step(float(loss), {k: v.detach().numpy().copy() for k, v in model.state_dict().items()})


def test_clipping_with_an_adamw_instance_and_identity_groups_trains_as_pytorch(tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 3))
    g = torch.Generator().manual_seed(1)
    batches = [(torch.randn(8, 6, generator=g) * 4, torch.randint(0, 3, (8,), generator=g))
               for _ in range(4)]
    want32, want64 = torch_loop(model, batches, torch.float32), torch_loop(model, batches,
                                                                            torch.float64)
    t = trainer(model, (batches[0][0],), loss=F.cross_entropy, labels=batches[0][1],
                optimizer=groups(model), clip_grad_norm=0.5, out_dir=tmp_path)
    last = [t.step(*b) for b in batches][-1]
    assert mismatches(Step(last, t.params()), want32, want64) == []
    with pytest.raises(UserError, match=r"trainer setting clip_grad_norm=-1\.0: "):
        trainer(model, (batches[0][0],), loss=F.cross_entropy, labels=batches[0][1],
                optimizer=groups(model), clip_grad_norm=-1.0, out_dir=tmp_path)
    with pytest.raises(UserError, match="trainer setting lr: the optimizer instance holds"):
        trainer(model, (batches[0][0],), loss=F.cross_entropy, labels=batches[0][1],
                optimizer=groups(model), lr=0.1, out_dir=tmp_path)
