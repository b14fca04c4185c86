"""The simulator: dependencies, lanes, SMT interference, and seed 002 Table III's ordering."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.costs import CostModel
from planner.costs.fixtures import TABLE_III, table_ii
from planner.schedule.options import SMT_SLOWDOWN
from planner.schedule.placement import Placement
from planner.schedule.simulate import (
    HandOffs,
    exclusive_cores_loop,
    execution_waits,
    shared_cores_loop,
    simulate,
    unblocking,
)
from planner.target import preset


def test_dependencies_and_lanes_serialise():
    ps = [Placement((0,), (0, 1), "compact", 1.0, 0.0),
          Placement((1,), (2, 3), "compact", 2.0, 0.0),
          Placement((2,), (0,), "compact", 1.0, 1.0)]
    r = simulate(ps, ((), (), (1,)), cores=4, smt_slowdown=1.9)
    assert r.starts == (0.0, 0.0, 2.0)  # waits for its dependency, not for the lane only
    assert r.step_seconds == 3.0
    assert r.utilization == pytest.approx((2 * 1 + 2 * 2 + 1) / (4 * 3))


def test_unplaced_node_is_an_error():
    with pytest.raises(ValueError, match="not placed"):
        simulate([Placement((0,), (0,), "compact", 1.0, 0.0)], ((), ()), 1, 1.9)


def test_fig4_statistic_counts_running_ops_at_events():
    ps = [Placement((0,), (0,), "compact", 2.0, 0.0), Placement((1,), (1,), "compact", 1.0, 0.0)]
    r = simulate(ps, ((), ()), cores=2, smt_slowdown=1.9)
    # events: start (1), start (2), finish (1), finish (0)
    assert r.events == 4 and r.mean_corun == pytest.approx((1 + 2 + 1 + 0) / 4)


def test_table_iii_ordering_on_seed_fixtures():
    knl = preset("knl-7250")
    model = CostModel(knl, table_ii())
    a, b = TABLE_III.ops
    t = {(s.op, k): model.time(s, k).seconds for s in (a, b) for k in (34, 68)}
    everything, half = tuple(range(68)), tuple(range(34))
    serial = simulate([Placement((0,), everything, "compact", t[a.op, 68], 0.0),
                       Placement((1,), everything, "compact", t[b.op, 68], 0.0)],
                      ((), ()), 68, SMT_SLOWDOWN).step_seconds
    hyper = simulate([Placement((0,), everything, "compact", t[a.op, 68], 0.0),
                      Placement((1,), everything, "compact", t[b.op, 68], 0.0, smt=True)],
                     ((), ()), 68, SMT_SLOWDOWN).step_seconds
    split = simulate([Placement((0,), half, "compact", t[a.op, 34], 0.0),
                      Placement((1,), tuple(range(34, 68)), "compact", t[b.op, 34], 0.0)],
                     ((), ()), 68, SMT_SLOWDOWN).step_seconds
    assert split < hyper < serial
    # and near the published times (one run of both ops, seconds)
    assert serial == pytest.approx(TABLE_III.serial_seconds, rel=0.05)
    assert split == pytest.approx(TABLE_III.split_seconds, rel=0.2)


def test_smt_slows_the_small_op_and_delays_the_wide_op_by_its_worst_thread():
    wide = Placement((0,), (0, 1, 2, 3), "compact", 4.0, 0.0)
    small = Placement((1,), (0,), "compact", 1.0, 0.0, smt=True)
    r = simulate([wide, small], ((), ()), cores=4, smt_slowdown=2.0)
    # the small op runs at half pace for its whole run; the wide op's thread on core 0 lost
    # half of those 2 s, and the team waits for it
    assert r.ends == (5.0, 2.0)
    # two small ops on different cores, one after the other: the wide op waits for the worse
    # of its two delayed threads, not for both delays added up
    late = Placement((2,), (1,), "compact", 1.0, 0.0, smt=True)
    r = simulate([wide, small, late], ((), (), (1,)), cores=4, smt_slowdown=2.0)
    assert r.starts[2] == 2.0 and r.ends == (5.0, 2.0, 4.0)


def test_smt_op_runs_at_full_pace_once_the_wide_op_ends():
    wide = Placement((0,), (0, 1), "compact", 1.0, 0.0)
    small = Placement((1,), (0, 1), "compact", 2.0, 0.0, smt=True)
    r = simulate([wide, small], ((), ()), cores=2, smt_slowdown=2.0)
    # both at half pace until the wide op ends at 2 s; the small op then has 1 s left alone
    assert r.ends == (2.0, 3.0)
    assert r.utilization == pytest.approx(1.0)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sets(st.integers(0, 5), min_size=1), st.sampled_from(
    [0.5, 1.0, 1.0 + 1e-13, 2.0, 3.25])), min_size=1, max_size=12), st.randoms())
def test_fast_path_without_smt_is_the_event_loop(ops, rnd):
    # Schedules that never use a second hardware thread take a shortcut; it must give the
    # general loop's floats exactly (near-equal ends included: they finish in one event).
    placements = [Placement((i,), tuple(sorted(cores)), "compact", seconds, 0.0)
                  for i, (cores, seconds) in enumerate(ops)]
    preds = tuple(tuple(sorted(rnd.sample(range(i), rnd.randint(0, min(i, 2)))))
                  for i in range(len(ops)))
    blocked, unblocks = unblocking(placements, preds)
    fast = exclusive_cores_loop(placements, list(blocked), unblocks, 6)
    slow = shared_cores_loop(placements, list(blocked), unblocks, 6, SMT_SLOWDOWN)
    assert fast == slow
    assert simulate(placements, preds, 6, SMT_SLOWDOWN) == fast


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sets(st.integers(0, 5), min_size=1), st.sampled_from(
    [0.5, 1.0, 1.0 + 1e-13, 2.0, 3.25])), min_size=1, max_size=12), st.randoms(),
    st.sampled_from([0.0, 0.125, 0.7]))
def test_an_op_handed_over_from_another_lane_starts_the_hand_off_after(ops, rnd, handoff):
    # The runtime wakes a lane's sleeping thread when its op's last wait ends on another lane
    # (lanes.cpp); on its own lane the op follows at once. Both loops time it alike.
    placements = [Placement((i,), tuple(sorted(cores)), "compact", seconds, 0.0)
                  for i, (cores, seconds) in enumerate(ops)]
    preds = tuple(tuple(sorted(rnd.sample(range(i), rnd.randint(0, min(i, 2)))))
                  for i in range(len(ops)))
    blocked, unblocks = unblocking(placements, preds)
    fast = exclusive_cores_loop(placements, list(blocked), unblocks, 6,
                                HandOffs(placements, handoff))
    slow = shared_cores_loop(placements, list(blocked), unblocks, 6, SMT_SLOWDOWN,
                             HandOffs(placements, handoff))
    assert (fast.starts, fast.ends, fast.core_busy) == (slow.starts, slow.ends, slow.core_busy)
    lane = [min(p.cores) for p in placements]
    for j, waits in enumerate(execution_waits(placements, preds)):
        assert fast.starts[j] == max((fast.ends[i] + (handoff if lane[i] != lane[j] else 0.0)
                                      for i in waits), default=0.0)
    without = simulate(placements, preds, 6, SMT_SLOWDOWN)
    assert fast.step_seconds >= without.step_seconds
    if handoff == 0.0 or len(set(lane)) == 1:
        assert fast == without


def test_hand_offs_delay_an_smt_schedule_too():
    # a on core 0, b (its sibling thread) after it on another lane, c after a on a's lane.
    ps = [Placement((0,), (0,), "compact", 1.0, 0.0),
          Placement((1,), (0,), "compact", 1.0, 1.0, smt=True),
          Placement((2,), (0,), "compact", 1.0, 1.0)]
    r = simulate(ps, ((), (0,), (0,)), cores=1, smt_slowdown=2.0, handoff=0.5)
    # c runs alone 1-1.5 s, then beside b, both at half pace, to its end at 2.5 s; b alone
    # from there.
    assert r.starts == (0.0, 1.5, 1.0)
    assert r.ends[2] == pytest.approx(2.5) and r.ends[1] == pytest.approx(3.0)


def test_near_equal_ends_finish_in_one_event_on_both_paths():
    ps = [Placement((0,), (0,), "compact", 1.0, 0.0),
          Placement((1,), (1,), "compact", 1.0 + 1e-13, 0.0),
          Placement((2,), (2,), "compact", 1.0, 0.0)]
    preds = ((), (), (1,))
    fast = simulate(ps, preds, 3, SMT_SLOWDOWN)
    smt = simulate(ps + [Placement((3,), (2,), "compact", 1.0, 0.0, smt=True)],
                   preds + ((),), 3, SMT_SLOWDOWN)
    assert fast.ends == (1.0, 1.0, 2.0) and fast.events == 6
    assert smt.ends[:2] == fast.ends[:2]
