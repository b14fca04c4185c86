"""The lower bounds: below every schedule the strategies make, above DESIGN.md's two terms."""

from __future__ import annotations

from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.schedule import bound
from planner.schedule.bound import (
    ITERATIONS,
    PLATEAU_GAIN,
    PLATEAU_STEPS,
    Hulls,
    allotment_bound,
    capacity,
    longest_path,
    lower_bound,
    work_hull,
)
from planner.schedule.costs import OpCosts
from planner.schedule.optimized import list_moldable
from planner.schedule.placement import in_order
from planner.schedule.simulate import simulate

CORES = 4
GROUPS = ((0, 1), (2, 3))
SLOWDOWN = 1.9


def curves(draw_times: list[list[float]]) -> OpCosts:
    times = tuple(np.array(t) for t in draw_times)
    return OpCosts(times=times, affinity=(("compact",) * CORES,) * len(times),
                   keys=tuple(f"op{i}" for i in range(len(times))), analytical=())


@st.composite
def instances(draw):
    n = draw(st.integers(1, 7))
    preds = tuple(tuple(sorted(draw(st.sets(st.integers(0, i - 1), max_size=2)))) if i else ()
                  for i in range(n))
    times = []
    for _ in range(n):
        serial = draw(st.floats(0.1, 10.0))
        fraction = draw(st.floats(0.0, 0.9))
        overhead = draw(st.floats(0.0, 0.5))
        times.append([serial * (fraction + (1 - fraction) / k) + overhead * (k - 1)
                      for k in range(1, CORES + 1)])
    allot = [draw(st.integers(1, CORES)) for _ in range(n)]
    priority = [draw(st.floats(0.0, 1.0)) for _ in range(n)]
    return preds, times, allot, priority


@settings(max_examples=60, deadline=None)
@given(instances(), st.booleans())
def test_bound_is_below_any_list_schedule_and_above_design_terms(instance, smt):
    preds, times, allot, priority = instance
    costs = curves(times)
    cap = capacity(CORES, 2, SLOWDOWN)
    b = lower_bound(costs, preds, cap)
    assert b.allotment >= max(b.critical_path, b.area) * (1 - 1e-12)
    assert b.seconds == max(b.critical_path, b.area, b.allotment, b.cut)
    ps = in_order(list_moldable(costs, preds, priority, allot, GROUPS, smt, SLOWDOWN, None))
    step = simulate(ps, preds, CORES, SLOWDOWN).step_seconds
    assert b.seconds <= step * (1 + 1e-9)


def test_allotment_bound_charges_path_and_work_together():
    # two independent chains of two ops; each op: 4 s on one core, 1.25 s on four.
    t = [4.0, 2.1, 1.5, 1.25]
    costs = curves([t] * 4)
    preds = ((), (0,), (), (2,))
    b = lower_bound(costs, preds, capacity=4.0)
    assert (b.critical_path, b.area) == (2.5, 4.0)
    # best: both chains side by side on two cores each, 2 x 2.1 s = 4.2 s; the bound is
    # between the old terms and that
    assert 4.0 < b.seconds <= 4.2 + 1e-9


def test_cut_bound_keeps_idle_cores_of_one_phase_from_the_next():
    # a: 1 s whatever its threads; b after it, 0.1 s; then four independent ops of 1 core-second
    # each, perfectly parallel. Best: 1 + 0.1 + 4 / 4 = 2.1 s. The global terms let the four
    # use the cores a leaves idle; the cut at b does not.
    serial, tiny, parallel = [1.0] * CORES, [0.1] * CORES, [1.0 / k for k in range(1, CORES + 1)]
    costs = curves([serial, tiny, parallel, parallel, parallel, parallel])
    preds = ((), (0,), (1,), (1,), (1,), (1,))
    b = lower_bound(costs, preds, capacity=4.0)
    assert max(b.critical_path, b.area, b.allotment) < 1.9
    assert b.cut == pytest.approx(2.1) and b.seconds == b.cut


def test_work_hull_is_convex_and_ends_at_least_work():
    x, w = work_hull(np.array([4.0, 2.1, 1.5, 1.25]))
    assert list(x) == sorted(x) and list(w) == sorted(w, reverse=True)
    slopes = np.diff(w) / np.maximum(np.diff(x), 1e-300)
    assert all(a <= b + 1e-12 for a, b in zip(slopes, slopes[1:], strict=False))
    assert w[-1] == 4.0 and x[0] == 1.25


def test_longest_path_and_empty_graph():
    assert longest_path([1.0, 5.0, 1.0], ((), (), (0, 1))) == [1, 2]
    assert allotment_bound(curves([]), (), 4.0) == 0.0


