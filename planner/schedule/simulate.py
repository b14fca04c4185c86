"""Discrete-event run of placements against the cost model: when each op really starts and ends.

Executor semantics (DESIGN.md): an op starts as soon as its dependencies have ended and the
previous op (in execution order) on each of its hardware-thread slots has ended (a core has two
slots: the first hardware thread, and the sibling that `smt` placements use).

SMT interference, per thread. An op's OpenMP team splits its work statically: each of its
threads has `seconds` of work (the op's time alone on its cores). A thread whose core's other
slot is busy with another running op progresses at 1 / SMT_SLOWDOWN (1.9, seed 002 Table III)
of its pace alone; otherwise at full pace. The op ends when its slowest thread ends, because the
team joins at a barrier. So

  - a small op on the hyper-thread siblings of a wide op runs 1.9x slower while they overlap;
  - the wide op is slowed only on the shared cores and only while they overlap, but its end moves
    by the lag of its most delayed thread, (1 - 1 / 1.9) x (time that thread was shared): sharing
    one core for d seconds costs the wide op as much time as sharing all of them for d (its other
    threads wait at the barrier), while small ops sharing different cores at different times
    delay it by the worst one, not by their sum;
  - two all-core ops on sibling threads (Table III's second row) both run 1.9x slower until the
    shorter ends, then the longer at full pace: t_a + 0.9 t_b, between serial (t_a + t_b) and a
    split of the cores (Table III's third row) for the seed's two convolutions.

A physical core thus does at most 2 / 1.9 = 1.05 cores' worth of thread work per second: the
area lower bound's capacity (bound.py).

    cores 0-3  |== conv (4 threads) ========|..|      threads 0-1 fall behind while shared
    ht    0-1        |= relu (2) =|                   1.9x slower
               0     t1           t2        t3  conv ends at t3 = t_conv + 0.47 (t2 - t1)

Hand-offs. An op whose wait ends on another lane (another executor thread: the lane of its
first core's hardware thread, planner.schedule.record.lane_numbers) starts `handoff` seconds
after that op ends: the waiting lane's thread sleeps and has to be woken (a futex wake, 20-50 us
on a virtual machine, measured per host: codegen.profiling.step_contention). An op let go by
its own lane's previous op starts at once. handoff = 0 gives the same floats as without.

    lane 0  |== a ==|              a -> b hands over, a -> c does not
    lane 1           ....|== b ==|
    lane 0          |== c ==|       b starts `handoff` after a ends, c at once

Reports: per placement start and end, step time, per-core busy fraction, and seed 002 Fig. 4's
statistic: ops running just after each start or finish event, averaged over events.

Example:
    >>> from planner.schedule.placement import Placement
    >>> ps = [Placement((0,), (0, 1), "compact", 2.0, 0.0),
    ...       Placement((1,), (0,), "compact", 1.0, 0.0, smt=True)]
    >>> r = simulate(ps, ((), ()), cores=2, smt_slowdown=2.0)
    >>> r.ends, r.step_seconds
    ((3.0, 2.0), 3.0)
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import compress

import numpy as np

from planner.schedule.bound import bottom_levels
from planner.schedule.placement import Placement

# Ends closer than this (relative) to the earliest one finish in the same event (float noise).
EPSILON = 1e-12


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


def execution_waits(placements: Sequence[Placement], preds: Sequence[Sequence[int]],
                    cores: int | None = None) -> list[set[int]]:
    """Per placement, the placements it waits for: its nodes' producers and the previous
    placement on each of its (core, slot) pairs. ValueError for a node placed twice or never.
    `cores`: how many cores the machine has (None: as many as the placements use)."""
    where: dict[int, int] = {}
    for i, p in enumerate(placements):
        for v in p.nodes:
            if v in where:
                raise ValueError(f"node {v} placed twice")
            where[v] = i
    if len(where) != len(preds):
        missing = sorted(set(range(len(preds))) - set(where))
        raise ValueError(f"nodes {missing[:5]} are not placed")
    waits: list[set[int]] = []
    # The last placement on each core's first (last_on[0]) and second hardware thread, -1
    # before any: indexed by core, read and written by map() (an all-core op touches every
    # core, at every placement of the search's candidates).
    if cores is None:
        cores = 1 + max((max(p.cores) for p in placements if p.cores), default=-1)
    last_on = ([-1] * cores, [-1] * cores)
    producer = where.__getitem__
    for i, p in enumerate(placements):
        nodes = p.nodes
        w = (set(map(producer, preds[nodes[0]])) if len(nodes) == 1 else
             {where[u] for v in nodes for u in preds[v]})
        slots = last_on[1 if p.smt else 0]
        w.update(map(slots.__getitem__, p.cores))
        for c in p.cores:
            slots[c] = i
        w.discard(i)
        w.discard(-1)
        waits.append(w)
    return waits


def unblocking(placements: Sequence[Placement], preds: Sequence[Sequence[int]],
               cores: int | None = None) -> tuple[list[int], list[list[int]]]:
    """What every event loop starts from: per placement, how many placements it waits for,
    and which placements each one's end lets go (execution_waits, inverted)."""
    waits = execution_waits(placements, preds, cores)
    unblocks: list[list[int]] = [[] for _ in range(len(placements))]
    for i, w in enumerate(waits):  # each list ascending, whatever order w is read in
        for j in w:
            unblocks[j].append(i)
    return [len(w) for w in waits], unblocks


