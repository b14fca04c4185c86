"""Bits that do not depend on the load (docs/executor.md, "Busy machines"): by default the
executor switches to a variant for fewer cores when it is granted fewer, and every variant
computes the main schedule's bits, so a run, the same run in another process, a run stopped
and resumed, and a run that switched schedules mid-training all compute the same bits.

The plan's main schedule is one lane of two-thread teams, and its one-core variant runs every
op on one thread but the oneDNN ops whose split follows the team (planner.memory.variants'
THREAD_BOUND), which keep two. Narrowing the calling thread's affinity mask to one core is
what a busy machine (a cgroup quota, a neighbour's `taskset`) does to the granted cores, and
forces the executor's switch.
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
from planner.memory.variants import THREAD_BOUND
from planner.target.detect import detect
from planner.verify import verify_plan
from tests.codegen.helpers import start_state
from tests.helpers import thread_bits
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
    assert {op.threads for op in p.ops} == {2}
    last = p.variants[-1]
    assert last.name == "cores-1"
    kept = {op.op for op, t in zip(p.ops, last.threads, strict=True) if t == 2}
    ones = {op.op for op, t in zip(p.ops, last.threads, strict=True) if t == 1}
    assert kept and kept <= THREAD_BOUND and ones and not ones & kept
    assert verify_plan(p) == []  # an op kept above the variant's cores is sound


def test_a_busy_machine_switches_the_default_run_bit_for_bit(built):
    graph, _, module = built
    # The reference holds the main schedule (this shared machine's own load may switch a
    # default executor even without narrowing).
    quiet = trained(module, start_state(graph), graph, STEPS, adaptive=False)
    busy = trained(module, start_state(graph), graph, STEPS, NARROW)
    sched = busy.stats()["schedule"]
    steps = {e["name"]: e["steps"] for e in sched["schedules"]}
    assert sched["switches"] >= 1 and steps["cores-1"] >= len(NARROW)
    assert_same_bits(busy.params(), quiet.params())


def test_the_default_executor_switches_under_the_load_and_a_main_only_one_does_not(built):
    graph, _, module = built
    ex = trained(module, start_state(graph), graph, 2, NARROW)
    sched = ex.stats()["schedule"]
    assert sched["running"] == "cores-1" and sched["switches"] == 1
    assert "granted 1 core" in sched["reason"]
    pinned = trained(module, start_state(graph), graph, 2, NARROW, adaptive=False)
    assert pinned.stats()["schedule"]["running"] == "main"
    assert pinned.stats()["schedule"]["switches"] == 0
    assert_same_bits(pinned.params(), ex.params())


def test_a_switch_forced_mid_training_gives_the_unswitched_bits(built):
    graph, _, module = built
    whole = trained(module, start_state(graph), graph, STEPS, adaptive=False)
    ex = trained(module, start_state(graph), graph, STOP, adaptive=False)  # no switch but ours
    ex.set_variant("cores-1")
    run(ex, graph, STOP, STEPS - 1)
    ex.set_variant("main")
    run(ex, graph, STEPS - 1, STEPS)
    assert ex.stats()["schedule"]["switches"] == 2
    assert_same_bits(ex.params(), whole.params())


def test_resumed_under_load_equals_the_uninterrupted_quiet_run(built):
    graph, _, module = built
    whole = trained(module, start_state(graph), graph, STEPS, adaptive=False)
    first = trained(module, start_state(graph), graph, STOP, NARROW)
    saved = first.state_dict()
    resumed = module.Executor()
    resumed.load_state_dict(saved)
    run(resumed, graph, STOP, STEPS, NARROW)
    assert resumed.stats()["schedule"]["switches"] >= 1
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


def test_every_variant_of_a_transformer_gives_the_main_schedules_bits(tmp_path):
    # LayerNorm, attention's softmax and batched MatMuls, bias gradients over (tokens, C):
    # every op on two threads, each variant forced (tests/helpers/thread_bits.py).
    case = thread_bits.built("gpt", tmp_path)
    differ = thread_bits.parameters_differ(case)
    assert "cores-1" in differ and all(names == [] for names in differ.values()), differ
