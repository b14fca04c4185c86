"""Seed 002's runtime scheduling (Section III-D), Strategies 1-4 as written, made static.

    Strategy 1  each op instance's best thread count from the cost model
    Strategy 2  one count per op type: the best count of its most expensive instance
    Strategy 3  whenever cores idle, each ready op (queue order) tries its `candidates` fastest
                thread counts (a count further than `max_thread_change` from Strategy 2's is
                replaced by Strategy 2's); the fewest threads that fit in the idle cores and do
                not outlast the running ops win. If none fits, the most expensive ready op runs
                with Strategy 2's count (when it fits; on an idle machine, always).
    Strategy 4  while an op holds every core, the ready ops with the shortest serial time run on
                the cores' second hardware threads, if they end before that op (slowed by SMT)

Example:
    >>> import numpy as np
    >>> from planner.schedule.costs import OpCosts
    >>> c = OpCosts(times=(np.array([4.0, 2.0, 1.5]), np.array([3.0, 1.0, 2.0])),
    ...             affinity=(("compact",) * 3,) * 2, keys=("A(x)", "A(y)"), analytical=())
    >>> type_threads(c, ["A", "A"])
    [3, 3]
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from planner.schedule.costs import OpCosts
from planner.schedule.engine import Machine, list_schedule
from planner.schedule.options import ScheduleOptions
from planner.schedule.placement import Placement

# Ready queues longer than this are scanned with numpy (ResNet-1001's hundreds of waiting
# weight updates); shorter ones in Python.
LONG_QUEUE = 32


def type_threads(costs: OpCosts, op_types: Sequence[str]) -> list[int]:
    """Strategy 2: per node, the best thread count of its type's most expensive instance."""
    heaviest: dict[str, int] = {}
    for i, t in enumerate(op_types):
        j = heaviest.get(t)
        if j is None or costs.fastest(i) > costs.fastest(j):
            heaviest[t] = i
    best = {t: costs.best_threads(j) for t, j in heaviest.items()}
    return [best[t] for t in op_types]


def candidate_threads(costs: OpCosts, i: int, k2: int, count: int, max_change: int) -> list[int]:
    """Strategy 3's candidates of node i: its `count` fastest counts, each within max_change
    of k2 or replaced by k2; ascending."""
    order = np.argsort(costs.times[i], kind="stable")[:count] + 1
    return sorted({int(k) if abs(int(k) - k2) <= max_change else k2 for k in order})


def paper(costs: OpCosts, preds: Sequence[Sequence[int]], op_types: Sequence[str],
          groups: tuple[tuple[int, ...], ...], smt: bool,
          options: ScheduleOptions) -> list[Placement]:
    """Placements of Strategies 1-4 (see the module docstring)."""
    n = len(preds)
    k2 = (type_threads(costs, op_types) if options.per_type_threads
          else [costs.best_threads(i) for i in range(n)])
    times = costs.time_lists
    # Per node, its candidates and their least threads and least time (most ops fit nowhere,
    # and these let the scan skip them without looking at every candidate); per curve and
    # Strategy 2 count, as alike nodes share both.
    made: dict[tuple[int, int], tuple[list[int], int, float]] = {}
    cands, low_k, low_t = [], [], []
    for i in range(n):
        key = (id(costs.times[i]), k2[i])
        if key not in made:
            c = candidate_threads(costs, i, k2[i], options.candidates, options.max_thread_change)
            made[key] = c, min(c), min(times[i][k - 1] for k in c)
        c, least_k, least_t = made[key]
        cands.append(c)
        low_k.append(least_k)
        low_t.append(least_t)
    serial = [t[0] for t in times]
    at_k2 = [times[i][k2[i] - 1] for i in range(n)]
    f = options.smt_slowdown

    def affinity(i: int, k: int) -> str:
        return costs.affinity[i][k - 1]

    # Ranks of the two orders decide sorts ready ops by (precomputed: the queue can be long).
    cost_rank = _ranks(sorted(range(n), key=lambda j: (-at_k2[j], j)))
    serial_rank = _ranks(sorted(range(n), key=lambda j: (serial[j], j)))
    # The same as arrays: the ready queue is often long (hundreds of ResNet-1001's weight
    # updates wait), so each scan first keeps, in numpy, the ops that could fit at all.
    low_k_of, low_t_of = np.array(low_k), np.array(low_t, dtype=np.float64)
    cost_rank_of = np.array(cost_rank)

    def decide(now: float, ready: list[int], machine: Machine) -> list[Placement]:
        started: list[Placement] = []
        queue = list(ready)
        # A short queue (most decisions see a few ops) is scanned in Python: numpy's calls
        # cost more than they save there.
        long = len(queue) > LONG_QUEUE
        at = np.fromiter(queue, dtype=np.intp, count=len(queue)) if long else None
        taken: set[int] = set()
        by_cost: np.ndarray | None = None
        progress = True
        while len(taken) < len(queue) and machine.free_mask and progress:
            progress = False
            if options.corun and machine.running:
                horizon = machine.horizon(now)
                free = machine.free_count
                # Free cores only shrink during the scan: an op that fails this test at its
                # start fails it at its turn too.
                could = (at[(low_k_of[at] <= free) & (low_t_of[at] <= horizon)].tolist()
                         if at is not None else
                         [i for i in queue if low_k[i] <= free and low_t[i] <= horizon])
                for i in could:
                    if i in taken or low_k[i] > free or low_t[i] > horizon:
                        continue
                    fit = [k for k in cands[i] if k <= free and times[i][k - 1] <= horizon]
                    if fit:
                        k = fit[0]
                        started.append(machine.start((i,), k, affinity(i, k),
                                                     times[i][k - 1], now))
                        taken.add(i)
                        free = machine.free_count
                        progress = True
            if progress or len(taken) == len(queue):
                continue
            # Nothing fits: the most expensive ready op runs with Strategy 2's count.
            # The untaken op of the least cost rank (ranks are distinct), taken ones masked.
            if at is None:
                i = min((j for j in queue if j not in taken), key=cost_rank.__getitem__)
            else:
                if by_cost is None:
                    by_cost = cost_rank_of[at]
                while True:
                    first = int(by_cost.argmin())
                    i = queue[first]
                    if i not in taken:
                        break
                    by_cost[first] = n
            idle = not machine.running
            if (idle or options.corun) and k2[i] <= machine.free_count or idle:
                k = min(k2[i], machine.free_count)
                started.append(machine.start((i,), k, affinity(i, k), times[i][k - 1], now))
                taken.add(i)
                progress = options.corun
        wide = machine.wide() if options.hyperthreads and machine.smt_mask else []
        if wide and len(taken) < len(queue):
            by_serial = sorted(queue, key=serial_rank.__getitem__)
            for w in wide:
                left = w.end - now
                # Its free sibling slots, counted again only when an op takes some.
                slots = machine.smt_slots(w.cores)
                for i in by_serial:
                    if i in taken:
                        continue
                    k = min(k2[i], slots)
                    if k >= 1 and f * times[i][k - 1] <= left:
                        t = times[i][k - 1]
                        started.append(machine.start((i,), k, affinity(i, k), t, now,
                                                     smt=True, until=now + f * t))
                        taken.add(i)
                        slots = machine.smt_slots(w.cores)
        return started

    return list_schedule(preds, Machine(groups, smt=smt), decide)


def _ranks(order: list[int]) -> list[int]:
    rank = [0] * len(order)
    for r, i in enumerate(order):
        rank[i] = r
    return rank
