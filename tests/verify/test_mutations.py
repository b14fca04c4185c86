"""verify against an independent checker (issue 32): random mutations of real plans (a LeNet
training plan, a budget plan of it with recompute, offload and prefetch ops, a data-parallel
plan of it; tests.verify.mutate), each judged by tests.verify.independent, which shares no code
with verify. verify must refuse exactly the mutants the checker finds racing or misreading,
and accept those it finds safe. A few accepted mutants of a plan for this host are built and
run: one step gives the original plan's bits."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest

from planner.plan import Plan
from planner.verify import verify_plan_data
from tests.verify import independent
from tests.verify.mutate import KINDS as MUTATION_KINDS
from tests.verify.mutate import mutant
from tests.verify.plans import KINDS, plan_data

MUTANTS = 60   # per plan; seeded: the same mutants every run


@pytest.mark.parametrize("kind", KINDS)
def test_verify_refuses_exactly_the_mutants_the_independent_checker_finds_unsafe(kind):
    base = plan_data(kind)
    assert independent.problems(base) == [] and verify_plan_data(base) == []
    rng = np.random.default_rng(32)
    verdicts: Counter = Counter()
    for _ in range(MUTANTS):
        data, what = mutant(base, rng)
        unsafe = independent.problems(data)
        refused = verify_plan_data(data)
        assert bool(refused) == bool(unsafe), (what, refused[:3], unsafe[:3])
        assert all("\n" not in p for p in refused)
        verdicts[what.split(":")[0], bool(unsafe)] += 1
    # Not vacuous: both verdicts, and every kind of mutation that applies to the plan drawn.
    assert {safe for _, safe in verdicts} == {True, False}, verdicts
    assert {k for k, _ in verdicts} == {k for k, applies in MUTATION_KINDS if applies(base)}, \
        verdicts


def _step(p: Plan, where, state, feeds):
    from codegen.build import build
    from codegen.load import load
    from codegen.render import render

    ex = load(build(render(p, where)).dir).Executor()
    ex.load_params(state)
    out = ex.step(feeds)
    return out, ex.params()


def test_accepted_mutants_run_and_give_the_original_bits(tmp_path):
    """Three accepted mutants of this host's budget plan, of different kinds (each changes
    what the executor runs: its waits, its threads, its arena offsets), built and stepped once
    from one state, give the original's outputs and parameters bit for bit."""
    from planner.graph.interpret import random_feeds
    from planner.target.detect import detect
    from tests.codegen.helpers import start_state
    from tests.verify.plans import lenet, make

    original = make("budget", detect())
    base = json.loads(original.to_json())
    rng = np.random.default_rng(5)
    chosen: dict[str, dict] = {}
    for _ in range(400):
        data, what = mutant(base, rng)
        kind = what.split(":")[0]
        if kind in ("move_offset", "repoint_input", "drop_edge", "move_lane") \
                and kind not in chosen \
                and not verify_plan_data(data) and not independent.problems(data):
            chosen[kind] = data
        if len(chosen) == 3:
            break
    assert len(chosen) == 3, chosen.keys()
    graph = lenet(4.0)
    state, feeds = start_state(graph), random_feeds(graph, seed=3)
    want_out, want_params = _step(original, tmp_path / "original", state, feeds)
    for kind, data in chosen.items():
        got_out, got_params = _step(Plan.model_validate(data), tmp_path / kind, state, feeds)
        for name in want_out:
            np.testing.assert_array_equal(got_out[name], want_out[name], err_msg=kind)
        for name in want_params:
            np.testing.assert_array_equal(got_params[name], want_params[name], err_msg=kind)
