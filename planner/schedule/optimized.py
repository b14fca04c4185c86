"""The default strategy: list scheduling of moldable ops (the two-phase approach of CPA/MCPA,
Radulescu & van Gemund: choose each op's thread count, then list-schedule by bottom level),
with backfilling, optional grouping and hyper-thread co-running, and a bounded search.

Allotments (phase 1), several candidates:

    relaxed    from the allotment relaxation (bound.py): its per-op durations balance path
               length against work as the lower bound does; an op gets the fewest threads whose
               time is within `scale` x its duration (ScheduleOptions.relaxed_scales; below 1 leaves
               room for packing losses)
    stretch    the fewest threads within `stretch` x the op's fastest time; ops on the critical
               path (no slack) get their fastest count

One list schedule (`list_moldable`, phase 2):

    priority   bottom level at the allotted times: the longest path from the op to the step's
               end (critical ops first)
    decision   the first ready op by priority starts now on the best count <= min(a[i], free
               cores), unless waiting for cores that running ops release would finish it
               sooner; then it reserves that moment and later ops may only backfill cores
               they give back before it
    widen      an op may take more threads than allotted, up to free cores that would idle
               until the first running op ends (no op can become ready before then)
    grouping   >= group_min ready ops of one signature run as one parallel loop, one op per
               thread (seed 003's 26 embedding lookups)
    co-run     ready ops that gain little from a second thread run side by side as one
               parallel loop over the free cores, one op per thread at a time (a co-run group:
               seed 002's co-running, on one lane), where that ends before they would one after
               another on their fastest counts. Each op's one-thread time is slowed by the
               host's measured co-running slowdown (sigma, planner.schedule.contention) while
               it has company. One lane and one team: a co-running op waits for no other
               lane's thread to be woken (a hand-off, 20-50 us on a virtual machine)
    smt        ready ops that fit on a wide op's second hardware threads and end before it
               (slowed by SMT_SLOWDOWN)

The search (`optimized`, its phases the methods of `Search`, below) list-schedules every candidate
allotment, tries SMT on the best, refines it by giving ops the best schedule ran late their fastest
count (`refine_rounds`), moves the thread counts of the heaviest ops one at a time (half, fastest,
half again; `allot_moves` schedules at most, kept where the step shortens: a long op that
holds every core can leave room for an independent one to run beside it instead of later),
tries priorities blended with the relaxation's durations, perturbs its priorities
(`search_rounds`, seeded: plans stay byte-identical), and keeps the best simulated plan; all
of it once without co-run groups and, where its first allotments simulate faster with them,
once with (`corun_groups`). The
whole-machine uniform lanes and the paper schedule are its baselines: the result never loses
to them in the simulator, and is the best of them unless the search's own plan is predicted
faster by `min_gain` (a measured cost table's noise: a predicted win within it is no win).

Example:
    >>> allotment(__import__("numpy").array([4.0, 2.0, 1.9, 1.8]), 1.2)
    2
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import numpy as np

from planner.schedule.bound import bottom_levels, top_levels
from planner.schedule.costs import OpCosts
from planner.schedule.engine import Machine, list_schedule
from planner.schedule.options import ScheduleOptions
from planner.schedule.paper import paper
from planner.schedule.placement import Placement
from planner.schedule.simulate import step_floor, sure_floor
from planner.schedule.uniform import grid_pairs, uniform, uniform_floor


def allotment(times: np.ndarray, stretch: float) -> int:
    """Fewest threads whose time is within `stretch` x the fastest."""
    return int(allotments(times[None, :], stretch)[0])


def allotments(curves: np.ndarray, stretch: float) -> np.ndarray:
    """`allotment` of each row of `curves` (the same products and comparisons)."""
    return (curves <= curves.min(axis=1, keepdims=True) * stretch).argmax(axis=1) + 1


Widen = Literal["", "last", "fill"]
# Ops that take more threads than allotted, up to the free cores that would idle until the first
# running op ends (no op can become ready before then): "" none, "last" the last ready op only,
# "fill" any op, leaving the other ready ops their allotments.
WIDEN: tuple[Widen, ...] = ("", "last", "fill")


def list_moldable(costs: OpCosts, preds: Sequence[Sequence[int]], priority: Sequence[float],
                  allot: Sequence[int], groups: tuple[tuple[int, ...], ...], smt: bool,
                  smt_slowdown: float, group_min: int | None,
                  widen: Widen = "fill", groupable: Sequence[bool] | None = None,
                  corun: float | None = None) -> list[Placement]:
    """One list schedule (see the module docstring). `group_min` None: no grouping; `widen`:
    which ops may take more threads than allotted when cores would idle otherwise (WIDEN);
    `groupable`: may_group(costs, group_min), where the caller has it; `corun`: the
    co-running slowdown sigma of co-run groups (None: none)."""
    policy = Moldable(costs, priority, allot, smt, smt_slowdown, group_min, widen, groupable,
                      corun)
    return list_schedule(preds, Machine(groups, smt=smt), policy)


class Moldable:
    """list_moldable's policy: at each decision the engine asks for, `group` starts the ready
    ops that run faster as one parallel loop, `corun_group` the highest-priority one with the
    ready ops it runs beside faster than after, `place` starts the rest by priority on their
    allotments (or reserves a later moment for one), and `corun` fills a wide op's second
    hardware threads. Holds only what the decisions read; the machine is the engine's."""

    def __init__(self, costs: OpCosts, priority: Sequence[float], allot: Sequence[int],
                 smt: bool, smt_slowdown: float, group_min: int | None, widen: Widen,
                 groupable: Sequence[bool] | None, corun: float | None = None) -> None:
        self.costs, self.allot, self.widen, self.corun_slowdown = costs, allot, widen, corun
        self.smt, self.smt_slowdown, self.group_min = smt, smt_slowdown, group_min
        self.fill = widen == "fill"
        self.times, self.best, self.affinity = costs.time_lists, costs.best_prefix, costs.affinity
        if group_min is not None and groupable is None:
            groupable = may_group(costs, group_min)
        self.groupable = groupable
        # Rank of each node in priority order (highest first, ties by index): ready lists sort
        # by it without a Python key function per comparison (they can hold thousands of ops).
        rank = [0] * len(priority)
        for r, i in enumerate(sorted(range(len(priority)), key=lambda i: (-priority[i], i))):
            rank[i] = r
        self.by_rank = rank.__getitem__

    def decide(self, now: float, ready: list[int], machine: Machine) -> list[Placement]:
        """The placements started now (the engine's question)."""
        started: list[Placement] = []
        queue = sorted(ready, key=self.by_rank)
        # A group needs group_min ready ops (most decisions see three or four).
        if self.groupable is not None and len(queue) >= self.group_min:
            queue = self.group(now, queue, machine, started)
        if self.corun_slowdown is not None and len(queue) >= 2 and machine.free_count >= 2:
            queue = self.corun_group(now, queue, machine, started)
        self.place(now, queue, machine, started)
        if self.smt and machine.smt_mask and queue:
            self.corun(now, queue, machine, started)
        return started

    def group(self, now: float, queue: list[int], machine: Machine,
              started: list[Placement]) -> list[int]:
        """Start >= group_min ready ops of one signature as one parallel loop, one op per
        thread, where that beats their fastest times one after another; the queue left."""
        by_key: dict[str, list[int]] = {}
        for i in queue:
            if self.groupable[i]:
                by_key.setdefault(self.costs.keys[i], []).append(i)
        for members in by_key.values():
            free = machine.free_count
            if len(members) >= self.group_min and free >= 1:
                k = min(len(members), free)
                # One parallel loop over independent ops, one op per thread at a time.
                grouped = math.ceil(len(members) / k) * self.times[members[0]][0]
                alone = sum(self.costs.fastest_seconds[i] for i in members)
                if grouped < alone:
                    started.append(machine.start(tuple(sorted(members)), k, "compact",
                                                 grouped, now,
                                                 group="group"))
                    taken = set(members)
                    queue = [i for i in queue if i not in taken]
        return queue

    def corun_group(self, now: float, queue: list[int], machine: Machine,
                    started: list[Placement]) -> list[int]:
        """Start the first queued op with the queued ops it runs beside faster than after, as
        one co-run group on the free cores (module docstring); the queue left. An op joins
        where it shortens the group against the same ops one after another at their fastest
        counts on those cores; the first op, the one the list schedule would start next, is
        always in."""
        free = machine.free_count
        times, best, slow = self.times, self.best, 1.0 + self.corun_slowdown
        members = [queue[0]]
        alone = times[queue[0]][best[queue[0]][free - 1] - 1]
        gain, most = 0.0, 2 * free
        for i in queue[1:CORUN_CANDIDATES]:
            if len(members) == most:
                break
            trial = sorted((*members, i))
            with_i = alone + times[i][best[i][free - 1] - 1]
            saved = with_i - loop_seconds([times[v][0] for v in trial], free, slow)
            if saved > gain:
                members, alone, gain = trial, with_i, saved
        if len(members) < 2:
            return queue
        k = min(len(members), free)
        seconds = loop_seconds([times[v][0] for v in members], k, slow)
        started.append(machine.start(tuple(members), k, "compact", seconds, now,
                                     group="corun"))
        taken = set(members)
        return [i for i in queue if i not in taken]

    def place(self, now: float, queue: list[int], machine: Machine,
              started: list[Placement]) -> None:
        """Start queued ops by priority on the best count <= min(allotment, free cores)
        (widened where cores would idle), unless waiting for running ops' cores finishes one
        sooner: then that moment is reserved and later ops only backfill before it. Started
        ops leave `queue`."""
        times, allot, best, fill = self.times, self.allot, self.best, self.fill
        reserved: float | None = None
        # Allotments still in the queue (integers: any order sums the same).
        queued = sum(map(allot.__getitem__, queue)) if fill else 0
        # The machine's running list, which start() updates in place.
        running = machine.running
        for i in list(queue):
            free = machine.free_count
            if free == 0:
                break
            t, a = times[i], allot[i]
            # Conditionals, not min() and max(): the same values, and this loop runs ~30,000
            # times per plan, where the builtins' calls showed.
            limit = a if a <= free else free
            k = best[i][limit - 1]
            if self.widen and reserved is None and free > limit and (fill or len(queue) == 1):
                k = self.widened(i, k, now, free - (queued - a if fill else 0), limit, running)
            finish = now + t[k - 1]
            if reserved is None:
                wait_at = self.wait(i, now, finish, free, running)
                if wait_at is not None and running:
                    reserved = wait_at
                    continue
            elif finish > reserved:
                continue
            started.append(machine.start((i,), k, self.affinity[i][k - 1], t[k - 1], now))
            queue.remove(i)
            queued -= a

    def widened(self, i: int, k: int, now: float, room: int, limit: int,
                running: list) -> int:
        """Node i's count on `room` cores (those the other ready ops' allotments leave) where
        it finishes on them before the first running op ends, else k: no op becomes ready
        before then, so those cores would idle."""
        if room > limit:
            wide = self.best[i][room - 1]
            # Running placements are sorted by end: the first without SMT ends first.
            if now + self.times[i][wide - 1] <= next((e for e, _, p in running if not p.smt),
                                                     math.inf):
                return wide
        return k

    def wait(self, i: int, now: float, finish: float, free: int, running: list) -> float | None:
        """The moment a running op's end frees cores that finish node i sooner than `finish`
        (the best such, ends in order), or None."""
        t, fastest, a = self.times[i], self.best[i], self.allot[i]
        wait_best, wait_at = finish, None
        free_then = free
        # At each end of a running non-SMT placement, the cores free then (a loop here:
        # a generator of these cost a tenth of the list schedule).
        for end, _, p in running:
            if p.smt:
                continue
            free_then += len(p.cores)
            at = end if end >= now else now
            kw = fastest[(a if a <= free_then else free_then) - 1]
            if at + t[kw - 1] < wait_best * (1 - 1e-9):
                wait_best, wait_at = at + t[kw - 1], at
            if free_then >= a:
                break
        return wait_at

    def corun(self, now: float, queue: list[int], machine: Machine,
              started: list[Placement]) -> None:
        """Start queued ops (shortest serial time first) on a wide op's free second hardware
        threads where they end before it, slowed by smt_slowdown."""
        times, best, slow = self.times, self.best, self.smt_slowdown
        for w in machine.wide():
            left = w.end - now
            for i in sorted(queue, key=lambda j: (times[j][0], j)):
                slots = machine.smt_slots(w.cores)
                if slots == 0:
                    break
                k = best[i][slots - 1]
                t_alone = times[i][k - 1]
                if slow * t_alone <= left:
                    started.append(machine.start((i,), k, self.affinity[i][k - 1], t_alone,
                                                 now, smt=True, until=now + slow * t_alone))
                    queue.remove(i)