def padded_relax(hulls: Hulls, preds, capacity: float) -> tuple[float, list[float]]:
    """Frank-Wolfe over the padded (nodes x vertices) matrices, written the direct way."""
    n = len(preds)
    durations, work = hulls.durations, hulls.work / capacity
    rows = np.arange(n)
    flow = np.zeros(n)
    flow[longest_path(durations[:, 0].tolist(), preds)] = 1.0
    mu, best, since, steps, picked = 0.0, float(work.min(axis=1).sum()), 0, 0, np.zeros(n)
    for step in range(ITERATIONS):
        value = flow[:, None] * durations + mu * work
        pick = value.argmin(axis=1)
        x = durations[rows, pick]
        picked += x
        steps += 1
        found = float(value[rows, pick].sum())
        if found > best * (1 + PLATEAU_GAIN):
            best, since = found, 0
        else:
            best, since = max(best, found), since + 1
            if since == PLATEAU_STEPS:
                break
        path = longest_path(x.tolist(), preds)
        gamma = 2.0 / (step + 3.0)
        flow *= 1.0 - gamma
        mu *= 1.0 - gamma
        if float(x[path].sum()) >= float(work[rows, pick].sum()):
            flow[path] += gamma
        else:
            mu += gamma
    return best, (picked / steps).tolist()


@settings(max_examples=30, deadline=None)
@given(st.integers(2, 40), st.integers(0, 2**32 - 1))
def test_banded_relaxation_is_the_padded_one(n, seed):
    # relax groups nodes by hull length and skips the padding; every pick and sum must be the
    # padded computation's, bit for bit (plans embed the bound and its durations).
    rng = np.random.default_rng(seed)
    cores = int(rng.integers(2, 70))
    times = []
    for _ in range(n):
        k = np.arange(1, cores + 1)
        serial, fraction, overhead = rng.uniform(0.1, 10), rng.uniform(0, 0.95), rng.uniform(0, 1)
        times.append(serial * (fraction + (1 - fraction) / k) + overhead * 1e-2 * (k - 1))
    costs = OpCosts(times=tuple(times), affinity=(("compact",) * cores,) * n,
                    keys=tuple(f"op{i}" for i in range(n)), analytical=())
    preds = tuple(tuple(sorted({int(p) for p in rng.integers(0, i, size=2)})) if i else ()
                  for i in range(n))
    hulls = Hulls.of(costs)
    assert hulls.relax(preds, 3.0) == padded_relax(hulls, preds, 3.0)


def direct_longest_path(times, preds) -> list[int]:
    """The first longest path, written the direct way: per node the first predecessor that
    ends strictly later than 0 and than every one before it."""
    dist, via = [], []
    for i, ps in enumerate(preds):
        best, arg = 0.0, -1
        for p in ps:
            if dist[p] > best:
                best, arg = dist[p], p
        dist.append(best + times[i])
        via.append(arg)
    path = [dist.index(max(dist))]
    while via[path[-1]] >= 0:
        path.append(via[path[-1]])
    return path[::-1]


@st.composite
def tied_dags(draw):
    # few distinct durations, zero among them: path lengths tie often
    n = draw(st.integers(1, 30))
    preds = tuple(tuple(sorted(draw(st.sets(st.integers(0, i - 1), max_size=4)))) if i else ()
                  for i in range(n))
    return preds, [draw(st.sampled_from([0.0, 0.5, 1.0, 1.5, 3.0])) for _ in range(n)]


@settings(max_examples=200, deadline=None)
@given(tied_dags())
def test_longest_path_is_the_first_longest(dag):
    preds, times = dag
    assert longest_path(times, preds) == direct_longest_path(times, preds)


@settings(max_examples=60, deadline=None)
@given(tied_dags(), st.integers(2, 6), st.booleans(), st.booleans())
def test_relaxation_is_the_padded_one_where_paths_tie(dag, cores, idle, shortcuts):
    # relax drops the edges a longer way covers (unless `shortcuts`: as on graphs too large)
    # and ends paths at sinks (when every duration is positive); with durations on a coarse
    # grid and the graph twice side by side, paths tie and the first-longest choice must not
    # move. `idle`: the ops drawn as 0 take no time at all, and paths no longer grow at
    # every node.
    preds, base = dag
    preds += tuple(tuple(p + len(base) for p in ps) for ps in preds)
    base = base + base
    times = [np.array([1.0 + b] + [(1.0 + b) * 2 / (k + 1) for k in range(1, cores)])
             * (0.0 if idle and b == 0.0 else 1.0) for b in base]
    costs = OpCosts(times=tuple(times), affinity=(("compact",) * cores,) * len(times),
                    keys=tuple(f"op{i}" for i in range(len(times))), analytical=())
    hulls = Hulls.of(costs)
    with mock.patch.object(bound, "SHORTCUT_NODES", 0 if shortcuts else bound.SHORTCUT_NODES):
        assert hulls.relax(preds, 2.0) == padded_relax(hulls, preds, 2.0)


@pytest.mark.parametrize("idle", [False, True])
def test_relaxation_ties_go_to_the_first_node_when_bands_reorder_nodes(idle):
    # Node 0 and 600 one-vertex nodes end equally late at first; the relaxation keeps the
    # one-vertex hulls in a band of their own, before node 0's long hull. `idle`: one more
    # node takes no time at all, so paths do not grow at every node. The first longest path
    # must still be node 0's, as in the padded computation.
    k = np.arange(1, 41)
    curve = 1.0 / k + 0.01 * k
    times = (curve * 2.0 / curve.min(),) + (np.full(40, 2.0),) * 600 + (np.zeros(40),) * idle
    costs = OpCosts(times=times, affinity=(("compact",) * 40,) * len(times),
                    keys=("op",) * len(times), analytical=())
    hulls, preds = Hulls.of(costs), ((),) * len(times)
    assert hulls.relax(preds, 2.0) == padded_relax(hulls, preds, 2.0)
