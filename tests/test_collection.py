"""Planning leaves no cyclic garbage: what lets it run with the cyclic collector off
(planner.collection).

A collection counts the unreachable objects of every thread of the process, so the cases run
in a process of their own: in a test worker, threads left by earlier tests (compile workers,
progress reporters) make garbage of their own while the plan runs."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import textwrap

import pytest

from planner.collection import collector_off

CASES = [
    ("zoo:resnet?depth=18&batch=2&image=32", "knl-7250", None),
    ("zoo:resnet?depth=18&batch=2&image=32", "knl-7250", 0.8),  # the budget search
    ("zoo:gpt?batch=2&seq=16&layers=2", "xeon-8180", None),
    ("zoo:lstm?batch=4", "k40c-12gb", None),  # GPU memory planning: stash, recompute
    ("zoo:resnet?depth=18&batch=16&image=64", "k40c-12gb", 0.9),  # offload, recompute
]

# Each case plans once first (imports, schemas and caches done), then counts what a second
# plan leaves unreachable, and names the commonest types of it.
PROBE = textwrap.dedent("""
    import collections, gc, json, sys
    from planner.collection import collector_off
    from planner.frontend.options import GraphOptions
    from planner.frontend.prepare import prepare
    from planner.graph.optimizer import Optimizer
    from planner.memory.options import MemoryOptions
    from planner.pipeline import PlanOptions, plan
    from planner.target import preset

    found = []
    for spec, target, budget in json.loads(sys.argv[1]):
        graph = prepare(spec, GraphOptions(optimizer=Optimizer(kind="adamw")))
        options = PlanOptions()
        if budget is not None:
            arena = plan(graph, preset(target)).summary.memory.arena_bytes
            options = PlanOptions(memory=MemoryOptions(budget_bytes=int(arena * budget)))
        plan(graph, preset(target), options=options)
        gc.collect()
        gc.set_debug(gc.DEBUG_SAVEALL)
        with collector_off():
            planned = plan(graph, preset(target), options=options)
            del planned
            unreachable = gc.collect()
        gc.set_debug(0)
        kinds = collections.Counter(type(o).__qualname__ for o in gc.garbage)
        gc.garbage.clear()
        found.append([unreachable, kinds.most_common(6)])
    print(json.dumps(found))
""")


@pytest.fixture(scope="module")
def garbage() -> list:
    env = dict(os.environ, PLANNER_PLAN_PROCESSES="1")  # all of the planning in that process
    done = subprocess.run([sys.executable, "-c", PROBE, json.dumps(CASES)], env=env,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("case", range(len(CASES)), ids=[f"{s}-{t}-{b}" for s, t, b in CASES])
def test_planning_makes_no_cyclic_garbage(case, garbage):
    unreachable, kinds = garbage[case]
    assert unreachable == 0, f"{unreachable} unreachable objects, commonest: {kinds}"


def test_the_collector_stays_off_where_it_was_off():
    gc.disable()
    try:
        with collector_off():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