# Queued ops (by priority) a co-run group looks at: the ready list can hold thousands.
CORUN_CANDIDATES = 16


def loop_seconds(seconds: Sequence[float], threads: int, slowdown: float) -> float:
    """The end of a parallel loop over ops of these one-thread `seconds`, in this order, each
    taken by the first free thread (OpenMP's dynamic schedule, chunks of one), every op
    `slowdown` x slower while another runs beside it.

    >>> loop_seconds([3.0, 1.0, 1.0], 2, 1.0)   # thread 2 takes the second and the third op
    3.0
    >>> loop_seconds([2.0, 2.0], 2, 1.5), loop_seconds([2.0], 2, 1.5)
    (3.0, 2.0)
    """
    running: list[float] = []  # work left of each op running now
    now, waiting = 0.0, list(reversed(seconds))
    while waiting or running:
        while waiting and len(running) < threads:
            running.append(waiting.pop())
        pace = 1.0 / slowdown if len(running) > 1 else 1.0
        dt = min(running) / pace
        now += dt
        running = [r - dt * pace for r in running]
        # Ends within float noise of the first finish in the same event.
        running = [r for r in running if r > 1e-12 * max(dt * pace, 1e-300)]
    return now


def may_group(costs: OpCosts, group_min: int) -> list[bool]:
    """Per node, whether it may ever run in a group: its signature has group_min nodes, and
    one thread's time of the first of them is below all their fastest times one after
    another. Otherwise no ready subset of them groups: a group's loop takes at least one
    thread's time of its first op, and its ops alone take at most (count x the largest
    fastest time) (the margin holds any float sum's rounding).

    >>> import numpy as np
    >>> c = OpCosts(times=(np.array([4.0, 2.0]),) * 4 + (np.array([4.0, 0.9]),) * 4,
    ...             affinity=(("compact",) * 2,) * 8, keys=("a",) * 4 + ("b",) * 4,
    ...             analytical=())
    >>> may_group(c, 4)[::4], may_group(c, 5)[::4]
    ([True, False], [False, False])
    """
    members: dict[str, list[int]] = {}
    for i, key in enumerate(costs.keys):
        members.setdefault(key, []).append(i)
    times, fastest = costs.time_lists, costs.fastest_seconds
    may = {key: len(m) >= group_min and min(times[i][0] for i in m)
           < len(m) * max(fastest[i] for i in m) * (1 + 1e-9)
           for key, m in members.items()}
    return [may[key] for key in costs.keys]


