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
    return list_schedule(preds, Machine(groups, smt=smt), Strategies(costs, op_types, options))


class Strategies:
    """paper's policy: at each decision the engine asks for, `fit` starts ready ops on the idle
    cores (Strategy 3), `heaviest` picks the op that runs when none fits, and `hyperthreads`
    fills a wide op's second hardware threads (Strategy 4)."""

    def __init__(self, costs: OpCosts, op_types: Sequence[str], options: ScheduleOptions) -> None:
        n = len(costs.times)
        self.n, self.options, self.affinity = n, options, costs.affinity
        self.k2 = k2 = (type_threads(costs, op_types) if options.per_type_threads
                        else [costs.best_threads(i) for i in range(n)])
        self.times = times = costs.time_lists
        # Per node, its candidates and their least threads and least time (most ops fit
        # nowhere, and these let the scan skip them without looking at every candidate); per
        # curve and Strategy 2 count, as alike nodes share both.
        made: dict[tuple[int, int], tuple[list[int], int, float]] = {}
        self.cands, self.low_k, self.low_t = [], [], []
        for i in range(n):
            key = (id(costs.times[i]), k2[i])
            if key not in made:
                c = candidate_threads(costs, i, k2[i], options.candidates,
                                      options.max_thread_change)
                made[key] = c, min(c), min(times[i][k - 1] for k in c)
            c, least_k, least_t = made[key]
            self.cands.append(c)
            self.low_k.append(least_k)
            self.low_t.append(least_t)
        serial = [t[0] for t in times]
        at_k2 = [times[i][k2[i] - 1] for i in range(n)]
        # Ranks of the two orders decide sorts ready ops by (precomputed: the queue can be
        # long).
        self.cost_rank = _ranks(sorted(range(n), key=lambda j: (-at_k2[j], j)))
        self.serial_rank = _ranks(sorted(range(n), key=lambda j: (serial[j], j)))
        # The same as arrays: the ready queue is often long (hundreds of ResNet-1001's weight
        # updates wait), so each scan first keeps, in numpy, the ops that could fit at all.
        self.low_k_of = np.array(self.low_k)
        self.low_t_of = np.array(self.low_t, dtype=np.float64)
        self.cost_rank_of = np.array(self.cost_rank)

    def decide(self, now: float, ready: list[int], machine: Machine) -> list[Placement]:
        """The placements started now (the engine's question)."""
        options, k2 = self.options, self.k2
        started: list[Placement] = []
        queue = list(ready)
        # A short queue (most decisions see a few ops) is scanned in Python: numpy's calls
        # cost more than they save there.
        at = (np.fromiter(queue, dtype=np.intp, count=len(queue)) if len(queue) > LONG_QUEUE
              else None)
        taken: set[int] = set()
        by_cost: np.ndarray | None = None
        progress = True
        while len(taken) < len(queue) and machine.free_mask and progress:
            progress = False
            if options.corun and machine.running:
                progress = self.fit(now, queue, at, taken, machine, started)
            if progress or len(taken) == len(queue):
                continue
            # Nothing fits: the most expensive ready op runs with Strategy 2's count.
            i, by_cost = self.heaviest(queue, at, taken, by_cost)
            idle = not machine.running
            if (idle or options.corun) and k2[i] <= machine.free_count or idle:
                k = min(k2[i], machine.free_count)
                started.append(self.start(machine, i, k, now))
                taken.add(i)
                progress = options.corun
        if options.hyperthreads and machine.smt_mask and len(taken) < len(queue):
            self.hyperthreads(now, queue, taken, machine, started)
        return started

    def start(self, machine: Machine, i: int, k: int, now: float, smt: bool = False,
              until: float | None = None) -> Placement:
        return machine.start((i,), k, self.affinity[i][k - 1], self.times[i][k - 1], now,
                             smt=smt, until=until)

    def fit(self, now: float, queue: list[int], at: np.ndarray | None, taken: set[int],
            machine: Machine, started: list[Placement]) -> bool:
        """Strategy 3: each untaken op (queue order) starts on its fewest candidate threads
        that fit the free cores and end before the running ops; whether any started."""
        low_k, low_t, cands, times = self.low_k, self.low_t, self.cands, self.times
        horizon = machine.horizon(now)
        free = machine.free_count
        # Free cores only shrink during the scan: an op that fails this test at its start
        # fails it at its turn too.
        could = (at[(self.low_k_of[at] <= free) & (self.low_t_of[at] <= horizon)].tolist()
                 if at is not None else
                 [i for i in queue if low_k[i] <= free and low_t[i] <= horizon])
        progress = False
        for i in could:
            if i in taken or low_k[i] > free or low_t[i] > horizon:
                continue
            fit = [k for k in cands[i] if k <= free and times[i][k - 1] <= horizon]
            if fit:
                started.append(self.start(machine, i, fit[0], now))
                taken.add(i)
                free = machine.free_count
                progress = True
        return progress

    def heaviest(self, queue: list[int], at: np.ndarray | None, taken: set[int],
                 by_cost: np.ndarray | None) -> tuple[int, np.ndarray | None]:
        """The untaken op of the least cost rank (ranks are distinct); a long queue's ranks
        as an array (`by_cost`, made at the first call, taken ops masked), returned for the
        next call."""
        if at is None:
            return min((j for j in queue if j not in taken), key=self.cost_rank.__getitem__), None
        if by_cost is None:
            by_cost = self.cost_rank_of[at]
        while True:
            first = int(by_cost.argmin())
            i = queue[first]
            if i not in taken:
                return i, by_cost
            by_cost[first] = self.n

    def hyperthreads(self, now: float, queue: list[int], taken: set[int], machine: Machine,
                     started: list[Placement]) -> None:
        """Strategy 4: while an op holds every core, the untaken ops of shortest serial time
        run on its free second hardware threads if they end before it (slowed by SMT)."""
        f, k2, times = self.options.smt_slowdown, self.k2, self.times
        wide = machine.wide()
        by_serial = sorted(queue, key=self.serial_rank.__getitem__) if wide else []
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
                    started.append(self.start(machine, i, k, now, smt=True, until=now + f * t))
                    taken.add(i)
                    slots = machine.smt_slots(w.cores)


def _ranks(order: list[int]) -> list[int]:
    rank = [0] * len(order)
    for r, i in enumerate(order):
        rank[i] = r
    return rank
