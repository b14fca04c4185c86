"""Co-running ops sharing memory bandwidth: the contended simulator and its calibration."""

from __future__ import annotations

import random

import pytest

from planner.costs import CostModel, CostTable
from planner.frontend.autodiff import make_training_graph
from planner.graph.optimizer import Optimizer
from planner.schedule import ScheduleOptions, cpu_schedule
from planner.schedule.contention import Contention, fit_contention, simulate_contended
from planner.schedule.placement import Placement
from planner.schedule.simulate import simulate
from planner.target import preset
from planner.zoo import build


def random_dag(n: int, seed: int) -> tuple[list[Placement], list[tuple[int, ...]]]:
    rng = random.Random(seed)
    preds = [tuple(sorted(rng.sample(range(i), min(i, rng.randint(0, 2))))) for i in range(n)]
    placements = [Placement((i,), (rng.randrange(4),), "compact", rng.uniform(0.1, 2.0), 0.0)
                  for i in range(n)]
    return placements, preds


@pytest.mark.parametrize("seed", range(5))
def test_without_contention_it_is_the_simulator(seed):
    placements, preds = random_dag(40, seed)
    free = Contention(node_bytes=(1e9,) * 40, memory=1e9, per_core=1e9, kappa=0.0)
    a, b = simulate_contended(placements, preds, 4, free), simulate(placements, preds, 4, 1.9)
    assert a.starts == pytest.approx(b.starts) and a.ends == pytest.approx(b.ends)


@pytest.mark.parametrize("seed", range(5))
def test_hand_offs_are_timed_as_the_simulator_times_them(seed):
    placements, preds = random_dag(40, seed)
    free = Contention(node_bytes=(1e9,) * 40, memory=1e9, per_core=1e9, kappa=0.0)
    a = simulate_contended(placements, preds, 4, free, handoff=0.05)
    b = simulate(placements, preds, 4, 1.9, handoff=0.05)
    assert a.starts == pytest.approx(b.starts) and a.ends == pytest.approx(b.ends)
    without = simulate(placements, preds, 4, 1.9)
    assert b.step_seconds >= without.step_seconds and b.starts != without.starts


@pytest.mark.parametrize("seed", range(5))
def test_contention_only_ever_delays_and_never_slows_compute_bound_ops(seed):
    placements, preds = random_dag(40, seed)
    free = simulate(placements, preds, 4, 1.9)
    busy = simulate_contended(placements, preds, 4, Contention(
        node_bytes=(2e9,) * 40, memory=1e9, per_core=1e9, kappa=1.0))
    assert all(e >= f - 1e-12 for e, f in zip(busy.ends, free.ends, strict=True))
    assert busy.step_seconds > free.step_seconds
    cached = simulate_contended(placements, preds, 4, Contention(
        node_bytes=(0.0,) * 40, memory=1e9, per_core=1e9, kappa=1.0))
    assert cached.ends == pytest.approx(free.ends)


def test_two_streaming_ops_share_the_bandwidth():
    # Each alone asks for all of it: together each gets half until the shorter ends.
    ps = [Placement((0,), (0,), "compact", 1.0, 0.0), Placement((1,), (1,), "compact", 1.0, 0.0)]
    r = simulate_contended(ps, ((), ()), 2, Contention(
        node_bytes=(1e9, 1e9), memory=1e9, per_core=1e9, kappa=0.5))
    assert r.ends == pytest.approx((1.5, 1.5))  # stretched by 1 + 0.5 x (2 - 1)


def test_the_fit_recovers_the_kappa_and_sigma_that_made_the_times():
    # On 4 cores over [0, 1]: three streaming ops (D = 3B, each slowed by kappa x 2 for the
    # bandwidth) and a compute-bound one (mu 0); each sees the other three cores busy (f = 1).
    for kappa, sigma in ((0.0, 0.0), (0.3, 0.0), (0.0, 0.25), (1.2, 0.1)):
        measured = [1 + 2 * kappa + sigma] * 3 + [1 + sigma]
        got = fit_contention([1.0] * 4, measured, [0.0] * 4, [1.0] * 4, [1.0] * 3 + [0.0],
                             [1.0] * 3 + [0.0], 1.0, [1] * 4, 4)
        assert got == pytest.approx((kappa, sigma), abs=1e-12)
    # Ops that ran alone (nothing to share) say nothing about either.
    assert fit_contention([1.0], [1.4], [0.0], [1.0], [1.0], [1.0], 1.0, [1], 2) == (0.0, 0.0)
    # Ops that ran faster than alone do not make a negative slowdown.
    assert fit_contention([1.0, 1.0], [0.9, 0.9], [0.0] * 2, [1.0] * 2, [0.0] * 2, [0.0] * 2,
                          1.0, [1, 1], 2) == (0.0, 0.0)


def test_busy_neighbours_slow_compute_bound_ops_by_sigma():
    ps = [Placement((0,), (0,), "compact", 1.0, 0.0), Placement((1,), (1,), "compact", 0.5, 0.0)]
    r = simulate_contended(ps, ((), ()), 2, Contention(
        node_bytes=(0.0, 0.0), memory=1e9, per_core=1e9, kappa=1.0, sigma=0.25))
    # Both at pace 1 / 1.25 until b ends at 0.625 (a has 0.5 s left), then a alone.
    assert r.ends == pytest.approx((1.125, 0.625))
    # An op on every core has no neighbours to share with.
    wide = simulate_contended([Placement((0,), (0, 1), "compact", 1.0, 0.0)], ((),), 2,
                              Contention(node_bytes=(0.0,), memory=1e9, per_core=1e9,
                                         kappa=1.0, sigma=0.25))
    assert wide.ends == pytest.approx((1.0,))


def _step(graph, options: ScheduleOptions, **measured: float) -> float:
    """The planned step on xeon-8180 with a cost table that measured `measured` (none: the
    contention-free simulator)."""
    target = preset("xeon-8180")
    table = CostTable(target=target.name, **measured) if measured else None
    return cpu_schedule(graph, CostModel(target, table), options).step_seconds


def test_a_measured_contention_makes_co_running_plans_slower_than_predicted_without():
    # The margins are the model's, far above float rounding (the plans are identical, only the
    # simulated durations differ): a check that the contended simulator is in the loop.
    small = make_training_graph(build("mlp", batch=64, hidden=[256, 256], in_features=256,
                                      classes=10), Optimizer(kind="sgd"))
    lanes = ScheduleOptions(strategy="uniform", intra=1, inter=4)
    # Four 1-core lanes never ask for more than the socket's bandwidth: the measured slowdown
    # of any op beside busy cores (sigma) is what they pay.
    measured = {"contention": 1.0, "corun_slowdown": 0.25}
    assert _step(small, lanes, **measured) > _step(small, lanes) * (1 + 1e-4)
    one = ScheduleOptions(strategy="uniform")  # one op at a time: nothing co-runs
    assert _step(small, one, **measured) == _step(small, one)
    # Two 14-core lanes of a bandwidth-bound step exceed the socket's bandwidth: kappa alone.
    wide = make_training_graph(build("mlp", batch=4096, hidden=[1024, 1024], in_features=1024,
                                     classes=10), Optimizer(kind="sgd"))
    lanes = ScheduleOptions(strategy="uniform", intra=14, inter=2)
    assert _step(wide, lanes, contention=1.0) > _step(wide, lanes) * (1 + 1e-4)
