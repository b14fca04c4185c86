"""Bits that do not depend on the load (docs/executor.md, "Busy machines"): by default the
executor runs the plan's main schedule whatever the cores it is granted, so a run, the same
run in another process, and a run stopped and resumed all compute the same bits, while an
executor built with adaptive=True moves to a variant of other thread counts.

The plan's main schedule is one lane of two-thread teams, and its one-core variant runs every
op on one thread: a switch changes how oneDNN splits the weight-gradient reductions. Narrowing
the calling thread's affinity mask to one core is what a busy machine (a cgroup quota, a
neighbour's `taskset`) does to the granted cores, and forces the adaptive executor's switch.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from contextlib import contextmanager

import numpy as np
import pytest

from planner.graph.interpret import random_feeds
from planner.target.detect import detect
from tests.codegen.helpers import start_state
from tests.helpers.variants import lenet_built

pytestmark = pytest.mark.skipif(detect().cores < 2, reason="variants need two cores to differ")

STEPS, STOP, NARROW = 6, 3, range(1, 5)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    # One lane of two-thread teams: the main schedule needs both cores, cores-1 one thread.
    return lenet_built(tmp_path_factory.mktemp("reproducible") / "lenet_teams", intra=2,
                       inter=1)


@contextmanager
def one_core():
    """The calling thread granted one core (what the executor reads before each step)."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(before)})
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def run(ex, graph, first: int, last: int, narrow=()):
    """Steps first..last-1, each on fresh feeds; steps in `narrow` granted one core."""
    for t in range(first, last):
        feeds = random_feeds(graph, seed=200 + t)
        if t in narrow:
            with one_core():
                ex.step(feeds)
        else:
            ex.step(feeds)


def trained(module, state, graph, last: int, narrow=(), **options):
    """A fresh executor from `state`, after steps 0..last-1 (`run`)."""
    ex = module.Executor(**options)
    ex.load_params(state)
    run(ex, graph, 0, last, narrow)
    return ex


def assert_same_bits(got: dict, want: dict) -> None:
    assert set(got) == set(want)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)


def test_the_plan_has_a_variant_of_other_thread_counts(built):
    _, p, _ = built
    assert max(op.threads for op in p.ops) == 2
    assert p.variants[-1].name == "cores-1" and set(p.variants[-1].threads) == {1}


def test_a_busy_machine_leaves_the_default_run_on_the_main_schedule_bit_for_bit(built):
    graph, _, module = built
    quiet = trained(module, start_state(graph), graph, STEPS)
    busy = trained(module, start_state(graph), graph, STEPS, NARROW)
    sched = busy.stats()["schedule"]
    assert sched["running"] == "main" and sched["switches"] == 0
    assert_same_bits(busy.params(), quiet.params())


def test_an_adaptive_executor_switches_under_the_same_load(built):
    graph, _, module = built
    ex = trained(module, start_state(graph), graph, 2, NARROW, adaptive=True)
    sched = ex.stats()["schedule"]
    assert sched["running"] == "cores-1" and sched["switches"] == 1
    assert "granted 1 core" in sched["reason"]


def test_resumed_under_load_equals_the_uninterrupted_quiet_run(built):
    graph, _, module = built
    whole = trained(module, start_state(graph), graph, STEPS)
    first = trained(module, start_state(graph), graph, STOP, NARROW)
    saved = first.state_dict()
    resumed = module.Executor()
    resumed.load_state_dict(saved)
    run(resumed, graph, STOP, STEPS, NARROW)
    assert resumed.stats()["schedule"]["switches"] == 0
    assert_same_bits(resumed.params(), whole.params())


CHILD = textwrap.dedent("""
    import sys
    import numpy as np
    sys.path.insert(0, sys.argv[1])
    import json
    from codegen.load import load
    from planner.plan import Plan
    from tests.codegen.test_reproducible import run
    module = load(sys.argv[2])
    graph = Plan.model_validate_json(module.plan).graph
    ex = module.Executor()
    ex.load_params(dict(np.load(sys.argv[3])))
    run(ex, graph, 0, {steps}, json.loads(sys.argv[4]))
    np.savez(sys.argv[5], **ex.params())
""")


def test_two_processes_give_the_same_bits_one_of_them_under_load(built, tmp_path):
    graph, _, module = built
    start = tmp_path / "start.npz"
    np.savez(start, **start_state(graph))
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    package = os.path.dirname(module.__file__)
    outs = []
    for k, narrow in enumerate(([], list(NARROW))):
        out = tmp_path / f"run{k}.npz"
        subprocess.run([sys.executable, "-c", CHILD.format(steps=STEPS), root, package,
                        str(start), str(narrow), str(out)], check=True, cwd=root, timeout=300)
        outs.append(dict(np.load(out)))
    assert_same_bits(outs[1], outs[0])