def step_floor(placements: Sequence[Placement], preds: Sequence[Sequence[int]]) -> float:
    """A lower bound on the step of these placements, without running them: the busiest
    hardware-thread slot's seconds (its ops run one after another) and the longest chain of
    dependencies through ops placed alone (a placement of several nodes counts 0 there: a
    path may pass two of its nodes). No simulator runs an op faster than alone; less the
    event loops' merging of near-equal ends (`sure_floor`), every one's step is at least this.

    >>> from planner.schedule.placement import Placement
    >>> ps = [Placement((0,), (0,), "compact", 2.0, 0.0),
    ...       Placement((1,), (1,), "compact", 1.0, 0.0),
    ...       Placement((2,), (0, 1), "compact", 0.5, 2.0)]
    >>> step_floor(ps, ((), (), (1,))), simulate(ps, ((), (), (1,)), 2, 1.9).step_seconds
    (2.5, 2.5)
    """
    # Seconds per (slot, cores) first: the search's schedules repeat a few core sets.
    per_set: dict[tuple[bool, tuple[int, ...]], float] = {}
    alone = [0.0] * len(preds)
    for p in placements:
        key = (p.smt, p.cores)
        per_set[key] = per_set.get(key, 0.0) + p.seconds
        if len(p.nodes) == 1:
            alone[p.nodes[0]] = p.seconds
    per_slot: dict[tuple[bool, int], float] = {}
    for (smt, cores), seconds in per_set.items():
        for c in cores:
            per_slot[smt, c] = per_slot.get((smt, c), 0.0) + seconds
    return max(max(per_slot.values(), default=0.0),
               max(bottom_levels(alone, preds), default=0.0))


def sure_floor(floor: float, placements: int) -> float:
    """`floor`, a lower bound on a step computed in floats, less what the simulators can take
    off it: each event loop finishes ends within EPSILON of the earliest together, at the
    earliest, and rounds each end; along a chain of `placements` ops that is at most
    placements x (EPSILON + rounding) x max(step, 1), and the floor's own sums round by less
    (2**-53 per term). Every simulator's step_seconds is at least what this returns."""
    return floor - 4 * (placements + 1) * EPSILON * max(floor, 1.0)


