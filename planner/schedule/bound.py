"""The lower bound on any schedule's step time (DESIGN.md), and the critical path.

    bound = max(critical path with every op at its fastest time,
                sum over ops of min_k (k x t(k)) / capacity)

capacity is the number of physical cores, times 2 / SMT_SLOWDOWN (1.05) where the target has
hyper-threads: two ops sharing a core each run 1.9x slower, so a core does at most 1.05 cores'
work, and the bound stays a bound for schedules that use Strategy 4.

Example:
    >>> import numpy as np
    >>> from planner.schedule.costs import OpCosts
    >>> c = OpCosts(times=(np.array([4.0, 2.0]), np.array([2.0, 1.5])),
    ...             affinity=(("compact",) * 2,) * 2, keys=("a", "b"), analytical=())
    >>> lower_bound(c, ((), (0,)), capacity=2.0)
    Bound(critical_path=3.5, area=3.0, seconds=3.5)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from planner.schedule.costs import OpCosts


class Bound(NamedTuple):
    critical_path: float
    area: float
    seconds: float


def capacity(cores: int, smt_width: int, smt_slowdown: float) -> float:
    """Core-equivalents of work the machine can do per second (see the module docstring)."""
    gain = 2.0 / smt_slowdown if smt_width > 1 else 1.0
    return cores * max(1.0, gain)


def bottom_levels(times: Sequence[float], preds: Sequence[Sequence[int]]) -> list[float]:
    """Per node, the longest path from its start to the end of the graph (its time included).

    Nodes are in topological order (every predecessor index is smaller)."""
    level = list(times)
    for i in range(len(preds) - 1, -1, -1):
        for p in preds[i]:
            if level[p] < times[p] + level[i]:
                level[p] = times[p] + level[i]
    return level


def lower_bound(costs: OpCosts, preds: Sequence[Sequence[int]], capacity: float) -> Bound:
    """Critical path at fastest times, area bound, and their max (seconds)."""
    n = len(preds)
    fastest = [costs.fastest(i) for i in range(n)]
    cp = max(bottom_levels(fastest, preds), default=0.0)
    area = sum(costs.min_area(i) for i in range(n)) / capacity
    return Bound(critical_path=cp, area=area, seconds=max(cp, area))
