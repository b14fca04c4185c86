"""Planning leaves no cyclic garbage: what lets it run with the cyclic collector off
(planner.collection)."""

from __future__ import annotations

import gc

import pytest

from planner.collection import collector_off
from planner.frontend.options import GraphOptions
from planner.frontend.prepare import prepare
from planner.graph.optimizer import Optimizer
from planner.memory.options import MemoryOptions
from planner.pipeline import PlanOptions, plan
from planner.target import preset


@pytest.mark.parametrize("spec,target,budget", [
    ("zoo:resnet?depth=18&batch=2&image=32", "knl-7250", None),
    ("zoo:resnet?depth=18&batch=2&image=32", "knl-7250", 0.8),  # the budget search
    ("zoo:gpt?batch=2&seq=16&layers=2", "xeon-8180", None),
    ("zoo:lstm?batch=4", "k40c-12gb", None),  # GPU memory planning: stash, recompute
    ("zoo:resnet?depth=18&batch=16&image=64", "k40c-12gb", 0.9),  # offload, recompute
])
def test_planning_makes_no_cyclic_garbage(spec, target, budget, monkeypatch):
    monkeypatch.setenv("PLANNER_PLAN_PROCESSES", "1")  # all of it in this process
    graph = prepare(spec, GraphOptions(optimizer=Optimizer(kind="adamw")))
    options = PlanOptions()
    if budget is not None:
        arena = plan(graph, preset(target)).summary.memory.arena_bytes
        options = PlanOptions(memory=MemoryOptions(budget_bytes=int(arena * budget)))
    plan(graph, preset(target), options=options)  # first uses (imports, schemas) done
    gc.collect()
    with collector_off():
        assert not gc.isenabled()
        planned = plan(graph, preset(target), options=options)
        del planned
        unreachable = gc.collect()  # an explicit collection runs with the collector off
    assert unreachable == 0


def test_the_collector_stays_off_where_it_was_off():
    gc.disable()
    try:
        with collector_off():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