def simulate(placements: Sequence[Placement], preds: Sequence[Sequence[int]], cores: int,
             smt_slowdown: float, handoff: float = 0.0) -> SimResult:
    """Run placements (in execution order) with node dependencies `preds` (by node index),
    `handoff` seconds on every wait across lanes (module docstring).

    Raises ValueError when the placements cannot all run (a node placed twice or never, or an
    order that waits on itself).

    >>> from planner.schedule.placement import Placement
    >>> ps = [Placement((0,), (0,), "compact", 1.0, 0.0),
    ...       Placement((1,), (1,), "compact", 1.0, 1.0),
    ...       Placement((2,), (0,), "compact", 1.0, 1.0)]
    >>> simulate(ps, ((), (0,), (0,)), cores=2, smt_slowdown=1.9, handoff=0.25).starts
    (0.0, 1.25, 1.0)
    """
    blocked, unblocks = unblocking(placements, preds, cores)
    hand = HandOffs(placements, handoff)
    if not any(p.smt for p in placements):
        return exclusive_cores_loop(placements, blocked, unblocks, cores, hand)
    return shared_cores_loop(placements, blocked, unblocks, cores, smt_slowdown, hand)


class HandOffs:
    """When each placement may start: the latest end of what it waits for, `seconds` later
    where that ran on another lane (module docstring). With seconds = 0, the end itself: the
    event that unblocks an op is its latest wait's end, so it starts then, as without."""

    def __init__(self, placements: Sequence[Placement], seconds: float = 0.0) -> None:
        self.seconds = seconds
        self.lane = [(p.smt, min(p.cores)) if p.cores else (p.smt, -1) for p in placements] \
            if seconds > 0 else []
        self.ready = [0.0] * len(placements) if seconds > 0 else []

    def let_go(self, i: int, j: int, now: float) -> None:
        """`i`, a wait of `j`, ended `now`."""
        if self.seconds > 0:
            at = now + self.seconds if self.lane[i] != self.lane[j] else now
            if at > self.ready[j]:
                self.ready[j] = at

    def start(self, j: int, now: float) -> float:
        """When `j`, unblocked `now` (its last wait ended), starts."""
        return self.ready[j] if self.seconds > 0 else now


def shared_cores_loop(placements: Sequence[Placement], blocked: list[int],
                      unblocks: list[list[int]], cores: int, f: float,
                      hand: HandOffs | None = None) -> SimResult:
    """The event loop with SMT interference (module docstring): start what is unblocked, then
    finish the earliest projected ends (those within EPSILON together) and start what they
    unblock, until nothing runs. An op handed over from another lane starts later (`hand`):
    it waits, unblocked, until then; ends due first are finished first."""
    hand = hand or HandOffs(placements)
    sim = SharedCores(placements, cores, f)
    for i in range(len(placements)):
        if blocked[i] == 0:
            sim.start(i)
    waiting: list[tuple[float, int]] = []  # (start, placement), handed over, not started
    while True:
        end = sim.next_end()
        if waiting and waiting[0][0] < end:
            sim.now = max(sim.now, waiting[0][0])
            due = []
            while waiting and waiting[0][0] <= sim.now:
                due.append(heapq.heappop(waiting)[1])
            for j in sorted(due):
                sim.start(j)
            continue
        finished = sim.next_ends()
        if not finished:
            break
        newly: list[int] = []
        for i in sorted(finished):
            sim.finish(i)
            for j in unblocks[i]:
                hand.let_go(i, j, sim.now)
                blocked[j] -= 1
                if blocked[j] == 0:
                    newly.append(j)
        for j in sorted(newly):
            at = hand.start(j, sim.now)
            if at > sim.now:
                heapq.heappush(waiting, (at, j))
            else:
                sim.start(j)
    return sim_result(sim.starts, sim.ends, sim.busy, sim.counts, cores, blocked,
                      sim.done == len(placements))