def allot_all(costs: OpCosts, stretch: float, critical: Sequence[bool]) -> list[int]:
    """Per node: its fastest count when critical, else the stretch allotment."""
    fewest = allotments(costs.matrix, stretch).tolist() if costs.times else []
    return [costs.best_threads(i) if critical[i] else fewest[i] for i in range(len(costs.times))]


def relaxed_allotment(costs: OpCosts, durations: Sequence[float], scale: float) -> list[int]:
    """Per node: the fewest threads whose time is within scale x its relaxation duration (its
    fastest count when none is)."""
    if not costs.times:
        return []
    # Per node (row), the first count whose time is within the limit (the same float
    # products and comparisons as one node at a time).
    limit = np.asarray(durations, dtype=np.float64) * scale * (1 + 1e-12)
    fits = costs.matrix <= limit[:, None]
    first = fits.argmax(axis=1) + 1
    fastest = np.array([b[-1] for b in costs.best_prefix])
    return np.where(fits.any(axis=1), first, fastest).tolist()


# ---- the search ------------------------------------------------------------------------------
def optimized(costs: OpCosts, preds: Sequence[Sequence[int]], op_types: Sequence[str],
              groups: tuple[tuple[int, ...], ...], smt: bool, cores: int,
              options: ScheduleOptions, timed,
              durations: Sequence[float] = (), baselines: bool = True,
              corun_slowdown: float = 0.0) -> list[Placement]:
    """The best simulated schedule of the search described in planner.schedule.optimized, as
    named phases; every candidate is kept in one list, in the order tried (ties: the first).

    `durations`: the allotment relaxation's per-node durations (bound.py); none, no
    relaxation-guided candidates. `corun_slowdown`: the host's co-running slowdown sigma,
    which co-run groups' ops pay while they have company."""
    plain = Search(costs, preds, groups, options, timed, durations)
    own = plain.best(smt and options.smt)
    if options.corun_groups:
        # The search again with co-run groups, carried through where its first allotments
        # beat the plain search's (ties keep the plain schedule).
        grouped = Search(costs, preds, groups, options, timed, durations, corun_slowdown)
        own = min((own, grouped.best(smt and options.smt, beat=plain.first_step)),
                  key=lambda r: r[0])
    fallbacks = (baseline_runs(costs, preds, op_types, groups, smt, cores, options, timed,
                               own[0]) if baselines else [])
    if not fallbacks:
        return own[1]
    base = min(fallbacks, key=lambda r: r[0])
    return own[1] if own[0] <= base[0] * (1.0 - options.min_gain) else base[1]


