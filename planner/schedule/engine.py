"""The event loop every strategy shares: time advances from op end to op end, and at each
moment a strategy's policy (`Policy.decide`) starts ops from the ready list on free cores.

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
from collections.abc import Sequence
from functools import lru_cache
from typing import Protocol

from planner.schedule.cores import pick_cores
from planner.schedule.placement import Placement
from planner.target.records import Affinity

_new_tuple = tuple.__new__

# Most remembered core picks per cache-group layout (bounds their memory on huge graphs).
PICK_CACHE = 16384


# pick_cores by (free cores, k, affinity) for one groups, a pure function: a list schedule
# meets the same few free sets over and over (98% of ResNet-1001's picks, half of
# Inception-v3's), and the search's candidates meet each other's (a third more of
# Inception-v3's). One table per groups, found once per Machine.
@lru_cache(maxsize=16)
def _picks(groups: tuple[tuple[int, ...], ...]
           ) -> dict[tuple[int, int, Affinity], tuple[tuple[int, ...], int]]:
    return {}


@lru_cache(maxsize=PICK_CACHE)  # a few core sets recur: lanes, wide ops, picks
def bits(cores: tuple[int, ...]) -> int:
    """The bit mask of these cores (bit c: core c).

    >>> bin(bits((0, 2)))
    '0b101'
    """
    mask = 0
    for c in cores:
        mask |= 1 << c
    return mask


def members(mask: int, cores: int) -> set[int]:
    """The cores of a bit mask, below `cores`."""
    return {c for c in range(cores) if mask >> c & 1}


class Machine:
    """Free cores, free hyper-thread slots and running placements of one list schedule.

    Free cores are bit masks (bit c: core c's first hardware thread, or in `smt_mask` its
    second, is free), not sets: a list schedule starts and ends tens of thousands of ops, and
    an op on many cores cost a set operation per core at each, and a frozen copy of the set
    to look its cores up."""

    def __init__(self, groups: tuple[tuple[int, ...], ...], smt: bool) -> None:
        self.groups = groups
        self.cores = sum(len(g) for g in groups)
        every = (1 << self.cores) - 1
        self.free_mask = every
        # Its bits set (the strategies ask at every op they consider).
        self.free_count = self.cores
        self.smt_mask = every if smt else 0
        # Running placements as (end, start sequence, placement), kept sorted: the strategies
        # read them in end order at nearly every decision, and only a few run.
        self.running: list[tuple[float, int, Placement]] = []
        self._seq = 0
        # Each running placement's cores as a mask, by start sequence.
        self._held: dict[int, int] = {}
        self._picks = _picks(groups)

    @property
    def free(self) -> set[int]:
        """The free cores (first hardware threads)."""
        return members(self.free_mask, self.cores)

    @property
    def smt_free(self) -> set[int]:
        """The cores whose second hardware thread is free."""
        return members(self.smt_mask, self.cores)

    def all_free(self, cores: tuple[int, ...]) -> bool:
        """Whether every one of `cores` is free."""
        mask = bits(cores)
        return self.free_mask & mask == mask

    def smt_slots(self, cores: tuple[int, ...]) -> int:
        """How many of `cores` have their second hardware thread free."""
        return (self.smt_mask & bits(cores)).bit_count()

    def start(self, nodes: tuple[int, ...], k: int, affinity: Affinity, seconds: float,
              now: float, smt: bool = False, cores: tuple[int, ...] | None = None,
              group: str = "", until: float | None = None) -> Placement:
        """Start `nodes` on k free cores (or on the SMT slots of k busy cores when smt).

        `seconds` is the time alone on those cores (the placement's); `until`, when given, is
        the strategy's guess of the end instead of now + seconds (an SMT op, slowed)."""
        if cores is not None:
            chosen, mask = cores, bits(cores)
        else:
            pool = self.smt_mask & ~self.free_mask if smt else self.free_mask
            picked = self._picks.get((pool, k, affinity))
            if picked is None:
                if len(self._picks) >= PICK_CACHE:
                    self._picks.clear()
                chosen = pick_cores(self.groups, members(pool, self.cores), k, affinity)
                picked = self._picks[pool, k, affinity] = (chosen, bits(chosen))
            chosen, mask = picked
        if smt:
            self.smt_mask &= ~mask
        else:
            self.free_mask &= ~mask
            self.free_count = self.free_mask.bit_count()
        # Every field given, so made as _make makes one (the named tuple's own __new__ is a
        # Python function; a plan starts some 20,000 ops).
        p = _new_tuple(Placement, (nodes, chosen, affinity, seconds, now, smt, group))
        bisect.insort(self.running, (now + seconds if until is None else until, self._seq, p))
        self._held[self._seq] = mask
        self._seq += 1
        return p

    def finish_next(self) -> tuple[float, list[Placement]]:
        """Pop every placement ending first; free its cores. Returns (end time, placements)."""
        running = self.running
        end = running[0][0]
        count = 1
        while count < len(running) and running[count][0] <= end:
            count += 1
        done = running[:count]
        del running[:count]
        for _, seq, p in done:
            if p.smt:
                self.smt_mask |= self._held.pop(seq)
            else:
                self.free_mask |= self._held.pop(seq)
        self.free_count = self.free_mask.bit_count()
        return end, [p for _, _, p in done]

    def horizon(self, now: float) -> float:
        """Seconds until the last running op ends (0 when idle)."""
        return max((end for end, _, _ in self.running), default=now) - now

    def wide(self) -> list[Placement]:
        """Running non-SMT placements that hold every core."""
        return [p for _, _, p in self.running if not p.smt and len(p.cores) == self.cores]


class Policy(Protocol):
    """A strategy as the engine sees it: which ready ops start now, on which cores."""

    def decide(self, now: float, ready: list[int], machine: Machine) -> list[Placement]:
        """Start some of `ready` (node indices, ascending) on `machine`; the placements."""
        ...


@lru_cache(maxsize=4)
def _dependents(preds: Sequence[Sequence[int]]
                ) -> tuple[tuple[int, ...], tuple[tuple[int, ...], ...], tuple[int, ...]]:
    """Per node, how many distinct nodes it waits for and which wait for it; and the nodes
    that wait for none, ascending."""
    succ: list[list[int]] = [[] for _ in preds]
    for i, ps in enumerate(preds):
        for p in set(ps):
            succ[p].append(i)
    waiting = tuple(len(set(p)) for p in preds)
    return (waiting, tuple(map(tuple, succ)),
            tuple(i for i in range(len(preds)) if waiting[i] == 0))


def list_schedule(preds: Sequence[Sequence[int]], machine: Machine,
                  policy: Policy) -> list[Placement]:
    """Ask `policy.decide` at time 0 and after every op end until every node is placed.

    `decide` gets the ready node indices ascending and must start at least one op when the
    machine is idle; ValueError otherwise (a strategy bug, named).
    """
    n = len(preds)
    decide = policy.decide
    # The search list-schedules one graph's dependencies ten times or more: their counts and
    # successors are found once (preds of tuples, the schedulers' own, are hashable).
    try:
        counts, succ, first = _dependents(preds)
    except TypeError:  # lists among them: not hashable, found for this call alone
        counts, succ, first = _dependents.__wrapped__(preds)
    waiting = list(counts)
    ready = list(first)
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
