"""Discrete-event run of placements against the cost model: when each op really starts and ends.

Executor semantics (DESIGN.md): an op starts as soon as its dependencies have ended and the
previous op (in execution order) on each of its logical CPUs has ended. While it runs it makes
progress at rate 1 / slowdown, where

    slowdown = 1 + (SMT_SLOWDOWN - 1) x (fraction of its cores that another running op also uses)

so two ops sharing every core through hyper-threads each run SMT_SLOWDOWN (1.9, seed 002
Table III) times slower, and an op alone on its cores runs at its cost-model time.

    cores 0-3  |== conv (4 thr) ====|      rate 1, then 1/1.9 on the shared cores' share
    ht    0-1        |= relu =|            rate 1/1.9
               0     t1       t2

Reports: per placement start and end, step time, per-core busy fraction, and seed 002 Fig. 4's
statistic: ops running just after each start or finish event, averaged over events.

Example:
    >>> from planner.schedule.placement import Placement
    >>> ps = [Placement((0,), (0, 1), "compact", 2.0, 0.0),
    ...       Placement((1,), (0, 1), "compact", 1.0, 0.0, smt=True)]
    >>> r = simulate(ps, ((), ()), cores=2, smt_slowdown=2.0)
    >>> r.ends, r.step_seconds
    ((3.0, 2.0), 3.0)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from planner.schedule.placement import Placement

# Work left below this many seconds counts as done (float noise of rate x time).
EPSILON = 1e-15


@dataclass(frozen=True)
class SimResult:
    """Times per placement (same order as given), step time, utilisation and co-running."""

    starts: tuple[float, ...]
    ends: tuple[float, ...]
    step_seconds: float
    core_busy: tuple[float, ...]
    utilization: float
    mean_corun: float
    events: int


def simulate(placements: Sequence[Placement], preds: Sequence[Sequence[int]], cores: int,
             smt_slowdown: float) -> SimResult:
    """Run placements (in execution order) with node dependencies `preds` (by node index).

    Raises ValueError when the placements cannot all run (a node placed twice or never, or an
    order that waits on itself).
    """
    n = len(placements)
    where = {}
    for i, p in enumerate(placements):
        for v in p.nodes:
            if v in where:
                raise ValueError(f"node {v} placed twice")
            where[v] = i
    if len(where) != len(preds):
        missing = sorted(set(range(len(preds))) - set(where))
        raise ValueError(f"nodes {missing[:5]} are not placed")
    waits: list[set[int]] = [set() for _ in range(n)]
    last_on: dict[tuple[int, bool], int] = {}
    for i, p in enumerate(placements):
        for v in p.nodes:
            waits[i].update(where[u] for u in preds[v])
        for c in p.cores:
            slot = (c, p.smt)
            if slot in last_on:
                waits[i].add(last_on[slot])
            last_on[slot] = i
        waits[i].discard(i)
    blocked = [len(w) for w in waits]
    unblocks: list[list[int]] = [[] for _ in range(n)]
    for i, w in enumerate(waits):
        for j in w:
            unblocks[j].append(i)

    starts = [0.0] * n
    ends = [0.0] * n
    left = [p.seconds for p in placements]
    rate = [1.0] * n
    running: set[int] = set()
    on_core: list[set[int]] = [set() for _ in range(cores)]
    busy = [0.0] * cores
    counts: list[int] = []
    now = 0.0
    done = 0

    def rerate(i: int) -> None:
        shared = sum(1 for c in placements[i].cores if len(on_core[c]) > 1)
        rate[i] = 1.0 / (1.0 + (smt_slowdown - 1.0) * shared / len(placements[i].cores))

    def touch(i: int) -> None:
        near = {j for c in placements[i].cores for j in on_core[c]}
        for j in near:
            rerate(j)

    def start(i: int) -> None:
        starts[i] = now
        running.add(i)
        for c in placements[i].cores:
            on_core[c].add(i)
        touch(i)
        counts.append(len(running))

    ready = [i for i in range(n) if blocked[i] == 0]
    for i in ready:
        start(i)
    while running:
        step = min(left[i] / rate[i] for i in running)
        for c in range(cores):
            if on_core[c]:
                busy[c] += step
        now += step
        finished = sorted(i for i in running if left[i] - rate[i] * step <= EPSILON
                          or left[i] / rate[i] <= step)
        for i in running:
            left[i] = max(left[i] - rate[i] * step, 0.0)
        newly: list[int] = []
        for i in finished:
            running.discard(i)
            ends[i] = now
            done += 1
            for c in placements[i].cores:
                on_core[c].discard(i)
            touch(i)
            counts.append(len(running))
            for j in unblocks[i]:
                blocked[j] -= 1
                if blocked[j] == 0:
                    newly.append(j)
        for j in sorted(newly):
            start(j)
    if done != n:
        stuck = [i for i in range(n) if blocked[i] > 0]
        raise ValueError(f"execution order deadlocks: placements {stuck[:5]} never start")
    step_seconds = max(ends, default=0.0)
    core_busy = tuple(b / step_seconds if step_seconds else 0.0 for b in busy)
    return SimResult(starts=tuple(starts), ends=tuple(ends), step_seconds=step_seconds,
                     core_busy=core_busy,
                     utilization=sum(core_busy) / cores if cores else 0.0,
                     mean_corun=sum(counts) / len(counts) if counts else 0.0,
                     events=len(counts))
