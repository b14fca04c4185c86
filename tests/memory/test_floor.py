"""The budget search's arena floor (planner.memory.budget.floor): a lower bound on every state's
laid-out arena that counts the kernels' scratch, so the search lays out only states that may
fit."""

from __future__ import annotations

from dataclasses import replace

import pytest

import planner.memory.budget.solver as solver
import planner.memory.gpu as gpu
from planner.costs import CostModel
from planner.errors import InfeasibleBudget
from planner.frontend.autodiff import make_training_graph
from planner.graph.optimizer import Optimizer
from planner.memory.arena import aligned
from planner.memory.budget.floor import ArenaFloor
from planner.memory.budget.search import State
from planner.memory.liveness import load_bytes
from planner.memory.options import MemoryOptions
from planner.memory.stash import analyze
from planner.pipeline import PlanOptions, plan
from planner.schedule.streams import compute_steps
from planner.target import preset
from planner.zoo import build

CPU = preset("xeon-8180")


def graph(name, **size):
    return make_training_graph(build(name, **size), Optimizer(kind="sgd"))


@pytest.fixture(scope="module")
def resnet():
    return graph("resnet", batch=2, image=32, depth=18, width=0.125, classes=4)


def test_floor_is_below_every_laid_out_arena_and_counts_the_scratch():
    """Along the whole greedy walk (every move until none lowers the peak): floor <= the
    materialized buffers' LOAD, sizes aligned as laid out, <= the arena; the floor is that
    LOAD where no copy is in flight (the start), above the tensors' LOAD by the scratch."""
    g = graph("alexnet", batch=4, image=63, width=0.25, classes=4)
    steps = compute_steps(g, CostModel(preset("k40c-12gb")))
    extra = gpu.kernel_scratch(steps)
    state = State(analyze(steps), 12.6e9)
    options = MemoryOptions(budget_bytes=1 << 40, alignment=256)
    floor = ArenaFloor(state.stash, extra, options.alignment)
    seen = 0
    while True:
        placed = solver.lay(state, options, extra)
        live = load_bytes([replace(b, bytes=aligned(b.bytes, options.alignment))
                           for b in placed.material.buffers])
        assert state.load() <= floor(state) <= live <= placed.arena
        if not state.log:
            assert floor(state) == live > state.load()
        seen += 1
        move = state.best_move()
        if move is None:
            break
        state.apply(move)
    assert seen > 5 and {m.kind for m in state.log} == {"offload", "recompute"}


def test_the_cpu_search_lays_out_only_states_that_may_fit(resnet, monkeypatch):
    """On a CPU plan the scratch areas are much of the peak: a state whose floor exceeds the
    budget is never laid out, and there are such states (the tensors' LOAD alone fits)."""
    laid, skipped = [], []
    lay, above = solver.lay, ArenaFloor.above

    def counting_lay(state, options, extra=None, limit=None):
        laid.append(ArenaFloor(state.stash, extra, options.alignment)(state))
        return lay(state, options, extra, limit)

    def counting_above(self, state, limit):
        out = above(self, state, limit)
        assert out == (self(state) > limit)
        if out and state.load() <= limit:
            skipped.append(state)
        return out

    monkeypatch.setattr(solver, "lay", counting_lay)
    monkeypatch.setattr(ArenaFloor, "above", counting_above)
    options = PlanOptions(memory=MemoryOptions(budget_bytes=64))
    with pytest.raises(InfeasibleBudget) as e:
        plan(resnet, CPU, options=options)
    budget = e.value.smallest_bytes
    laid.clear()
    p = plan(resnet, CPU, options=PlanOptions(memory=MemoryOptions(budget_bytes=budget)))
    assert p.summary.memory.arena_bytes <= budget and p.memory.ops
    assert laid and max(laid) <= budget
    assert skipped
