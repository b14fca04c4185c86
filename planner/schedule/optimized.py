"""The default strategy: list scheduling of moldable ops by bottom level, with allotment choice,
backfilling, optional grouping and hyper-thread co-running, and a bounded search over its knobs.

One list schedule (`list_moldable`):

    priority   bottom level: the longest path from the op to the step's end, ops at their
               fastest times (critical ops first)
    allotment  a[i] = fewest threads whose time is within `stretch` x the op's fastest; ops on
               the critical path (no slack) get their fastest count
    decision   the first ready op by priority starts now on the best count <= min(a[i], free
               cores), unless waiting for cores that running ops release would finish it
               sooner; then it reserves that moment and later ops may only backfill cores
               they give back before it
    grouping   >= group_min ready ops of one signature run as one parallel loop, one op per
               thread (seed 003's 26 embedding lookups)
    smt        ready ops that fit on a wide op's second hardware threads and end before it

The search (`optimized`) runs the list schedule for every stretch in STRETCHES, with and
without SMT, refines the best by widening the ops its critical path runs through
(`refine_rounds`), and keeps the best simulated plan; the uniform baseline is one of the
candidates, so the result never loses to it.

Example:
    >>> allotment(__import__("numpy").array([4.0, 2.0, 1.9, 1.8]), 1.2)
    2
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from planner.schedule.costs import OpCosts
from planner.schedule.engine import Machine, list_schedule
from planner.schedule.placement import Placement


def allotment(times: np.ndarray, stretch: float) -> int:
    """Fewest threads whose time is within `stretch` x the fastest."""
    return int(np.argmax(times <= times.min() * stretch)) + 1


def best_upto(times: np.ndarray, limit: int) -> int:
    """Fewest threads reaching the shortest time with at most `limit` threads."""
    return int(np.argmin(times[:limit])) + 1


def list_moldable(costs: OpCosts, preds: Sequence[Sequence[int]], priority: Sequence[float],
                  allot: Sequence[int], groups: tuple[tuple[int, ...], ...], smt: bool,
                  smt_slowdown: float, group_min: int | None) -> list[Placement]:
    """One list schedule (see the module docstring). `group_min` None: no grouping."""
    times = costs.times

    def loop_time(members: list[int], k: int) -> float:
        # One parallel loop over independent ops, one op per thread at a time.
        return math.ceil(len(members) / k) * costs.time(members[0], 1)

    def decide(now: float, ready: list[int], machine: Machine) -> list[Placement]:
        started: list[Placement] = []
        queue = sorted(ready, key=lambda i: (-priority[i], i))
        if group_min is not None:
            by_key: dict[str, list[int]] = {}
            for i in queue:
                by_key.setdefault(costs.keys[i], []).append(i)
            for members in by_key.values():
                free = len(machine.free)
                if len(members) >= group_min and free >= 1:
                    k = min(len(members), free)
                    grouped = loop_time(members, k)
                    alone = sum(costs.fastest(i) for i in members)
                    if grouped < alone:
                        started.append(machine.start(tuple(sorted(members)), k, "compact",
                                                     grouped, now,
                                                     group=f"group{now:.9e}/{members[0]}"))
                        taken = set(members)
                        queue = [i for i in queue if i not in taken]
        reserved: float | None = None
        for i in list(queue):
            free = len(machine.free)
            if free == 0:
                break
            t = times[i]
            k = best_upto(t, min(allot[i], free))
            finish = now + t[k - 1]
            if reserved is not None:
                if finish <= reserved:
                    started.append(machine.start((i,), k, costs.affinity[i][k - 1], t[k - 1],
                                                 now))
                    queue.remove(i)
                continue
            wait_best, wait_at = finish, None
            for at, free_then in machine.releases(now):
                kw = best_upto(t, min(allot[i], free_then))
                if at + t[kw - 1] < wait_best * (1 - 1e-9):
                    wait_best, wait_at = at + t[kw - 1], at
                if free_then >= allot[i]:
                    break
            if wait_at is None or not machine.running:
                started.append(machine.start((i,), k, costs.affinity[i][k - 1], t[k - 1], now))
                queue.remove(i)
            else:
                reserved = wait_at
        if smt and machine.smt_free and queue:
            for w in machine.wide():
                left = w.end - now
                for i in sorted(queue, key=lambda j: (costs.time(j, 1), j)):
                    slots = len(machine.smt_free & set(w.cores))
                    if slots == 0:
                        break
                    k = best_upto(times[i], slots)
                    if smt_slowdown * costs.time(i, k) <= left:
                        started.append(machine.start((i,), k, costs.affinity[i][k - 1],
                                                     smt_slowdown * costs.time(i, k), now,
                                                     smt=True))
                        queue.remove(i)
        return started

    return list_schedule(preds, Machine(groups, smt=smt), decide)


def allot_all(costs: OpCosts, stretch: float, critical: Sequence[bool]) -> list[int]:
    """Per node: its fastest count when critical, else the stretch allotment."""
    return [costs.best_threads(i) if critical[i] else allotment(costs.times[i], stretch)
            for i in range(len(costs.times))]
