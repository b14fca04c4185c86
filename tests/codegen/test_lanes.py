"""The executor runs the plan as planned: ops on their lanes, co-running, and the results of
the one-at-a-time run of the same plan, bit for bit, under adversarial interleavings too."""

from __future__ import annotations

import numpy as np
import pytest

from codegen.build import build
from codegen.load import load
from codegen.render import render
from planner.frontend.autodiff import make_training_graph
from planner.graph.interpret import random_feeds
from planner.graph.optimizer import Optimizer
from planner.pipeline import PlanOptions, plan
from planner.schedule import ScheduleOptions
from planner.target.detect import detect
from planner.verify import verify_plan
from planner.zoo import build as zoo
from tests.codegen.helpers import start_state

# Small training graphs with independent branches (inception's towers, resnet's shortcuts,
# the LSTM's gates and batched weight gradients, wide_deep's embeddings).
MODELS = {
    "lenet": dict(batch=4, image=12),
    "resnet": dict(depth=18, batch=2, image=16, width=0.125, classes=5),
    "inception_v3": dict(batch=2, image=75, width=0.0625, classes=5),
    "lstm": dict(batch=2, seq=4, hidden=16, vocab=30),
}


def two_lane_plan(graph):
    """Two lanes of one thread each: ops co-run whenever the graph lets them."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return plan(graph, detect(), options=PlanOptions(
            schedule=ScheduleOptions(strategy="uniform", intra=1, inter=2)))


def steps(module, state, feeds, n=2, **options):
    ex = module.Executor(**options)
    ex.load_params(state)
    losses = [ex.step(feeds)["loss"] for _ in range(n)]
    return ex, losses, ex.params()


@pytest.mark.skipif(detect().cores < 2, reason="co-running needs two cores")
@pytest.mark.parametrize("name", sorted(MODELS))
def test_co_running_lanes_give_the_sequential_results(name, tmp_path):
    graph = make_training_graph(zoo(name, **MODELS[name]), Optimizer(kind="sgd", lr=0.05))
    p = two_lane_plan(graph)
    assert verify_plan(p) == []
    corun = sum(1 for a in p.ops for b in p.ops if a.order < b.order
                and a.start < b.end and b.start < a.end)
    assert corun > 0, "the plan co-runs nothing"
    module = load(build(render(p, tmp_path / name)).dir)
    state, feeds = start_state(graph), random_feeds(graph, seed=3)
    seq, want_losses, want = steps(module, state, feeds, concurrent=False)
    assert not seq.concurrent
    for options in ({}, {"jitter_us": 300}):
        ex, losses, got = steps(module, state, feeds, **options)
        assert ex.concurrent and ex.lanes == 2
        assert [float(x) for x in losses] == [float(x) for x in want_losses]
        for k in want:
            assert np.array_equal(got[k], want[k]), (options, k)
    lanes = {o["lane"] for o in ex.stats()["ops"]}
    assert lanes == {0, 1}
    assert_timeline_keeps_the_order(p, ex.stats())


def assert_timeline_keeps_the_order(p, stats):
    """The last step's measured timeline (each op's start and end) keeps every happens-before
    edge of the plan: the consumer started after its producer ended."""
    span = {o["name"]: (o["start"], o["end"]) for o in stats["ops"]}
    assert all(0.0 <= s <= e for s, e in span.values())
    late = [(e.before, e.after) for e in p.happens_before
            if span[e.after][0] < span[e.before][1]]
    assert not late, f"started before what it waits for ended: {late[:3]}"


@pytest.mark.skipif(detect().cores < 2, reason="parallel-loop groups need two cores")
def test_parallel_loop_groups_give_the_sequential_results(tmp_path):
    # The optimized plan runs ready ops of one signature as one loop, one member per thread of
    # a team of two (Inception's batch-norm and ReLU gradients, convolution weight gradients
    # when the detected peaks favour it): each member's kernel must be made for the one thread
    # it gets (made for the team, a oneDNN backward-weights convolution of Inception-v3 waited
    # at its reduction barrier for a thread that never came).
    name = "inception_v3"
    import warnings

    graph = make_training_graph(zoo(name, **MODELS[name]), Optimizer(kind="sgd", lr=0.05))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        p = plan(graph, detect(), options=PlanOptions(
            schedule=ScheduleOptions(strategy="optimized", min_gain=0.0)))
    assert verify_plan(p) == []
    assert any(o.group and o.threads >= 2 for o in p.ops), "no group of two threads"
    module = load(build(render(p, tmp_path / name)).dir)
    state, feeds = start_state(graph), random_feeds(graph, seed=3)
    _, want_losses, want = steps(module, state, feeds, concurrent=False)
    ex, losses, got = steps(module, state, feeds, watchdog_seconds=60.0)
    assert [float(x) for x in losses] == [float(x) for x in want_losses]
    for k in want:
        assert np.array_equal(got[k], want[k]), k


def flat_costs(graph, target, corun_slowdown: float):
    """A cost table where no op of `graph` runs faster on more threads (each signature's time
    on one thread and on every count alike, 10-40 us by its position), measured co-running
    `corun_slowdown` slower and handing over across lanes in 40 us (the 2-core VM's figure):
    every independent pair is worth a co-run group."""
    from planner.costs.records import CostEntry, CostTable, CpuSample
    from planner.costs.signature import graph_signatures

    unique = {s.key: s for s in graph_signatures(graph).values()}
    return CostTable(target=target.name, corun_slowdown=corun_slowdown, handoff_seconds=4e-5,
                     entries=tuple(
        CostEntry(signature=s, cpu=tuple(
            CpuSample(threads=k, affinity="compact", seconds=(1 + i % 4) * 1e-5)
            for k in range(1, target.cores + 1)))
        for i, s in enumerate(sorted(unique.values(), key=lambda s: s.key))))


@pytest.mark.skipif(detect().cores < 2, reason="co-run groups need two cores")
def test_co_run_groups_of_different_ops_give_the_sequential_results(tmp_path):
    # Ready ops that gain nothing from a second thread run side by side as one loop on one
    # lane (a convolution's data and weight gradients, an update beside the next layer's
    # gradient): each member on one thread, any mix of kernels (oneDNN's, the runtime's own),
    # the same bits as one op at a time.
    import warnings

    name = "resnet"
    graph = make_training_graph(zoo(name, **MODELS[name]), Optimizer(kind="sgd", lr=0.05))
    target = detect()
    options = PlanOptions(schedule=ScheduleOptions(min_gain=0.0))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        step_graph = plan(graph, target, options=options).graph
        p = plan(graph, target, flat_costs(step_graph, target, 0.2), options=options)
    assert verify_plan(p) == []
    members: dict[str, set[str]] = {}
    for o in p.ops:
        if o.group:
            members.setdefault(o.group, set()).add(o.op)
    assert any(len(ops) > 1 for ops in members.values()), "no group of different ops"
    assert {o.lane for o in p.ops} == {0}, "co-run groups keep the step on one lane"
    # The evaluation runs one op at a time: a group there would put each member on one thread
    assert p.evaluation is not None and not any(o.group for o in p.evaluation.plan.ops)
    module = load(build(render(p, tmp_path / name)).dir)
    state, feeds = start_state(graph), random_feeds(graph, seed=3)
    _, want_losses, want = steps(module, state, feeds, concurrent=False)
    for options in ({}, {"jitter_us": 300}):
        ex, losses, got = steps(module, state, feeds, watchdog_seconds=60.0, **options)
        assert [float(x) for x in losses] == [float(x) for x in want_losses]
        for k in want:
            assert np.array_equal(got[k], want[k]), (options, k)
    assert_timeline_keeps_the_order(p, ex.stats())


@pytest.fixture(scope="module")
def relu_teams(tmp_path_factory):
    """(graph, plan, built module): one lane of 8 Relus alternating one thread and two."""
    from codegen.profiling import copies_graph, placements_plan
    from planner.costs.signature import OpSignature
    from planner.target.records import affinity_cpus

    target = detect()
    one, two = (affinity_cpus(target, k, "compact") for k in (1, 2))
    assert two[0] == one[0]
    graph = copies_graph(OpSignature(op="Relu", shapes=((64, 64),), dtypes=("float32",)), 8)
    p = placements_plan(graph, target, [(1, one), (2, two)] * 4)
    return graph, p, load(build(render(p, tmp_path_factory.mktemp("relu") / "relu")).dir)


@pytest.mark.skipif(detect().cores < 2, reason="teams of two need two cores")
def test_a_lane_re_pins_its_team_only_when_a_thread_moves(relu_teams):
    # One lane whose ops alternate one thread and two: thread 0 stays on the lane's CPU, and
    # thread 1 on its own while it sleeps, so only the first op of each size pins. (Pinning on
    # every change of the set cost ~85 us per op on the 2-core VM: 5% of ResNet-50's step.)
    graph, p, module = relu_teams
    ex = module.Executor()
    feeds = random_feeds(graph, seed=0)
    for _ in range(3):
        ex.step(feeds)
    stats = ex.stats()
    assert stats["pinnings"] == 2
    assert {o["threads"] for o in stats["ops"]} == {1, 2}
    assert_timeline_keeps_the_order(p, stats)


@pytest.mark.skipif(detect().cores < 2, reason="teams of two need two cores")
def test_unpinned_teams_are_let_go_and_give_the_pinned_results(relu_teams):
    # set_pinning(False): the threads a lane pinned get the process's CPUs back at its next
    # op, no op pins again, and a new executor unpinned from the start never pins.
    import os

    graph, _, module = relu_teams
    feeds = random_feeds(graph, seed=0)
    full = os.sched_getaffinity(0)

    def masks() -> dict[int, set[int]]:
        out = {}
        for tid in os.listdir("/proc/self/task"):
            try:
                out[int(tid)] = os.sched_getaffinity(int(tid))
            except OSError:  # a thread that ended meanwhile
                pass
        return out

    before = masks()
    ex = module.Executor()
    want = ex.step(feeds)
    pinned = {t for t, m in masks().items() if m != full and before.get(t) != m}
    assert pinned and ex.stats()["pinnings"] == 2
    ex.set_pinning(False)
    got = ex.step(feeds)
    now = masks()
    assert all(now[t] == full for t in pinned if t in now)
    assert ex.stats()["pinnings"] == 2
    loose = module.Executor()
    loose.set_pinning(False)
    again = loose.step(feeds)
    assert loose.stats()["pinnings"] == 0
    for k in want:
        assert np.array_equal(got[k], want[k]) and np.array_equal(again[k], want[k]), k


def test_a_stalled_step_raises_naming_the_ops_not_finished(tmp_path):
    graph = make_training_graph(zoo("mlp", batch=2, hidden=[4], in_features=3, classes=2),
                                Optimizer(kind="sgd"))
    module = load(build(render(two_lane_plan(graph), tmp_path / "mlp")).dir)
    ex = module.Executor(jitter_us=1_500_000, watchdog_seconds=0.3)
    ex.load_params(start_state(graph))
    with pytest.raises(RuntimeError, match="stalled: no op finished in .* ops not finished: '"):
        ex.step(random_feeds(graph))
    with pytest.raises(RuntimeError, match="stalled; create a new executor"):
        ex.step(random_feeds(graph))


def test_async_steps_match_step_and_let_the_caller_refill_its_feeds(tmp_path):
    graph = make_training_graph(zoo("lenet", **MODELS["lenet"]), Optimizer(kind="sgd", lr=0.05))
    module = load(build(render(two_lane_plan(graph), tmp_path / "lenet")).dir)
    state = start_state(graph)
    batches = [random_feeds(graph, seed=s) for s in (5, 6, 7)]
    sync = module.Executor()
    sync.load_params(state)
    want = [float(sync.step(b)["loss"]) for b in batches]
    ex = module.Executor()
    ex.load_params(state)
    assert ex.wait_for_all() is None
    feeds = {k: v.copy() for k, v in batches[0].items()}
    got = []
    for k in range(3):
        ex.step_async(feeds)
        with pytest.raises(ValueError, match="already in flight"):
            ex.step_async(feeds)
        with pytest.raises(ValueError, match="in flight"):
            ex.params()
        if k < 2:  # the next batch goes into the same arrays while the step runs
            for name, value in batches[k + 1].items():
                feeds[name][...] = value
        got.append(float(ex.wait()["loss"]))
    assert got == want
    with pytest.raises(RuntimeError, match="no step in flight"):
        ex.wait()
    bad = {k: v.copy() for k, v in batches[0].items()}
    bad["labels"][0] = 10_000
    # Feeds are checked before the step starts: it raises at once, and nothing is in flight.
    with pytest.raises(RuntimeError, match="SoftmaxCrossEntropy.*out of range"):
        ex.step_async(bad)
    assert ex.wait_for_all() is None
