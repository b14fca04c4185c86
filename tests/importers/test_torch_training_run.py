"""Acceptance of a training run through planner.torch: a small transformer with AdamW, two
parameter groups (no decay on biases and norms), a warm-up + cosine schedule,
clip_grad_norm_(1.0) and gradient accumulation over 4 micro-batches for 20 optimizer steps on
the generated CPU executor equals PyTorch's run (each tensor within 10x PyTorch's own float32
error against float64 plus 16 ulps: `mismatches`); stopped in the middle of step 11 (two of
its micro-batches taken), saved with state_dict() and resumed in a fresh executor, it equals
the uninterrupted run bit for bit."""

from __future__ import annotations

import copy
import re

import numpy as np
import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from planner.graph.optimizer import ParamGroup  # noqa: E402
from planner.runtime.schedules import Schedule  # noqa: E402
from planner.torch import trainer  # noqa: E402
from tests.importers.torch_models import CLASSES, MODELS  # noqa: E402
from tests.importers.torch_step import Step, mismatches  # noqa: E402

STEPS, WARMUP, ACCUMULATE = 20, 4, 4
STOP = 10 * ACCUMULATE + 2  # a micro-batch: mid-way through an optimizer step
LR, DECAY, CLIP = 3e-3, 0.05, 1.0
NO_DECAY = r"(bias|norm\d*\.weight)$"
SCHEDULE = Schedule(kind="warmup-cosine", warmup=WARMUP, total=STEPS, start_factor=0.1)


def _case():
    make, shape = MODELS["transformer"]
    torch.manual_seed(0)
    model = make().train()
    with torch.no_grad():  # off LayerNorm's ones and zeros, as trained weights are
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    g = torch.Generator().manual_seed(1)
    batches = [(torch.randn(*shape, generator=g), torch.randint(0, CLASSES, (shape[0],),
                                                                  generator=g))
               for _ in range(STEPS * ACCUMULATE)]
    return model, batches


def _torch_run(model, batches, dtype) -> Step:
    model = copy.deepcopy(model).to(dtype)
    named = dict(model.named_parameters())
    plain = [p for k, p in named.items() if not re.search(NO_DECAY, k)]
    norms = [p for k, p in named.items() if re.search(NO_DECAY, k)]
    opt = torch.optim.AdamW([{"params": plain}, {"params": norms, "weight_decay": 0.0}],
                            lr=LR, weight_decay=DECAY)
    L = torch.optim.lr_scheduler
    sched = L.SequentialLR(opt, [L.LinearLR(opt, 0.1, total_iters=WARMUP),
                                 L.CosineAnnealingLR(opt, T_max=STEPS - WARMUP)], [WARMUP])
    for k, (x, y) in enumerate(batches):
        if k % ACCUMULATE == 0:
            opt.zero_grad()
        value = F.cross_entropy(model(x.to(dtype)), y)
        (value / ACCUMULATE).backward()
        if k % ACCUMULATE != ACCUMULATE - 1:
            continue
        torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        opt.step()
        sched.step()
    return Step(float(value.detach()), {k: v.detach().numpy().copy()
                               for k, v in model.state_dict().items()})


def _ours(model, batches, out_dir):
    x0, y0 = batches[0]
    t = trainer(model, (x0,), loss=F.cross_entropy, labels=y0, optimizer="adamw", lr=LR,
                weight_decay=DECAY, clip_grad_norm=CLIP, out_dir=out_dir, accumulate=ACCUMULATE,
                groups=[ParamGroup(params=NO_DECAY, weight_decay=0.0)])
    # One schedule throughout: this test is about checkpoints, not schedule switches (each
    # variant computes the main schedule's bits: tests/codegen/test_reproducible.py).
    t.executor.set_variant("main")
    return t


def _steps(t, batches, first, last) -> float:
    """Micro-batches [first, last), each optimizer step's learning rate set before its
    micro-batches (its last one reads it)."""
    for k in range(first, last):
        SCHEDULE.apply(t.executor, k // ACCUMULATE)
        loss = t.step(*batches[k])
    return loss


def test_a_transformer_run_equals_pytorchs_and_resumes_bit_for_bit(tmp_path):
    model, batches = _case()
    whole = _ours(model, batches, tmp_path)
    groups = whole.executor.state_dict()["optimizer"]["param_groups"]
    assert len(groups) == 2 and all(g["params"] for g in groups)
    ours = Step(_steps(whole, batches, 0, len(batches)), whole.params())
    f32 = _torch_run(model, batches, torch.float32)
    f64 = _torch_run(model, batches, torch.float64)
    assert set(ours.state) == set(model.state_dict())
    assert mismatches(ours, f32, f64) == []

    stopped = _ours(model, batches, tmp_path)
    _steps(stopped, batches, 0, STOP)
    checkpoint = stopped.executor.state_dict()
    resumed = _ours(model, batches, tmp_path)
    resumed.executor.load_state_dict(checkpoint)
    _steps(resumed, batches, STOP, len(batches))
    got = resumed.params()
    for key, value in ours.state.items():
        np.testing.assert_array_equal(got[key], value, err_msg=key)
