"""A plan with the user's pinned decisions builds and runs: the recompute and offload it was
told to make run in the step, which equals the unpinned plan's bit for bit (uniform plans: a
recompute reruns its node's kernel at the same thread count; a copy moves bytes unchanged) and
the float64 reference interpreter's step within float32 error."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from planner.memory.options import MemoryOptions, Pin
from planner.pipeline import PlanOptions, plan
from planner.schedule import ScheduleOptions
from planner.verify import verify_plan
from tests.codegen.budget_cases import graph_of, host, run_steps
from tests.codegen.helpers import rel_error, start_state
from tests.codegen.zoo_cases import allowed


@pytest.mark.slow
def test_pinned_plan_runs_and_matches_the_unpinned_one(tmp_path):
    from planner.graph.interpret import random_feeds, train_step, widened

    graph = graph_of("alexnet")

    def planned(pins):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return plan(graph, host(), options=PlanOptions(
                schedule=ScheduleOptions(strategy="uniform"),
                memory=MemoryOptions(pins=pins)))

    free = planned(())
    pinned = planned((Pin(decision="recompute", name="lrn1"),
                      Pin(decision="offload", name="relu2")))
    assert verify_plan(pinned) == []
    kinds = {(m.kind, m.node or m.inputs[0]) for m in pinned.memory.ops}
    assert ("recompute", "lrn1") in kinds and ("offload", "relu2") in kinds
    state, feeds = start_state(graph), random_feeds(graph, seed=2)
    ex0, (out0,) = run_steps(free, tmp_path / "free", state, feeds)
    ex, (out,) = run_steps(pinned, tmp_path / "pinned", state, feeds)
    assert np.array_equal(out["loss"], out0["loss"])
    p0, p = ex0.params(), ex.params()
    assert [k for k in p0 if not np.array_equal(p[k], p0[k])] == []
    # Against the reference interpreter: float64 (exact) and float32 (its own rounding, the
    # error a float32 step may have), the loss and every updated parameter.
    single, single_state = train_step(graph, feeds, state)
    exact, exact_state = train_step(widened(graph), feeds, state)
    assert rel_error(out["loss"], exact["loss"]) < allowed(single["loss"], exact["loss"])
    off = [k for k in exact_state if k in p and rel_error(p[k], exact_state[k])
           >= allowed(single_state[k], exact_state[k])]
    assert off == []
    calls = {o["name"]: o["calls"] for o in ex.stats()["ops"]}
    assert all(calls[m.name] == 1 for m in pinned.memory.ops)
