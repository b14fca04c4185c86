"""The step's team scale (planner.costs.team_scale, from the ops of plans codegen.profiling
makes and runs): on synthetic one-thread and all-core
times of a step's ops, the fit recovers how much further from the store's times the all-core
ones ran than the one-thread ones; priced with it, the all-core plan is predicted as it ran in
the one-thread plan's terms, and the plan's choices move toward one thread."""

from __future__ import annotations

import warnings

import pytest

from codegen.profiling import _uniform_plan, ran
from planner.costs import CostModel, CostTable
from planner.costs.records import CostEntry, CpuSample
from planner.costs.signature import graph_signatures
from planner.costs.team_scale import team_scale
from planner.frontend.autodiff import make_training_graph
from planner.graph.optimizer import Optimizer
from planner.zoo import build
from tests.targets import two_cores

TARGET = two_cores()
GRAPH = make_training_graph(build("mlp", batch=64, hidden=[256, 256, 256], in_features=256,
                                  classes=10), Optimizer(kind="sgd"))


def measured_table() -> CostTable:
    """Every signature of the step 'measured' at its analytical times on 1 and 2 threads."""
    model = CostModel(TARGET)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sigs = {s.key: s for s in graph_signatures(GRAPH).values()}
        return CostTable(target=TARGET.name, entries=tuple(
            CostEntry(signature=s, cpu=tuple(
                CpuSample(threads=k, affinity="compact", seconds=model.time(s, k).seconds)
                for k in (1, 2)))
            for s in sigs.values()))


def plans(costs: CostTable):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return [_uniform_plan(GRAPH, TARGET, costs, lanes, None) for lanes in ((1, 1), (2, 1))]


@pytest.mark.parametrize(("missed", "team"), [(1.0, 1.0), (1.3, 1.2), (0.9, 0.85)])
def test_the_fit_recovers_the_team_scale_whatever_every_step_misses(missed, team):
    costs = measured_table()
    lone, wide = plans(costs)
    assert {o.threads for o in lone.ops} == {1} and {o.threads for o in wide.ops} == {2}
    # The machine: every op `missed` x its time on one thread, `missed` x `team` on both.
    alone = {o.name: (o.end - o.start) * missed for o in lone.ops}
    across = {o.name: (o.end - o.start) * missed * team for o in wide.ops}
    got = team_scale(TARGET, costs, ran(lone, alone), ran(wide, across))
    assert got == pytest.approx(team, rel=1e-5)
    # Priced with it, the wide plan is predicted as it ran over what one thread missed.
    _, rewide = plans(costs.model_copy(update={"team_scale": got}))
    assert rewide.summary.step_seconds == pytest.approx(
        sum(across.values()) / missed, rel=1e-4)


def test_a_scale_only_moves_the_multi_thread_times():
    costs = measured_table()
    sig = next(iter(graph_signatures(GRAPH).values()))
    plain, scaled = (CostModel(TARGET, t) for t in (costs, costs.model_copy(
        update={"team_scale": 1.5})))
    assert scaled.time(sig, 1).seconds == plain.time(sig, 1).seconds
    assert scaled.time(sig, 2).seconds == pytest.approx(1.5 * plain.time(sig, 2).seconds)
