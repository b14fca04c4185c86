"""torch.compile(backend="planner")'s ways of running a planned call (BackendOptions.lanes): the
same bits on the plan's lanes, on PyTorch's team and switching between them as measured (the
default), and the rule that chooses (planner/torch/lane_choice.py)."""

from __future__ import annotations

import pytest

from planner.torch.lane_choice import (
    ABANDON,
    MARGIN,
    MEASURED,
    PROBE_FIRST,
    ChosenWay,
    LaneChoice,
    StepWay,
)

torch = pytest.importorskip("torch")


def _run(choice: LaneChoice, times: dict[str, float], calls: int) -> list[str]:
    ways = []
    for _ in range(calls):
        way = choice.way()
        ways.append(way)
        choice.record(way, times[way])
    return ways


def test_a_losing_probe_returns_and_waits_twice_as_long():
    c = LaneChoice()
    first = _run(c, {"lanes": 1.0, "team": 2.0}, 2 * (MEASURED + 1))
    assert first == ["lanes"] * (MEASURED + 1) + ["team"] * (MEASURED + 1)
    assert c.running == "lanes" and c.switches == 0
    # the team is probed after PROBE_FIRST calls, loses, and is next probed after twice that
    ways = _run(c, {"lanes": 1.0, "team": 2.0}, 3 * PROBE_FIRST + 2 * (MEASURED + 1))
    probes = [k for k, w in enumerate(ways) if w == "team"]
    assert len(probes) == 2 * (MEASURED + 1), probes
    assert probes[0] == PROBE_FIRST - 1
    assert probes[MEASURED + 1] - probes[MEASURED] == 2 * PROBE_FIRST
    assert c.switches == 0 and c.reason.startswith("lanes:")


def test_a_probe_faster_by_the_margin_takes_over():
    c = LaneChoice()
    _run(c, {"lanes": 1.0, "team": 2.0}, 2 * (MEASURED + 1))
    # the machine changes: the team becomes faster than the lanes by more than the margin
    times = {"lanes": 1.0, "team": MARGIN * 0.9}
    _run(c, times, PROBE_FIRST + MEASURED + 1)
    assert c.running == "team" and c.switches == 1
    assert c.reason.startswith("team:")


def test_the_first_round_goes_to_the_faster_and_a_probe_must_win_by_the_margin():
    c = LaneChoice()
    _run(c, {"lanes": 1.0, "team": 0.99}, 2 * (MEASURED + 1))
    assert c.running == "team" and c.switches == 1
    # the lanes become faster, but within the margin: the team stays
    _run(c, {"lanes": 0.99 * MARGIN * 1.05, "team": 0.99}, PROBE_FIRST + MEASURED + 1)
    assert c.running == "team" and c.switches == 1 and c.reason.startswith("team:")


def test_a_hopeless_way_is_dropped_after_one_call():
    c = LaneChoice()
    ways = _run(c, {"lanes": 1.0, "team": ABANDON * 1.5}, MEASURED + 1 + 1 + 5)
    assert ways == ["lanes"] * (MEASURED + 1) + ["team"] + ["lanes"] * 5
    assert c.reason.startswith("lanes:")


def test_a_new_pacing_plan_starts_the_choice_afresh():
    w = StepWay()
    for _ in range(2 * (MEASURED + 1) + 1):  # the team wins on plan "a"'s steps
        way = w.way("a")
        w.record(way, 1.0 if way == "lanes" else 0.5)
    assert w.choice.running == "team"
    for _ in range(StepWay.PACE_LOST + 2):  # "a" is no longer called: "b" paces
        w.way("b")
    assert w.choice.running == "lanes" and w.choice.switches == 0


