"""Named schedules give PyTorch's learning rates step by step (torch.optim.lr_scheduler run on
a one-parameter SGD is the reference); both are float64 formulas of the same quantities, so
they agree to a few float64 roundings per step."""

from __future__ import annotations

import warnings

import pytest
from pydantic import ValidationError

from planner.runtime.schedules import Schedule

torch = pytest.importorskip("torch")
L = torch.optim.lr_scheduler
STEPS, LR = 30, 0.1
# each rounding is 2^-53 relative; the recursive PyTorch forms chain up to STEPS of them
TOL = 64 * STEPS * 2.0**-53

CASES = {
    "warmup": (Schedule(kind="warmup", warmup=5, start_factor=0.1),
               lambda o: L.LinearLR(o, start_factor=0.1, total_iters=5)),
    "cosine": (Schedule(kind="cosine", total=20, min_factor=0.01),
               lambda o: L.CosineAnnealingLR(o, T_max=20, eta_min=0.01 * LR)),
    "warmup-cosine": (Schedule(kind="warmup-cosine", warmup=4, total=STEPS, start_factor=0.1),
                      lambda o: L.SequentialLR(o, [L.LinearLR(o, 0.1, total_iters=4),
                                                   L.CosineAnnealingLR(o, T_max=STEPS - 4)],
                                               milestones=[4])),
    "step": (Schedule(kind="step", step_size=3, gamma=0.5), lambda o: L.StepLR(o, 3, 0.5)),
    "one-cycle": (Schedule(kind="one-cycle", total=STEPS, pct_start=0.25),
                  lambda o: L.OneCycleLR(o, max_lr=LR, total_steps=STEPS, pct_start=0.25,
                                         cycle_momentum=False)),
}


def torch_lrs(make) -> list[float]:
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=LR)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sched = make(opt)
        out = []
        for _ in range(STEPS):
            out.append(opt.param_groups[0]["lr"])
            opt.step()
            sched.step()
    return out


@pytest.mark.parametrize("kind", sorted(CASES))
def test_named_schedules_give_pytorchs_learning_rates(kind):
    schedule, make = CASES[kind]
    want = torch_lrs(make)
    got = schedule.lrs(LR, STEPS)
    assert len(set(want)) > 2  # the schedule moves
    for t, (a, b) in enumerate(zip(got, want, strict=True)):
        assert abs(a - b) <= TOL * abs(b), (t, a, b)


def test_a_warmup_longer_than_the_run_is_refused():
    with pytest.raises(ValidationError, match="warmup .10. must be shorter than total .10."):
        Schedule(kind="warmup-cosine", warmup=10, total=10)
