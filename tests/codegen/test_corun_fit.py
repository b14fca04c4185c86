"""The host's contention figures from a step's co-running lanes
(planner.schedule.contention_fit, given the plans codegen.profiling makes and runs): on
synthetic alone and co-running times made by the simulator with known figures, the fit
recovers them, whatever share of every step the store's times miss."""

from __future__ import annotations

import warnings

import pytest

from codegen.profiling import _uniform_plan
from planner.costs import CostModel, CostTable
from planner.frontend.autodiff import make_training_graph
from planner.graph.optimizer import Optimizer
from planner.schedule import ScheduleOptions, cpu_schedule
from planner.schedule.contention_fit import Placed, fit_corun_figures
from planner.zoo import build
from tests.targets import two_cores

TARGET = two_cores()
GRAPH = make_training_graph(build("mlp", batch=64, hidden=[256, 256, 256], in_features=256,
                                  classes=10), Optimizer(kind="sgd"))
COSTS = CostTable(target=TARGET.name)  # every op priced by the model: times to start from


def plans():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return [_uniform_plan(GRAPH, TARGET, COSTS, lanes, None) for lanes in ((1, 1), (1, 2))]


def fit(lone, corun, alone_corun, steps, handoff=0.0):
    """The figures fitted from the two plans as codegen.profiling.step_contention passes them."""
    placed = [Placed(o.name, tuple(o.cpus), o.start, o.end) for o in corun.ops]
    return fit_corun_figures(TARGET, corun.graph, placed, lone.summary.step_seconds, COSTS,
                             alone_corun, steps, handoff)


def simulated_step(graph, sigma: float, handoff: float = 0.0) -> float:
    """The two-lane step as the simulator runs it with a co-running slowdown `sigma` and each
    hand-off across lanes `handoff` seconds."""
    figures = COSTS.model_copy(update={"contention": 0.0, "corun_slowdown": sigma,
                                       "handoff_seconds": handoff})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return cpu_schedule(graph, CostModel(TARGET, figures), ScheduleOptions(
            strategy="uniform", intra=1, inter=2)).step_seconds


@pytest.mark.parametrize("sigma", [0.0, 0.15, 0.4])
@pytest.mark.parametrize("missed", [1.0, 1.3])
@pytest.mark.parametrize("handoff", [0.0, 2e-5])
def test_the_fit_recovers_the_slowdown_that_made_the_co_running_step(sigma, missed, handoff):
    lone, corun = plans()
    assert {len({o.lane for o in p.ops}) for p in (lone, corun)} == {1, 2}
    # The machine: every op as planned alone, in both plans (no op stretched: kappa 0), the
    # co-running step `sigma` slower than the contention-free simulator's and its hand-offs
    # `handoff` each (measured apart: handoff_latency), and both steps `missed` slower than
    # the store's times say (the load, the step's own overhead).
    alone = {o.name: (o.end - o.start) * missed for o in lone.ops}
    steps = (lone.summary.step_seconds * missed,
             simulated_step(corun.graph, sigma, handoff) * missed)
    got = fit(lone, corun, (alone, alone), steps, handoff)
    assert got["contention"] == 0.0 and got["handoff_seconds"] == handoff
    # The hand-offs are not charged to co-running: sigma is the one that made the step.
    assert got["corun_slowdown"] == pytest.approx(sigma, abs=1e-5)
    # Priced with the fitted figures, the co-running step is predicted as measured.
    assert simulated_step(corun.graph, got["corun_slowdown"], handoff) == pytest.approx(
        steps[1] / missed, rel=1e-5)


def test_co_running_ops_stretched_alike_give_kappa_and_the_step_the_rest():
    lone, corun = plans()
    alone = {o.name: o.end - o.start for o in lone.ops}
    stretched = {k: 1.2 * v for k, v in alone.items()}
    steps = (lone.summary.step_seconds, simulated_step(corun.graph, 0.3))
    figures = fit(lone, corun, (alone, stretched), steps)
    assert figures["contention"] >= 0.0 and figures["corun_slowdown"] >= 0.0
    figures = COSTS.model_copy(update=figures)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        step = cpu_schedule(corun.graph, CostModel(TARGET, figures), ScheduleOptions(
            strategy="uniform", intra=1, inter=2)).step_seconds
    assert step == pytest.approx(steps[1], rel=1e-5)