Run = tuple[float, list[Placement]]


def baseline_runs(costs: OpCosts, preds: Sequence[Sequence[int]], op_types: Sequence[str],
                  groups: tuple[tuple[int, ...], ...], smt: bool, cores: int,
                  options: ScheduleOptions, timed, own: float = math.inf) -> list[Run]:
    """The baselines: the uniform grid's whole-machine lanes (intra x inter = cores:
    TensorFlow's recommendation and its inter-op variants) and the paper's strategy. The
    optimized plan is never predicted slower than any of them, and is one of them unless the
    search's own schedule wins by options.min_gain.

    `own`, the search's best step: a baseline whose step floor (simulate.sure_floor) it
    already beats by min_gain is left out, unsimulated (a uniform one not even
    list-scheduled). That changes no choice, ties included: the search's schedule beats it
    whatever its simulated step, and where a baseline is chosen, it is one whose step is below
    own / (1 - min_gain), which every left-out one's is not."""
    n = len(preds)

    def beaten(floor: float) -> bool:
        # Float products are monotone: beaten here means beaten by the simulated step too.
        return own <= sure_floor(floor, n) * (1.0 - options.min_gain)

    runs = [timed(uniform(costs, preds, groups, a, b)) for a, b in grid_pairs(cores)
            if a * b == cores and not beaten(uniform_floor(costs, preds, a, b))]
    ps = paper(costs, preds, op_types, groups, smt, options)
    return runs if beaten(step_floor(ps, preds)) else [*runs, timed(ps)]


