"""The optimized strategy's parts: relaxation-guided allotments and widening into idle cores."""

from __future__ import annotations

import numpy as np
import pytest

from planner.schedule.costs import OpCosts
from planner.schedule.optimized import WIDEN, list_moldable, relaxed_allotment

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
