"""The plan's schedule variants for fewer free cores (planner.memory.variants): planned,
verified, built in, chosen at run time by the cores the process is granted, and each giving
the reference interpreter's results."""

from __future__ import annotations

import os
import time
import warnings

import numpy as np
import pytest

from planner.graph.interpret import random_feeds, train_step, widened
from planner.pipeline import PlanOptions, plan
from planner.schedule import ScheduleOptions
from planner.target.detect import detect
from planner.verify import verify_plan
from planner.verify.variants import variant_problems
from tests.codegen.helpers import rel_error, start_state
from tests.codegen.zoo_cases import allowed
from tests.helpers.variants import lenet_built

pytestmark = pytest.mark.skipif(detect().cores < 2, reason="variants need two cores to differ")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    # Two lanes of one thread each: the main schedule needs both cores.
    return lenet_built(tmp_path_factory.mktemp("variants") / "lenet", intra=1, inter=2)


def reference(graph, state, feeds, steps):
    """Float32 and float64 reference runs of `steps` steps: (loss, state) of each."""
    single, exact = (dict(state), dict(state))
    for _ in range(steps):
        out32, single = train_step(graph, feeds, single)
        out64, exact = train_step(widened(graph), feeds, exact)
    return (out32["loss"], single), (out64["loss"], exact)


def assert_like_reference(graph, ex, loss, state, feeds, steps):
    (loss32, single), (loss64, exact) = reference(graph, state, feeds, steps)
    assert rel_error(loss, loss64) < allowed(loss32, loss64)
    got = ex.params()
    off = [k for k in exact if k in got
           and rel_error(got[k], exact[k]) >= allowed(single[k], exact[k])]
    assert off == []


def test_a_plan_carries_verified_variants_down_to_one_core(built):
    graph, p, _ = built
    assert verify_plan(p) == []
    assert p.variants[-1].name == "cores-1"
    assert all(t == 1 for t in p.variants[-1].threads)
    assert [v.cores for v in p.variants] == sorted({v.cores for v in p.variants}, reverse=True)
    assert all(len(v.threads) == len(p.ops) for v in p.variants)


def test_every_schedule_pinned_gives_the_reference_results(built):
    # On the lanes and one op at a time on the calling thread's team (concurrent=False: the
    # way torch.compile's backend runs on PyTorch's team), each with the schedule's own
    # thread counts; the two ways give the same bits.
    graph, p, module = built
    state, feeds = start_state(graph), random_feeds(graph, seed=3)
    names = [v["name"] for v in module.Executor().variants()]
    assert names == ["main"] + [v.name for v in p.variants]
    for name in names:
        ran = {}
        for concurrent in (True, False):
            ex = module.Executor(concurrent=concurrent)
            ex.load_params(state)
            ex.set_variant(name)
            losses = [ex.step(feeds)["loss"] for _ in range(2)]
            sched = ex.stats()["schedule"]
            assert sched["running"] == name and sched["pinned"], (name, concurrent)
            assert_like_reference(graph, ex, losses[-1], state, feeds, 2)
            ran[concurrent] = (losses, ex.params())
        (lanes, on_lanes), (team, on_team) = ran[True], ran[False]
        assert lanes == team and all(np.array_equal(on_lanes[k], on_team[k]) for k in on_lanes)


def test_a_narrowed_affinity_mask_moves_an_adaptive_step_to_a_one_core_variant(built):
    graph, _, module = built
    state, feeds = start_state(graph), random_feeds(graph, seed=4)
    ex = module.Executor()  # adaptive by default
    ex.load_params(state)
    ex.step(feeds)
    assert ex.stats()["schedule"]["running"] == "main"
    before = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, {min(before)})
        loss = ex.step(feeds)["loss"]
        sched = ex.stats()["schedule"]
        assert sched["running"] == "cores-1" and sched["granted_cores"] == 1
        assert "granted 1 core" in sched["reason"] and sched["switches"] == 1
    finally:
        os.sched_setaffinity(0, before)
    assert_like_reference(graph, ex, loss, state, feeds, 2)
    ex.step(feeds)  # all cores again: the main schedule fits, the variant keeps running
    assert ex.stats()["schedule"]["granted_cores"] == len(before)


