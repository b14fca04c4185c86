"""The exact MILP cross-checks the greedy's recomputation: never worse than it, and the greedy
within 5% of it on small graphs (cost-aware segments)."""

from __future__ import annotations

import numpy as np
import pytest

from planner.costs import CostModel
from planner.memory.budget.search import State
from planner.memory.milp import greedy_recompute, profile_with, recompute_milp
from planner.memory.stash import analyze
from planner.schedule.streams import compute_steps
from planner.target import preset
from tests.memory.conftest import training

MODEL = CostModel(preset("k40c-12gb"))
SMALL = {
    "lenet": dict(batch=32),
    "alexnet": dict(batch=16, image=63, width=0.125, classes=4),
    "resnet": dict(batch=4, image=32, width=0.25, depth=18, classes=4),
}


@pytest.fixture(scope="module", params=sorted(SMALL))
def stash(request):
    graph = training(request.param, "sgd", **SMALL[request.param])
    return analyze(compute_steps(graph, MODEL))


def budgets(stash, count: int = 5) -> list[int]:
    free = State(stash, 1.0, offload=False).load()
    full = profile_with(stash, range(len(stash.segments))).load()
    return [int(full + f * (free - full)) for f in np.linspace(0, 1, count + 2)[1:-1]]


def test_milp_is_exact_and_the_greedy_is_close(stash):
    for budget in budgets(stash):
        exact = recompute_milp(stash, budget)
        greedy = greedy_recompute(stash, budget)
        assert exact.status == "optimal"
        assert exact.load <= budget and greedy.load <= budget
        assert exact.seconds <= greedy.seconds + 1e-12
        assert greedy.seconds <= 1.05 * exact.seconds + 1e-12


def test_milp_model_matches_the_profile(stash):
    # The MILP's memory model is the greedy's: its choice, replayed, fits; one fewer doesn't.
    budget = budgets(stash, 1)[0]
    exact = recompute_milp(stash, budget)
    assert profile_with(stash, exact.segments).load() <= budget
    for g in exact.segments:
        rest = [s for s in exact.segments if s != g]
        assert profile_with(stash, rest).load() > budget or \
            stash.segments[g].seconds == 0


def test_infeasible_budget(stash):
    full = profile_with(stash, range(len(stash.segments))).load()
    assert recompute_milp(stash, full - 1).status == "infeasible"
    assert greedy_recompute(stash, full - 1).status == "infeasible"
