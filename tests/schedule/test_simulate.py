"""The simulator: dependencies, lanes, SMT interference, and seed 002 Table III's ordering."""

from __future__ import annotations

import pytest

from planner.costs import CostModel
from planner.costs.fixtures import TABLE_III, table_ii
from planner.schedule.options import SMT_SLOWDOWN
from planner.schedule.placement import Placement
from planner.schedule.simulate import simulate
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