def _train(lanes, steps: int = 10):
    """A small convnet's SGD steps through the backend (eager where `lanes` is None); its
    losses and parameters after."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU6(),
        torch.nn.Conv2d(8, 8, 3, padding=1, groups=8), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, 5))
    x, y = torch.randn(4, 3, 8, 8), torch.randint(0, 5, (4,))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    fn = model if lanes is None else torch.compile(model, backend="planner",
                                                   options={"lanes": lanes})
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(fn(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, [p.detach().clone() for p in model.parameters()]


def test_every_way_gives_the_same_bits(monkeypatch):
    # lanes, PyTorch's team, and the measured default, whose first steps run both (its first
    # round: MEASURED + 1 steps a way; a fresh choice, not the one earlier tests of this
    # process settled), so a training run switching ways midway
    from planner.torch import executors

    fresh = StepWay()
    monkeypatch.setattr(executors, "STEP_WAY", fresh)
    steps = 2 * (MEASURED + 1) + 2
    runs = {lanes: _train(lanes, steps) for lanes in (True, False, "measured")}
    assert fresh.steps["lanes"] >= MEASURED + 1 and fresh.steps["team"] >= 1, fresh.steps
    ref_losses, ref_params = runs[True]
    for lanes, (losses, params) in runs.items():
        assert losses == ref_losses, lanes
        for a, b in zip(params, ref_params, strict=True):
            assert torch.equal(a, b), lanes
    # and these bits are eager's within float32 noise
    assert ref_losses == pytest.approx(_train(None, steps)[0], rel=1e-4)


def test_set_concurrent_on_a_one_at_a_time_executor_is_refused():
    from planner.torch import executors

    _train(False, 1)
    ex = next(e for p in executors._POOLS.values() for e in p.idle()
              if not isinstance(e, ChosenWay) and not e.concurrent)
    ex.set_concurrent(False)  # already so: nothing to do
    with pytest.raises(ValueError, match="concurrent=False"):
        ex.set_concurrent(True)


def _executors() -> set:
    """Every planned call's executor the backend holds now (a ChosenWay's own)."""
    from planner.torch import executors

    held = [*executors._EXECUTORS.values(),
            *(e for p in list(executors._POOLS.values()) for e in p.idle())]
    return {e.ex if isinstance(e, ChosenWay) else e for e in held}


def _schedules_granted_one_core(lanes) -> list[dict]:
    """A small convnet's SGD steps through the backend (planned uniform on the host's cores:
    every op on all of them), then, the process granted one core as a busy host's scheduler
    leaves it, more steps; the schedule stats of each executor its calls made."""
    import os

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(),
                                torch.nn.Flatten(), torch.nn.Linear(8 * 8 * 8, 5))
    fn = torch.compile(model, backend="planner", options={
        "lanes": lanes, "strategy": "uniform", "costs": "analytical"})
    x, y = torch.randn(4, 3, 8, 8), torch.randint(0, 5, (4,))
    before, mask = _executors(), os.sched_getaffinity(0)
    torch.nn.functional.cross_entropy(fn(x), y).backward()  # planned for the whole host
    os.sched_setaffinity(0, {min(mask)})
    try:
        for _ in range(3):
            torch.nn.functional.cross_entropy(fn(x), y).backward()
    finally:
        os.sched_setaffinity(0, mask)
    return [e.stats()["schedule"] for e in _executors() - before]


@pytest.mark.skipif(len(__import__("os").sched_getaffinity(0)) < 2,
                    reason="needs a host of two CPUs or more (a plan with a fewer-core variant)")
@pytest.mark.parametrize("lanes", [False, True])
def test_a_busy_host_moves_the_backends_calls_to_the_variant_the_trainer_runs(lanes):
    # Granted one core (the affinity mask), the trainer's executor runs its one-core variant
    # (tests/codegen/test_schedule_variants.py); the backend's planned calls do the same on
    # the lanes and, one op at a time, on PyTorch's team (executor.h's team_choice_), where
    # before the team ran the main schedule's two-thread ops whatever the host granted.
    ran = _schedules_granted_one_core(lanes)
    assert len(ran) >= 2, ran  # the forward's and the backward's executors
    for sched in ran:
        assert sched["granted_cores"] == 1, sched
        assert sched["running"] == "cores-1", sched
        assert "granted 1 core(s): main needs 2" in sched["reason"], sched
