"""`cpu_schedule`: graph + cost model + options -> Schedule on the target's logical CPUs, as
named steps:

    costs      every op's time at every thread count       (costs.op_costs)
    deps       data and in-place dependencies              (deps.predecessors)
    bound      critical path, area, allotment and cut bounds (bound.lower_bound)
    schedule   the strategy's placements                    (uniform, paper, optimized; the
               optimized search uses the bound's relaxation and keeps each candidate's run)
    simulate   real start and end times, utilisation        (simulate.simulate; with the
               memory bandwidth and cores shared by co-running ops when the cost table
               carries a measured contention: contention.simulate_contended)
    record     logical CPU ids, happens-before edges        (the Schedule record)

Example:
    >>> from planner.costs import CostModel
    >>> from planner.target import preset
    >>> from planner.zoo import build
    >>> g = build("mlp", batch=2, hidden=[4], in_features=3, classes=2)
    >>> s = cpu_schedule(g, CostModel(preset("xeon-8180")), ScheduleOptions(strategy="paper"))
    >>> len(s.ops), s.backend, round(s.step_seconds / s.bound.seconds, 6)
    (6, 'cpu', 1.0)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import repeat
from operator import itemgetter

import numpy as np

from planner.costs import CostModel
from planner.graph.deps import predecessors
from planner.ir.graph import Graph
from planner.schedule.bound import bottom_levels, capacity, lower_bound, top_levels
from planner.schedule.contention import Contention, simulate_contended
from planner.schedule.costs import OpCosts, op_costs
from planner.schedule.optimized import (
    Widen,
    allot_all,
    list_moldable,
    may_group,
    relaxed_allotment,
)
from planner.schedule.options import ScheduleOptions
from planner.schedule.paper import paper
from planner.schedule.placement import Placement, in_order
from planner.schedule.record import Bound, Schedule
from planner.schedule.simulate import SimResult, simulate, step_floor, sure_floor
from planner.schedule.uniform import grid_pairs, uniform, uniform_floor
from planner.target.records import Target


def cpu_schedule(graph: Graph, model: CostModel, options: ScheduleOptions | None = None
                 ) -> Schedule:
    """The schedule of `graph` on the model's target's CPUs (see the module docstring)."""
    options = options or ScheduleOptions()
    target = model.target
    if target.cpu is None:
        raise ValueError(f"target {target.name!r} has no CPU to schedule on")
    costs = op_costs(graph, model)
    preds = predecessors(graph)
    bound = lower_bound(costs, preds, capacity(target.cores, target.smt_width,
                                               options.smt_slowdown))
    sims: dict[int, tuple[list[Placement], SimResult]] = {}
    contention = measured_contention(graph, model)
    handoff = measured_handoff(model)
    placements = schedule(graph, target, costs, preds, options, sims, bound.durations,
                          contention=contention, handoff=handoff)
    ran = sims.get(id(placements))
    sim = ran[1] if ran is not None and ran[0] is placements else run_placements(
        placements, preds, target.cores, options.smt_slowdown, contention, handoff)
    return record(graph, target, options, costs, preds, placements, sim, bound)


def measured_contention(graph: Graph, model: CostModel) -> Contention | None:
    """The sharing the simulator charges co-running ops: only where the cost table measured it
    on this machine (CostTable.contention, corun_slowdown); None, the contention-free
    simulator."""
    table = model.table
    kappa = table.contention if table is not None else None
    sigma = table.corun_slowdown if table is not None else None
    if not (kappa or sigma) or model.target.cpu is None:
        return None
    return Contention.of(graph, model.target.cpu, kappa or 0.0, sigma or 0.0)


def measured_handoff(model: CostModel) -> float:
    """The seconds an op waits when handed over from another lane, as measured on this machine
    (CostTable.handoff_seconds); 0 where none was (planner.schedule.simulate)."""
    table = model.table
    if table is None or model.target.cpu is None:
        return 0.0
    return table.handoff_seconds or 0.0


def run_placements(placements: Sequence[Placement], preds: Sequence[Sequence[int]], cores: int,
                   smt_slowdown: float, contention: Contention | None = None,
                   handoff: float = 0.0) -> SimResult:
    """The simulator for these placements: the contended one when `contention` is given and no
    placement uses SMT (the contended model does not combine with SMT interference yet); each
    hand-off across lanes `handoff` seconds."""
    if contention is not None and not any(p.smt for p in placements):
        return simulate_contended(placements, preds, cores, contention, handoff)
    return simulate(placements, preds, cores, smt_slowdown, handoff)


def schedule(graph: Graph, target: Target, costs: OpCosts, preds: Sequence[Sequence[int]],
             options: ScheduleOptions,
             sims: dict[int, tuple[list[Placement], SimResult]] | None = None,
             durations: Sequence[float] = (), baselines: bool = True,
             contention: Contention | None = None, handoff: float = 0.0) -> list[Placement]:
    """Placements in execution order under the options' strategy.

    `sims`, when given, receives the simulation of every candidate schedule tried, by the id of
    its placement list, so the caller need not simulate the winner again. `baselines=False`
    leaves the uniform and paper schedules out of the optimized search's candidates (its own
    best, as tests measure it)."""
    sims = {} if sims is None else sims
    groups = target.cache_groups
    smt = target.smt_width > 1
    cores = target.cores

    # Candidates of the search often repeat an earlier one's placements (another allotment
    # that leads to the same schedule): simulated once. Keyed by the planned starts (cheap to
    # hash), confirmed by comparing the placements.
    seen: dict[tuple[float, ...], list[tuple[float, list[Placement]]]] = {}

    def timed(ps: list[Placement]) -> tuple[float, list[Placement]]:
        ps = in_order(ps)
        same_starts = seen.setdefault(tuple(p.start for p in ps), [])
        for done in same_starts:
            if done[1] == ps:
                return done
        sim = run_placements(ps, preds, cores, options.smt_slowdown, contention, handoff)
        sims[id(ps)] = (ps, sim)
        same_starts.append((sim.step_seconds, ps))
        return same_starts[-1]

    if options.strategy == "uniform":
        if options.grid:
            return min((timed(uniform(costs, preds, groups, a, b, options.min_team_seconds))
                        for a, b in grid_pairs(cores)), key=lambda r: r[0])[1]
        intra, inter = options.lanes(cores)
        return in_order(uniform(costs, preds, groups, intra, inter, options.min_team_seconds))
    op_types = [n.op for n in graph.nodes]
    if options.strategy == "paper":
        return in_order(paper(costs, preds, op_types, groups, smt, options))
    return optimized(costs, preds, op_types, groups, smt, cores, options, timed, durations,
                     baselines, contention.sigma if contention is not None else 0.0)


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


def group_name(kind: str, first: str) -> str:
    """A parallel loop's name in the plan: its kind and its first op (in graph order, which is
    also its ops' plan order); "" for an op on its own.

    >>> group_name("corun", "layer1/conv1"), group_name("", "fc")
    ('corun:layer1/conv1', '')
    """
    return f"{kind}:{first}" if kind else ""


def record(graph: Graph, target: Target, options: ScheduleOptions, costs: OpCosts,
           preds: Sequence[Sequence[int]], placements: list[Placement], sim: SimResult,
           bound) -> Schedule:
    """The Schedule record of simulated placements: logical CPUs, edges, bounds.

    Execution order is the simulated start order (ties: the shorter first, then the planned
    order), so that everything later in time is later in order: memory planning's reuse edges
    (one buffer's last use before another's write, in time) then always point forward, and
    every edge the executor waits on names an earlier op."""
    if [c.id for c in target.logical_cpus] != list(range(len(target.logical_cpus))):
        raise ValueError(f"target {target.name!r}: logical CPU ids must be 0..n-1 for a plan")
    names = [n.name for n in graph.nodes]
    # Ops and edges as data, which the Schedule validates in one pass (a ScheduledOp() or
    # Edge() call each cost a third more).
    ops: list[dict] = []
    # The last op on each logical CPU so far (None: none yet).
    last_on: list[str | None] = [None] * len(target.logical_cpus)
    edges: set[tuple[str, str]] = set()
    rank: dict[str, int] = {}
    # Logical CPUs by (cores, slot): the placements repeat a few core sets.
    cpus_of: dict[tuple[tuple[int, ...], bool], tuple[int, ...]] = {}
    timed = sorted(zip(placements, sim.starts, sim.ends, range(len(placements)), strict=True),
                   key=itemgetter(1, 2, 3))
    for p, start, end, _ in timed:
        cpus = cpus_of.get((p.cores, p.smt))
        if cpus is None:
            cpus = cpus_of[p.cores, p.smt] = tuple(sorted(
                target.core_cpus[c][1 if p.smt else 0] for c in p.cores))
        first, last = names[min(p.nodes)], names[max(p.nodes)]
        # Named by what it holds, not when it starts: a re-timed plan keeps its group names
        # (each node is in one placement, so first names are unique).
        group = group_name(p.group, first)
        for v in sorted(p.nodes):
            node = graph.nodes[v]
            deps = tuple(map(names.__getitem__, preds[v]))
            ops.append({"name": node.name, "op": node.op, "cpus": cpus, "threads": p.threads,
                        "affinity": p.affinity, "smt": p.smt, "group": group, "deps": deps,
                        "start": start, "end": end})
            rank[node.name] = len(rank)
            edges.update(zip(deps, repeat(node.name)))
        own = {names[v] for v in p.nodes}
        edges.update((before, first) for before in set(map(last_on.__getitem__, cpus))
                     if before is not None and before not in own)
        for c in cpus:
            last_on[c] = last
    return Schedule(
        backend="cpu", strategy=options.strategy, ops=ops,
        edges=[{"before": a, "after": b}
               for a, b in sorted(edges, key=lambda e: (rank[e[1]], rank[e[0]]))],
        bound=Bound(seconds=bound.seconds, critical_path=bound.critical_path, area=bound.area,
                    allotment=bound.allotment, cut=bound.cut),
        utilization=sim.utilization, mean_corun=sim.mean_corun,
        analytical_signatures=len(costs.analytical))
