"""The event loop every strategy shares: time advances from op end to op end, and at each
moment a strategy's `decide` starts ops from the ready list on free cores.

    now ──► decide(now, ready, machine) starts some ops ──► jump to the next op end ──► ...

The machine tracks which physical cores are free, which cores' second hardware thread is free
(for Strategy 4's hyper-thread co-running) and which placements run until when. A strategy's
timing here is its own guess; the simulator gives the plan's times.

Example:
    >>> m = Machine(groups=((0, 1),), smt=False)
    >>> p = m.start((0,), 2, "compact", seconds=1.0, now=0.0)
    >>> sorted(m.free), p.cores
    ([], (0, 1))
    >>> end, done = m.finish_next()
    >>> end, done == [p], sorted(m.free)
    (1.0, True, [0, 1])
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from functools import lru_cache, partial

from planner.schedule.cores import pick_cores
from planner.schedule.placement import Placement
from planner.target.records import Affinity

# Most remembered core picks (bounds their memory on huge graphs).
PICK_CACHE = 16384


# pick_cores by (free cores, k, affinity) for one groups, a pure function: a list schedule
# meets the same few free sets over and over (98% of ResNet-1001's picks, half of
# Inception-v3's), and the search's candidates meet each other's (a third more of
# Inception-v3's). One cache per groups, found once per Machine: hashing the groups tuple at
# every pick cost as much as the rest of the look-up.
@lru_cache(maxsize=16)
def _picker(groups: tuple[tuple[int, ...], ...]
            ) -> Callable[[frozenset[int], int, Affinity], tuple[int, ...]]:
    return lru_cache(maxsize=PICK_CACHE)(partial(pick_cores, groups))


class Machine:
    """Free cores, free hyper-thread slots and running placements of one list schedule."""

    def __init__(self, groups: tuple[tuple[int, ...], ...], smt: bool) -> None:
        self.groups = groups
        self.cores = sum(len(g) for g in groups)
        self.free: set[int] = set(range(self.cores))
        self.smt_free: set[int] = set(range(self.cores)) if smt else set()
        # Running placements as (end, start sequence, placement), kept sorted: the strategies
        # read them in end order at nearly every decision (`releases`), and only a few run.
        self.running: list[tuple[float, int, Placement]] = []
        self._seq = 0
        self._picked = _picker(groups)

    def start(self, nodes: tuple[int, ...], k: int, affinity: Affinity, seconds: float,
              now: float, smt: bool = False, cores: tuple[int, ...] | None = None,
              group: str = "", until: float | None = None) -> Placement:
        """Start `nodes` on k free cores (or on the SMT slots of k busy cores when smt).

        `seconds` is the time alone on those cores (the placement's); `until`, when given, is
        the strategy's guess of the end instead of now + seconds (an SMT op, slowed)."""
        if cores is not None:
            chosen = cores
        elif smt:
            chosen = self._picked(frozenset(self.smt_free - self.free), k, affinity)
        else:
            chosen = self._picked(frozenset(self.free), k, affinity)
        (self.smt_free if smt else self.free).difference_update(chosen)
        p = Placement(nodes, chosen, affinity, seconds, now, smt, group)
        bisect.insort(self.running, (now + seconds if until is None else until, self._seq, p))
        self._seq += 1
        return p

    def finish_next(self) -> tuple[float, list[Placement]]:
        """Pop every placement ending first; free its cores. Returns (end time, placements)."""
        end = self.running[0][0]
        count = 1
        while count < len(self.running) and self.running[count][0] <= end:
            count += 1
        done = [p for _, _, p in self.running[:count]]
        del self.running[:count]
        for p in done:
            (self.smt_free if p.smt else self.free).update(p.cores)
        return end, done

    def horizon(self, now: float) -> float:
        """Seconds until the last running op ends (0 when idle)."""
        return max((end for end, _, _ in self.running), default=now) - now

    def wide(self) -> list[Placement]:
        """Running non-SMT placements that hold every core."""
        return [p for _, _, p in self.running if not p.smt and p.threads == self.cores]


Decide = Callable[[float, list[int], Machine], list[Placement]]


def list_schedule(preds: Sequence[Sequence[int]], machine: Machine,
                  decide: Decide) -> list[Placement]:
    """Run `decide` at time 0 and after every op end until every node is placed.

    `decide` gets the ready node indices ascending and must start at least one op when the
    machine is idle; ValueError otherwise (a strategy bug, named).
    """
    n = len(preds)
    waiting = [len(set(p)) for p in preds]
    succ: list[list[int]] = [[] for _ in range(n)]
    for i, ps in enumerate(preds):
        for p in set(ps):
            succ[p].append(i)
    ready = sorted(i for i in range(n) if waiting[i] == 0)
    placed: list[Placement] = []
    now = 0.0
    finished = 0
    while finished < n:
        if ready:
            started = decide(now, ready, machine)
            if started:
                # `ready` stays sorted; deleting the few started nodes by bisection beats
                # rebuilding it when thousands wait (ResNet-1001's weight updates).
                for p in started:
                    for v in p.nodes:
                        at = bisect.bisect_left(ready, v)
                        if at < len(ready) and ready[at] == v:
                            del ready[at]
                placed.extend(started)
        if not machine.running:
            raise ValueError(f"strategy started nothing on an idle machine with ready ops "
                             f"{ready[:5]}")
        now, done = machine.finish_next()
        new = []
        for p in done:
            for v in p.nodes:
                finished += 1
                for s in succ[v]:
                    waiting[s] -= 1
                    if waiting[s] == 0:
                        new.append(s)
        # A few new nodes into a long sorted list: inserted, not sorted again.
        for v in new:
            bisect.insort(ready, v)
    return placed
