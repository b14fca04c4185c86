"""The optimized strategy's parts: relaxation-guided allotments and widening into idle cores."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.schedule import ScheduleOptions
from planner.schedule.costs import OpCosts
from planner.schedule.optimized import (
    WIDEN,
    heaviest,
    list_moldable,
    moves,
    optimized,
    relaxed_allotment,
)
from planner.schedule.placement import in_order
from planner.schedule.simulate import simulate

GROUPS = ((0, 1), (2, 3))


def curves(*times: list[float]) -> OpCosts:
    arrays = tuple(np.array(t) for t in times)
    return OpCosts(times=arrays, affinity=(("compact",) * 4,) * len(arrays),
                   keys=tuple(f"op{i}" for i in range(len(arrays))), analytical=())


def test_relaxed_allotment_takes_the_fewest_threads_within_the_duration():
    c = curves([4.0, 2.2, 1.6, 1.3], [4.0, 2.2, 1.6, 1.3])
    assert relaxed_allotment(c, [2.0, 1.0], 1.0) == [3, 4]  # 1.0 s is out of reach: fastest
    assert relaxed_allotment(c, [2.0, 1.0], 1.1) == [2, 4]


@pytest.mark.parametrize("widen", WIDEN)
def test_a_lone_op_widens_into_cores_nothing_else_can_use(widen):
    c = curves([4.0, 2.2, 1.6, 1.3], [4.0, 2.2, 1.6, 1.3])
    ps = list_moldable(c, ((), (0,)), [2.0, 1.0], [1, 1], GROUPS, False, 1.9, None,
                       widen=widen)
    # a chain: while one op runs nothing else is ready, so one thread leaves three cores idle
    assert [p.threads for p in ps] == ([1, 1] if widen == "" else [4, 4])


def test_fill_leaves_the_other_ready_ops_their_allotments():
    c = curves([4.0, 2.2, 1.6, 1.3], [4.0, 2.2, 1.6, 1.3], [1.0, 0.6, 0.5, 0.45])
    ps = list_moldable(c, ((), (), ()), [3.0, 2.0, 1.0], [1, 1, 1], GROUPS, False, 1.9, None,
                       widen="fill")
    threads = {p.nodes[0]: p.threads for p in ps}
    # op 0 takes what ops 1 and 2 leave (two cores); they keep one core each
    assert threads == {0: 2, 1: 1, 2: 1}


def test_moves_halve_make_fastest_and_raise_by_half_within_the_cores():
    c = curves([4.0, 2.2, 1.6, 1.3])
    assert moves(c, 0, 2) == [1, 4, 3]
    assert moves(c, 0, 4) == [2]  # 4 is already the fastest and 6 threads do not exist
    assert moves(c, 0, 1) == [4, 2]  # half of one thread is one thread: not a move


def test_heaviest_keeps_the_ops_holding_a_share_of_the_work_largest_first():
    c = curves([4.0, 2.2, 1.6, 1.3], [1.0, 0.6, 0.5, 0.45], [4.0, 2.2, 1.6, 1.3])
    # core-seconds at allotments [4, 1, 1]: 5.2, 1.0, 4.0 of 10.2
    assert heaviest(c, [4, 1, 1], 0.2) == [0, 2]
    assert heaviest(c, [4, 1, 1], 0.0) == [0, 2, 1]


def test_allotment_moves_let_two_independent_ops_share_the_cores():
    # Two independent ops, each fastest on all 4 cores (1.3 s): one after the other take 2.6 s;
    # halving one lets both run side by side in 2.2 s, which only the moves find among the
    # search's own candidates (every candidate allotment is the fastest one); of the baselines,
    # the uniform grid's two lanes of two cores find it too.
    c = curves([4.0, 2.2, 1.6, 1.3], [4.0, 2.2, 1.6, 1.3])
    preds = ((), ())

    def timed(ps):
        ps = in_order(ps)
        return simulate(ps, preds, 4, 1.9).step_seconds, ps

    def step(allot_moves: int) -> float:
        opts = ScheduleOptions(stretch=1.0, refine_rounds=0, search_rounds=0,
                               allot_moves=allot_moves, grouping=False)
        ps = optimized(c, preds, ["A", "B"], GROUPS, False, 4, opts, timed, baselines=False)
        return simulate(ps, preds, 4, 1.9).step_seconds

    assert step(0) == pytest.approx(2.6)
    assert step(8) == pytest.approx(2.2)
    with_baselines = optimized(c, preds, ["A", "B"], GROUPS, False, 4, ScheduleOptions(
        stretch=1.0, refine_rounds=0, search_rounds=0, allot_moves=0, grouping=False), timed)
    assert simulate(with_baselines, preds, 4, 1.9).step_seconds == pytest.approx(2.2)
    assert {p.threads for p in with_baselines} == {2}


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.floats(0.1, 4.0), st.floats(1.0, 12.0)),
                min_size=4, max_size=14), st.integers(2, 4), st.randoms())
def test_leaving_out_nodes_that_may_not_group_changes_no_schedule(nodes, group_min, rnd):
    # Nodes of three signatures, each with its own curve (alike signatures need not share
    # one here): one thread's time, and a speedup on 4 cores; grouping considered for every
    # node, or only where may_group allows, gives the same list schedule.
    times = tuple(np.array([t / min(k, s) for k in range(1, 5)]) for _, t, s in nodes)
    c = OpCosts(times=times, affinity=(("compact",) * 4,) * len(nodes),
                keys=tuple(f"k{key}" for key, _, _ in nodes), analytical=())
    preds = tuple(tuple(sorted(rnd.sample(range(i), rnd.randint(0, min(i, 1)))))
                  for i in range(len(nodes)))
    prio = [rnd.random() for _ in nodes]
    allot = [rnd.randint(1, 4) for _ in nodes]
    every = list_moldable(c, preds, prio, allot, GROUPS, False, 1.9, group_min,
                          groupable=[True] * len(nodes))
    assert list_moldable(c, preds, prio, allot, GROUPS, False, 1.9, group_min) == every


TWO_CORES = ((0, 1),)


def test_ops_a_second_thread_does_not_speed_up_co_run_as_one_group():
    # Two independent ops, no faster on two threads: without groups each takes a core of its
    # own (two lanes, each hand-off a thread woken); as a co-run group, each 1.3x slower for
    # its company (sigma 0.3), one loop of 1.3 s on both cores of one lane.
    c = curves([1.0, 1.0], [1.0, 1.0])
    apart = list_moldable(c, ((), ()), [2.0, 1.0], [2, 2], TWO_CORES, False, 1.9, None)
    assert [(p.nodes, p.cores) for p in apart] == [((0,), (0,)), ((1,), (1,))]
    ps = list_moldable(c, ((), ()), [2.0, 1.0], [2, 2], TWO_CORES, False, 1.9, None,
                       corun=0.3)
    assert len(ps) == 1 and ps[0].nodes == (0, 1) and ps[0].threads == 2
    assert ps[0].group.startswith("corun") and ps[0].seconds == pytest.approx(1.3)


def test_ops_that_scale_run_one_after_another_on_every_core():
    # Twice as fast on two threads: 1.0 + 1.0 s apart beats 2.0 x 1.3 s side by side.
    c = curves([2.0, 1.0], [2.0, 1.0])
    ps = list_moldable(c, ((), ()), [2.0, 1.0], [2, 2], TWO_CORES, False, 1.9, None,
                       corun=0.3)
    assert [p.nodes for p in ps] == [(0,), (1,)] and not any(p.group for p in ps)


def test_a_co_run_group_takes_only_the_ops_that_shorten_it():
    # The first op (highest priority) is always in; a short op joins (it fits beside it), a
    # long op that scales would stretch the loop past running it apart on both cores.
    c = curves([1.0, 1.0], [0.4, 0.4], [8.0, 4.0])
    ps = list_moldable(c, ((), (), ()), [3.0, 2.0, 1.0], [2, 2, 2], TWO_CORES, False, 1.9,
                       None, corun=0.2)
    assert ps[0].nodes == (0, 1) and ps[0].group and ps[1].nodes == (2,)


def test_loop_seconds_is_the_dynamic_schedule_paced_by_company():
    from planner.schedule.optimized import loop_seconds

    # threads take ops in order as they free up; two running: both at 1 / 1.5 of their pace
    assert loop_seconds([1.0, 1.0, 1.0], 2, 1.0) == pytest.approx(2.0)
    assert loop_seconds([1.0, 3.0], 2, 1.5) == pytest.approx(1.5 + 2.0)
    assert loop_seconds([2.0, 1.0, 1.0], 2, 1.0) == pytest.approx(2.0)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.floats(0.1, 4.0), st.floats(1.0, 2.0)), min_size=2, max_size=12),
       st.floats(0.0, 1.0), st.randoms())
def test_co_run_groups_hold_ready_independent_ops_and_never_lose_to_none(nodes, sigma, rnd):
    # Random DAGs of ops with speedups 1-2x on two cores: every group's members are
    # independent of each other, and the search keeps groups only where they simulate faster.
    times = tuple(np.array([t, t / s]) for t, s in nodes)
    c = OpCosts(times=times, affinity=(("compact",) * 2,) * len(nodes),
                keys=tuple(f"k{i}" for i in range(len(nodes))), analytical=())
    preds = tuple(tuple(sorted(rnd.sample(range(i), rnd.randint(0, min(i, 2)))))
                  for i in range(len(nodes)))
    ps = list_moldable(c, preds, [float(-i) for i in range(len(nodes))], [2] * len(nodes),
                       TWO_CORES, False, 1.9, None, corun=sigma)
    for p in ps:
        if p.group:
            assert not any(a in preds[b] for a in p.nodes for b in p.nodes)

    def timed(ps):
        ps = in_order(ps)
        return simulate(ps, preds, 2, 1.9).step_seconds, ps

    def step(on: bool) -> float:
        opts = ScheduleOptions(corun_groups=on, search_rounds=0)
        ps = optimized(c, preds, ["A"] * len(nodes), TWO_CORES, False, 2, opts, timed,
                       baselines=False, corun_slowdown=sigma)
        return simulate(ps, preds, 2, 1.9).step_seconds

    assert step(True) <= step(False) * (1 + 1e-9)


def test_every_strategy_is_placed_by_its_row_of_the_table():
    """The strategies a ScheduleOptions accepts are the table's rows, and each row places the
    ops as its strategy says: uniform lanes of the asked width, the optimized search no
    slower in the simulator than the uniform and paper schedules it weighs."""
    from planner.costs import CostModel
    from planner.schedule import STRATEGIES, ScheduleOptions, cpu_schedule
    from planner.schedule.cpu import STRATEGY_TABLE
    from planner.target import preset
    from planner.zoo import build

    assert sorted(STRATEGY_TABLE) == sorted(STRATEGIES)
    g = build("mlp", batch=8, hidden=[32, 32], in_features=16, classes=4)
    model = CostModel(preset("xeon-8180"))
    steps = {s: cpu_schedule(g, model, ScheduleOptions(strategy=s, intra=2, inter=1)
                             if s == "uniform" else ScheduleOptions(strategy=s))
             for s in STRATEGY_TABLE}
    assert {o.threads for o in steps["uniform"].ops} == {2}
    assert {s.strategy for s in steps.values()} == set(STRATEGY_TABLE)
    assert steps["optimized"].step_seconds <= steps["paper"].step_seconds * (1 + 1e-9)
