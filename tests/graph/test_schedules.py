"""Named schedules give PyTorch's learning rates step by step (torch.optim.lr_scheduler run on
a one-parameter SGD is the reference); both are float64 formulas of the same quantities, so
they agree to a few float64 roundings per step."""

from __future__ import annotations

import json
import warnings

import numpy as np
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


def test_a_schedule_recorded_in_the_graph_equals_the_one_applied_from_python():
    # The same run twice in the reference interpreter, with accumulation over 2 micro-batches
    # and two groups: the rates computed in the step (ScheduledLR) against the rates set
    # between steps; first rates exact in float32, so bit for bit.
    from planner.frontend.options import GraphOptions
    from planner.frontend.prepare import prepare
    from planner.graph.interpret import init_params, random_feeds, train_step
    from planner.graph.optimizer import Optimizer, ParamGroup

    schedule = Schedule(kind="warmup-cosine", warmup=2, total=6, start_factor=0.5)
    spec = "zoo:mlp?batch=4&hidden=8&in_features=5&classes=3"
    settings = dict(kind="adamw", lr=0.125,
                    groups=[ParamGroup(params="bias$", lr=0.25, weight_decay=0.0)])
    recorded = prepare(spec, GraphOptions(optimizer=Optimizer(**settings, schedule=schedule),
                                          accumulate=2))
    applied = prepare(spec, GraphOptions(optimizer=Optimizer(**settings), accumulate=2))
    a, b = init_params(recorded), init_params(applied)
    for t in range(2 * schedule.total):
        feeds = random_feeds(recorded, seed=t)
        _, a = train_step(recorded, feeds, a)
        for group, lr in ((0, 0.125), (1, 0.25)):
            b[f"optim/group/{group}/lr"] = np.float32(lr * schedule.factor(t // 2))
        _, b = train_step(applied, feeds, b)
    for name, value in b.items():
        if "/lr" not in name:
            np.testing.assert_array_equal(a[name], value, err_msg=name)
    assert int(a["optim/schedule_step"]) == schedule.total


@pytest.mark.parametrize("text,message", [
    ("cosine:total=0", "total: Input should be greater than or equal to 1"),
    ("linear", "kind: Input should be"),
    ("step:size=2", "'size=2' is not key=value of"),
    ("one-cycle:total=2", "must leave more than one step to each phase"),
])
def test_bad_schedules_name_the_field(text, message):
    from planner.ops.lr_schedule import LRSchedule

    with pytest.raises(ValueError, match=message):
        LRSchedule.parse(text)


def test_the_lr_schedule_flag_records_the_schedule(capsys, tmp_path):
    from planner.cli.main import main

    spec = "zoo:mlp?batch=2&hidden=4&in_features=3&classes=2"
    assert main(["graph", spec, "--train", "sgd", "--lr-schedule",
                 "step:step_size=3,gamma=0.5", "-o", str(tmp_path / "g.json")]) == 0
    graph = json.loads((tmp_path / "g.json").read_text())
    nodes = [n for n in graph["nodes"] if n["op"] == "ScheduledLR"]
    assert [(n["inputs"], n["attrs"]["kind"], n["attrs"]["gamma"]) for n in nodes] == [
        (["optim/group/0/lr", "optim/schedule_step"], "step", 0.5)]
    with pytest.raises(SystemExit):
        main(["graph", spec, "--train", "sgd", "--lr-schedule", "step:size=3"])
    assert "'size=3' is not key=value" in capsys.readouterr().err