class Search:
    """The optimized search's candidates: `run` list-schedules and simulates one (each distinct
    candidate once), `results` holds every run in the order tried; each phase is a method."""

    def __init__(self, costs: OpCosts, preds: Sequence[Sequence[int]],
                 groups: tuple[tuple[int, ...], ...], options: ScheduleOptions, timed,
                 durations: Sequence[float], corun: float | None = None) -> None:
        self.costs, self.preds, self.groups, self.options = costs, preds, groups, options
        # The co-running slowdown of co-run groups where its list schedules form them.
        self.sigma = corun
        self.first_step = math.inf
        self.timed, self.durations = timed, durations
        self.n = len(preds)
        self.relaxed = len(durations) == self.n
        fastest = costs.fastest_seconds
        self.bottom = bottom_levels(fastest, preds)
        top = top_levels(fastest, preds)
        cp = max(self.bottom, default=0.0)
        self.critical = [top[i] + self.bottom[i] >= cp * (1 - 1e-9) for i in range(self.n)]
        self.group_min = options.group_min if options.grouping else None
        self.groupable = None if self.group_min is None else may_group(costs, self.group_min)
        self.results: list[Run] = []
        self._ran: dict[tuple, Run] = {}

    def run(self, allot: Sequence[int], use_smt: bool, jitter: Sequence[float] | None = None,
            widen: Widen = "fill", blend: float = 0.0) -> Run:
        """The simulated list schedule of an allotment, appended to `results`."""
        # A list schedule is a function of these: the same candidate twice runs once.
        key = (tuple(allot), use_smt, widen, blend)
        if jitter is None and key in self._ran:
            self.results.append(self._ran[key])
            return self._ran[key]
        # Priority: bottom levels at the allotted times (the path the schedule will run), or
        # at a blend of those and the relaxation's durations (`blend` of the latter).
        times = self.costs.time_lists
        at = [times[i][allot[i] - 1] for i in range(self.n)]
        if blend:
            at = [(1 - blend) * a + blend * d for a, d in zip(at, self.durations, strict=True)]
        prio = bottom_levels(at, self.preds)
        if jitter is not None:
            prio = [b * j for b, j in zip(prio, jitter, strict=True)]
        out = self.timed(list_moldable(self.costs, self.preds, prio, allot, self.groups,
                                       use_smt, self.options.smt_slowdown, self.group_min,
                                       widen=widen, groupable=self.groupable,
                                       corun=self.sigma))
        if jitter is None:
            self._ran[key] = out
        self.results.append(out)
        return out

    def first_allotment(self, try_smt: bool) -> tuple[list[int], bool, Widen]:
        """Every candidate allotment (each stretch over the critical path, each scale of the
        relaxation); the best (its step: `first_step`), then widened at its last ready op
        instead of any, then on SMT siblings. Returns (allotment, SMT or not, widening) of
        the best."""
        costs, options = self.costs, self.options
        allots = [allot_all(costs, stretch, self.critical)
                  for stretch in sorted({*options.stretches, options.stretch})]
        if self.relaxed:
            allots += [relaxed_allotment(costs, self.durations, scale)
                       for scale in options.relaxed_scales]
        steps = [self.run(allot, False)[0] for allot in allots]
        best_at = min(range(len(steps)), key=lambda r: steps[r])
        self.first_step = steps[best_at]
        allot, use_smt, widen, best = allots[best_at], False, "fill", steps[best_at]
        last = self.run(allot, False, widen="last")[0]
        if last < best:
            best, widen = last, "last"
        if try_smt:
            use_smt = self.run(allot, True, widen=widen)[0] < best
        return allot, use_smt, widen

    def best(self, try_smt: bool, beat: float = math.inf) -> Run:
        """The best run of every phase in order; only the first allotments' where their best
        does not `beat` that step (another search's: the rest would not be worth its time)."""
        allot, use_smt, widen = self.first_allotment(try_smt)
        if self.first_step < beat:
            allot, best_step = self.widen_late_ops(allot, use_smt, widen)
            allot = self.move_heaviest(allot, use_smt, best_step)
            self.blend_priorities(allot, use_smt)
            self.jitter_priorities(allot, use_smt, widen)
        return min(self.results, key=lambda r: r[0])

    def widen_late_ops(self, allot: list[int], use_smt: bool, widen: Widen
                       ) -> tuple[list[int], float]:
        """Refinement: ops the best schedule so far ran late (started after their latest start
        at the bound's pace) get their fastest allotment, for options.refine_rounds rounds.
        Returns the best allotment and the best step of every run so far."""
        best_step, best_allot = min(r[0] for r in self.results), allot
        widened: set[int] = set()
        for _ in range(self.options.refine_rounds):
            step, ps = min(self.results, key=lambda r: r[0])
            late = _late_ops(ps, self.bottom, step) - widened
            if not late:
                break
            widened |= late
            allot = [self.costs.best_prefix[i][-1] if i in widened else a
                     for i, a in enumerate(allot)]
            tried = self.run(allot, use_smt, widen=widen)[0]
            if tried < best_step:
                best_step, best_allot = tried, allot
        return best_allot, best_step

    def move_heaviest(self, allot: list[int], use_smt: bool, best_step: float) -> list[int]:
        """Allotment moves: the heaviest ops' thread counts, one op at a time, kept where the
        whole schedule gets shorter (a long op on all cores can leave room for one that would
        otherwise run later beside the critical path, as LSTM's two softmax gradient
        MatMuls); options.allot_moves runs at most."""
        runs = self.options.allot_moves
        for i in heaviest(self.costs, allot, self.options.move_share):
            if runs <= 0:
                break
            for k in moves(self.costs, i, allot[i])[:runs]:
                runs -= 1
                tried = [k if j == i else a for j, a in enumerate(allot)]
                step = self.run(tried, use_smt, widen="fill")[0]
                if step < best_step * (1 - 1e-9):
                    best_step, allot = step, tried
                    break
        return allot

    def blend_priorities(self, allot: list[int], use_smt: bool) -> None:
        """The allotment with priorities blended toward the relaxation's durations
        (options.priority_blends), when there is a relaxation."""
        if self.relaxed:
            for blend in self.options.priority_blends:
                self.run(allot, use_smt, widen="fill", blend=blend)

    def jitter_priorities(self, allot: list[int], use_smt: bool, widen: Widen) -> None:
        """options.search_rounds runs with priorities jittered by up to 10%, seeded (plans
        stay byte-identical)."""
        rng = np.random.default_rng(0)
        for _ in range(self.options.search_rounds):
            self.run(allot, use_smt, 1.0 + 0.1 * rng.random(self.n), widen)