def test_an_unknown_schedule_name_is_refused_naming_the_known_ones(built):
    _, _, module = built
    ex = module.Executor()
    # By default the rule chooses (every schedule computes the same bits); adaptive=False
    # holds the main schedule, None lets the rule choose again.
    assert not ex.stats()["schedule"]["pinned"]
    with pytest.raises(ValueError, match="no schedule named 'fast'.*main, cores-"):
        ex.set_variant("fast")
    held = module.Executor(adaptive=False)
    sched = held.stats()["schedule"]
    assert sched["pinned"] and "adaptive=False" in sched["reason"]
    held.set_variant(None)
    assert not held.stats()["schedule"]["pinned"]


@pytest.mark.parametrize("mutate, words", [
    (lambda v, d: v.update(threads=v["threads"][:-1]), "thread counts for"),
    (lambda v, d: v["threads"].__setitem__(0, v["cores"] + 1), "outside 1.."),
    (lambda v, d: v.update(cores=64, name="cores-64"), "cores on a target of"),
    (lambda v, d: d["happens_before"].append(
        {"before": d["ops"][-1]["name"], "after": d["ops"][0]["name"]}), "execution order"),
])
def test_verify_refuses_a_broken_variant(built, mutate, words):
    _, p, _ = built
    data = p.model_dump(mode="json", by_alias=True)
    mutate(data["variants"][0], data)
    assert any(words in problem for problem in variant_problems(data))


def test_variants_are_deterministic_and_can_be_left_out(built):
    graph, p, _ = built
    options = PlanOptions(schedule=ScheduleOptions(strategy="uniform", intra=1, inter=2))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        again = plan(graph, detect(), options=options)
        none = plan(graph, detect(), options=options.model_copy(update={"variants": False}))
    assert again.to_json() == p.to_json()
    assert none.variants == () and verify_plan(none) == []
    # Fewer cores: the fastest thread count among fewer choices, so never predicted faster;
    # one core: every op on one thread.
    steps = [v.step_seconds for v in p.variants]
    assert all(np.isfinite(steps)) and steps == sorted(steps) and steps[0] > 0
    assert p.variants[-1].cores == 1 and set(p.variants[-1].threads) == {1}


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


def test_a_schedule_left_lets_its_openmp_workers_go(tmp_path):
    # libgomp spins at its barriers only while the process holds no more of its threads than
    # CPUs: the idle team of a schedule not running would make every op of the running one
    # wake its workers from sleep (Lanes::release_teams).
    # One lane of two-thread teams: a worker beside the lane's thread.
    graph, p, module = lenet_built(tmp_path / "lenet_teams", intra=2, inter=1)
    state, feeds = start_state(graph), random_feeds(graph, seed=5)
    ex = module.Executor()
    ex.load_params(state)
    ex.step(feeds)  # the main schedule's team: its worker starts
    with_team = _threads()
    ex.set_variant("cores-1")
    loss = ex.step(feeds)["loss"]  # the variant's lane thread starts, the main team's worker goes
    deadline = time.monotonic() + 10
    # The variant's own team's workers: its ops kept on the main thread count (THREAD_BOUND).
    variant_workers = max(p.variants[-1].threads) - 1
    while _threads() > with_team + variant_workers and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _threads() == with_team + variant_workers
    assert_like_reference(graph, ex, loss, state, feeds, 2)
    ex.set_variant("main")  # back: a new team, pinned again, the reference's results
    loss = ex.step(feeds)["loss"]
    assert ex.stats()["schedule"]["running"] == "main"
    assert_like_reference(graph, ex, loss, state, feeds, 3)
