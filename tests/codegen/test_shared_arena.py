"""Executors on one arena (the CPU executor's `arena_of`): a range plan's build run at a smaller
batch on the range executor's arena reads and updates the same parameters and state in place,
nothing copied between them (planner/torch/shapes.py); the two take turns, a step of one is
refused while the other's is in flight, and an executor of another plan is refused.

Reference: a second executor at the smaller batch with an arena of its own, loaded with the same
state: the same kernels on the same bytes give the same bits."""

from __future__ import annotations

import numpy as np
import pytest

from codegen.build import build
from codegen.concrete import concrete_options
from codegen.load import load
from codegen.render import render
from planner.frontend.prepare import GraphOptions, prepare
from planner.graph.interpret import random_feeds
from planner.graph.optimizer import Optimizer
from planner.pipeline.choices import step_choices
from planner.pipeline.ranges import step_at
from planner.target.detect import detect
from tests.codegen.helpers import host_plan, start_state

SPEC = "zoo:mlp?batch={}&hidden=16&in_features=6&classes=3"
OPTIONS = GraphOptions(optimizer=Optimizer(kind="adam", lr=0.01))
LARGEST = 8


@pytest.fixture(scope="module")
def ranged(tmp_path_factory):
    graph = prepare(SPEC.format(LARGEST), OPTIONS)
    plan = host_plan(graph, "optimized")
    package = load(build(render(plan, tmp_path_factory.mktemp("shared") / "mlp_range")).dir)
    return plan, package, step_choices(graph, detect())


def at(ranged, batch: int, **options):
    plan, package, choices = ranged
    step = step_at(choices, prepare(SPEC.format(batch), OPTIONS))
    return step, package.Executor(**concrete_options(plan, step), **options)


def test_a_smaller_batch_on_the_range_arena_updates_the_same_state_in_place(ranged):
    """Steps of 8, 3, 5 and 3 rows alternating between the range's executor and two on its
    arena give the bits of executors with arenas of their own that hand the state over by
    copies after every step; the sharers hold one arena (one address, counted by each)."""
    plan, package, _ = ranged
    big = package.Executor()
    state = start_state(plan.graph, seed=1)
    big.load_params(state)
    steps = {b: at(ranged, b, arena_of=big) for b in (3, 5)}
    alone = {b: at(ranged, b) for b in (3, 5)}
    reference = package.Executor()
    reference.load_params(state)
    held = reference
    for k, batch in enumerate([8, 3, 5, 3, 8]):
        graph = plan.graph if batch == LARGEST else steps[batch][0]
        feeds = random_feeds(graph, seed=k)
        mine = (big if batch == LARGEST else steps[batch][1]).step(feeds)
        other = reference if batch == LARGEST else alone[batch][1]
        if other is not held:  # the hand-over the shared arena does without
            other.load_params(held.params(), partial=True)
        theirs = other.step(feeds)
        held = other
        assert np.array_equal(mine["loss"], theirs["loss"]), (k, batch)
    for ex in (big, steps[3][1], steps[5][1]):
        after = ex.params()
        assert all(np.array_equal(after[n], v) for n, v in held.params().items())
    stats = [ex.stats() for ex in (big, steps[3][1], steps[5][1])]
    assert len({s["arena_address"] for s in stats}) == 1
    assert [s["arena_sharers"] for s in stats] == [3, 3, 3]
    assert alone[3][1].stats()["arena_sharers"] == 1
    # The range's executor let go: the arena stays with its sharers, state and all.
    before = steps[3][1].params()
    del big
    assert steps[3][1].stats()["arena_sharers"] == 2
    assert all(np.array_equal(v, before[n]) for n, v in steps[3][1].params().items())
    steps[3][1].step(random_feeds(steps[3][0], seed=9))


def test_sharers_take_turns_and_another_plan_is_refused(ranged, tmp_path):
    plan, package, _ = ranged
    big = package.Executor()
    big.load_params(start_state(plan.graph, seed=2))
    step, small = at(ranged, 3, arena_of=big)
    big.step_async(random_feeds(plan.graph, seed=0))
    for call in (lambda: small.step(random_feeds(step, seed=1)),
                 lambda: small.params(), lambda: small.load_params({}, partial=True)):
        with pytest.raises(ValueError, match="sharing this one's arena is in flight"):
            call()
    big.wait()
    small.step(random_feeds(step, seed=1))  # its turn now
    other = host_plan(prepare(SPEC.replace("hidden=16", "hidden=12").format(LARGEST), OPTIONS),
                      "optimized")
    stranger = load(build(render(other, tmp_path / "mlp_other")).dir).Executor()
    with pytest.raises(ValueError, match=r"arena_of: the executor given is not of the build "
                                         r"of plan '.*' \(it is plan"):
        package.Executor(arena_of=stranger)