def heaviest(costs: OpCosts, allot: Sequence[int], share: float) -> list[int]:
    """Node indices whose core-seconds at their allotment are at least `share` of all nodes',
    largest first (ties: lower index)."""
    work = [costs.time_lists[i][a - 1] * a for i, a in enumerate(allot)]
    least = share * sum(work)
    return sorted((i for i in range(len(allot)) if work[i] >= least), key=lambda i: (-work[i], i))


def moves(costs: OpCosts, i: int, k: int) -> list[int]:
    """Thread counts the allotment search tries for node i now on k: half (room for a
    co-running op), its fastest count, and half again as many; distinct, without k.

    >>> import numpy as np
    >>> c = OpCosts(times=(np.array([4.0, 2.0, 1.5, 1.4]),), affinity=(("compact",) * 4,),
    ...             keys=("a",), analytical=())
    >>> moves(c, 0, 2)
    [1, 4, 3]
    """
    cores = len(costs.time_lists[i])
    out: list[int] = []
    for m in (max(1, k // 2), costs.best_prefix[i][-1], min(cores, -(-3 * k // 2))):
        if m != k and m not in out:
            out.append(m)
    return out


def _late_ops(ps: list[Placement], bottom: Sequence[float], step: float) -> set[int]:
    # A node's latest start that still meets `step` at its fastest pace is step - bottom.
    return {v for p in ps for v in p.nodes if p.start > step - bottom[v] + 1e-12}