class SharedCores:
    """The state of the SMT event loop: which placement runs on each hardware thread of each
    core, each running placement's progress, and its projected end (a heap entry per
    projection; a newer projection makes the older stale by `version`)."""

    def __init__(self, placements: Sequence[Placement], cores: int, f: float) -> None:
        n = len(placements)
        self.placements, self.f = placements, f
        self.seconds = [p.seconds for p in placements]
        self.slot_of = [1 if p.smt else 0 for p in placements]
        self.starts = [0.0] * n
        self.ends = [0.0] * n
        # on[s][c]: the running placement on slot s of core c, or -1 (a list per slot: a
        # wide op's cores are read by map()).
        self.on = ([-1] * cores, [-1] * cores)
        self.busy = [0.0] * cores
        self.busy_since = [0.0] * cores
        # Per running placement: progress of its threads that have ever shared their core
        # (the others progress at full pace since the start), the cores shared now, and when
        # the progress was last brought up to date.
        self.progress: list[dict[int, float]] = [{} for _ in range(n)]
        self.shared: list[frozenset[int]] = [frozenset()] * n
        self.mark = [0.0] * n
        self.version = [0] * n
        self.heap: list[tuple[float, int, int]] = []
        self.counts: list[int] = []
        self.running = 0
        self.now = 0.0
        self.done = 0

    def next_end(self) -> float:
        """The earliest projected end (inf when nothing runs), stale projections dropped."""
        heap, version = self.heap, self.version
        while heap and heap[0][2] != version[heap[0][1]]:
            heapq.heappop(heap)
        return heap[0][0] if heap else float("inf")

    def next_ends(self) -> list[int]:
        """The placements whose projected end is the earliest (within EPSILON of it), `now`
        moved there; [] when nothing runs."""
        heap, version = self.heap, self.version
        while heap:
            end, i, v = heapq.heappop(heap)
            if v != version[i]:
                continue
            self.now = max(self.now, end)
            finished = [i]
            limit = end + EPSILON * max(abs(end), 1.0)
            while heap and heap[0][0] <= limit:
                _, j, w = heapq.heappop(heap)
                if w == version[j]:
                    finished.append(j)
            return finished
        return []

    def advance(self, i: int) -> None:
        """Bring i's shared-ever threads' progress up to `now` under the sharing since its
        mark."""
        now = self.now
        dt = now - self.mark[i]
        if dt > 0.0:
            prog, sh, s, f = self.progress[i], self.shared[i], self.seconds[i], self.f
            for c, p in prog.items():
                prog[c] = min(s, p + (dt / f if c in sh else dt))
        self.mark[i] = now

    def project(self, i: int) -> None:
        """Push i's predicted end if the sharing stays as it is now: its slowest thread's."""
        now, f = self.now, self.f
        prog, sh, s = self.progress[i], self.shared[i], self.seconds[i]
        end = self.starts[i] + s if len(prog) < len(self.placements[i].cores) else now
        for c, p in prog.items():
            t = now + (s - p) * (f if c in sh else 1.0)
            if t > end:
                end = t
        self.version[i] += 1
        heapq.heappush(self.heap, (end, i, self.version[i]))

    def reshare(self, i: int) -> None:
        """i's sharing changed: its progress so far, the cores it shares now, its new end."""
        self.advance(i)
        now, held = self.now, self.on[1 - self.slot_of[i]]
        cores = self.placements[i].cores
        now_shared = frozenset(compress(cores, [h >= 0 for h in map(held.__getitem__, cores)]))
        prog = self.progress[i]
        for c in now_shared:
            if c not in prog:
                prog[c] = min(self.seconds[i], now - self.starts[i])
        self.shared[i] = now_shared
        self.project(i)

    def neighbours(self, i: int) -> list[int]:
        """The placements on the other hardware thread of i's cores."""
        near = set(map(self.on[1 - self.slot_of[i]].__getitem__, self.placements[i].cores))
        near.discard(-1)
        return sorted(near)

    def start(self, i: int) -> None:
        """i starts now; it and its neighbours reshare their cores."""
        now, (first, second) = self.now, self.on
        self.starts[i] = self.mark[i] = now
        mine = self.on[self.slot_of[i]]
        for c in self.placements[i].cores:
            if first[c] < 0 and second[c] < 0:
                self.busy_since[c] = now
            mine[c] = i
        self.running += 1
        self.reshare(i)
        for j in self.neighbours(i):
            self.reshare(j)
        self.counts.append(self.running)

    def finish(self, i: int) -> None:
        """i ends now; its cores' busy time, and its neighbours reshare."""
        now, (first, second) = self.now, self.on
        self.ends[i] = now
        mine = self.on[self.slot_of[i]]
        near = self.neighbours(i)
        for c in self.placements[i].cores:
            mine[c] = -1
            if first[c] < 0 and second[c] < 0:
                self.busy[c] += now - self.busy_since[c]
        self.version[i] += 1
        self.running -= 1
        self.done += 1
        for j in near:
            self.reshare(j)
        self.counts.append(self.running)


def exclusive_cores_loop(placements: Sequence[Placement], blocked: list[int],
                         unblocks: list[list[int]], cores: int,
                         hand: HandOffs | None = None) -> SimResult:
    """`simulate` when no placement uses a second hardware thread: no thread ever shares its
    core, so each op runs at its own pace from the event that unblocks it (or the hand-off's
    end, `hand`). The same events in the same order (ends within EPSILON finish together, at
    the first of them), so the same floats; most candidates of the optimized search take this
    path, several times faster."""
    hand = hand or HandOffs(placements)
    handing = hand.seconds > 0
    n = len(placements)
    seconds = [p.seconds for p in placements]
    cores_of = [p.cores for p in placements]
    starts = [0.0] * n
    ends = [0.0] * n
    # Each finished op's busy time, added to its cores at the end in finish order (the same
    # sums, in the same order, as adding them one op at a time).
    on_cores: list[int] = []
    ran: list[float] = []
    widths: list[int] = []
    # The first ops start at 0 (a heap pops the same order however it was built: no ties).
    heap = [(seconds[i], i) for i in range(n) if blocked[i] == 0]
    heapq.heapify(heap)
    running = len(heap)
    counts = list(range(1, running + 1))
    now = 0.0
    done = 0
    pop, push = heapq.heappop, heapq.heappush
    while heap:
        end, i = pop(heap)
        # Conditionals for max(): the same values, without a builtin's call per event.
        if end > now:
            now = end
        finished = [i]
        limit = end + EPSILON * (abs(end) if abs(end) >= 1.0 else 1.0)
        while heap and heap[0][0] <= limit:
            finished.append(pop(heap)[1])
        if len(finished) > 1:
            finished.sort()
        newly: list[int] = []
        for i in finished:
            ends[i] = now
            # A core is busy from each op's start to its end (one op at a time on it).
            held = cores_of[i]
            on_cores.extend(held)
            ran.append(now - starts[i])
            widths.append(len(held))
            running -= 1
            counts.append(running)
            for j in unblocks[i]:
                if handing:
                    hand.let_go(i, j, now)
                blocked[j] -= 1
                if blocked[j] == 0:
                    newly.append(j)
        done += len(finished)
        if len(newly) > 1:
            newly.sort()
        for j in newly:
            at = hand.start(j, now) if handing else now
            starts[j] = at
            push(heap, (at + seconds[j], j))
            running += 1
            counts.append(running)
    return sim_result(starts, ends, _core_totals(on_cores, ran, widths, cores), counts, cores,
                      blocked, done == n)


def _core_totals(on_cores: list[int], ran: list[float], widths: list[int],
                 cores: int) -> list[float]:
    """Per core, the busy seconds of the ops that held it: op k ran `ran[k]` on the next
    `widths[k]` entries of `on_cores`."""
    total = np.zeros(cores)
    # ufunc.at adds unbuffered, element by element in index order: per core, the same sums.
    np.add.at(total, np.array(on_cores, dtype=np.intp), np.repeat(ran, widths))
    return total.tolist()


def sim_result(starts, ends, busy, counts, cores: int, blocked: list[int],
            finished: bool) -> SimResult:
    """The SimResult of a finished run (both event loops end here)."""
    if not finished:
        stuck = [i for i in range(len(blocked)) if blocked[i] > 0]
        raise ValueError(f"execution order deadlocks: placements {stuck[:5]} never start")
    step_seconds = max(ends, default=0.0)
    core_busy = tuple(b / step_seconds if step_seconds else 0.0 for b in busy)
    return SimResult(starts=tuple(starts), ends=tuple(ends), step_seconds=step_seconds,
                     core_busy=core_busy,
                     utilization=sum(core_busy) / cores if cores else 0.0,
                     mean_corun=sum(counts) / len(counts) if counts else 0.0,
                     events=len(counts))
