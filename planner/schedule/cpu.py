"""`cpu_schedule`: graph + cost model + options -> Schedule on the target's logical CPUs, as
named steps:

    costs      every op's time at every thread count       (costs.op_costs)
    deps       data and in-place dependencies              (deps.predecessors)
    bound      critical path, area, allotment and cut bounds (bound.lower_bound)
    schedule   the strategy's placements, by STRATEGY_TABLE  (uniform, paper, optimized; the
               optimized search, optimized.py, uses the bound's relaxation and keeps each
               candidate's run)
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

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import repeat
from operator import itemgetter

from planner.costs import CostModel
from planner.graph.deps import predecessors
from planner.ir.graph import Graph
from planner.schedule.bound import capacity, lower_bound
from planner.schedule.contention import Contention, simulate_contended
from planner.schedule.costs import OpCosts, op_costs
from planner.schedule.optimized import optimized
from planner.schedule.options import ScheduleOptions
from planner.schedule.paper import paper
from planner.schedule.placement import Placement, in_order
from planner.schedule.record import Bound, Schedule
from planner.schedule.simulate import SimResult, simulate
from planner.schedule.uniform import grid_pairs, uniform
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

    return STRATEGY_TABLE[options.strategy](Candidates(
        graph, costs, preds, options, groups, smt, cores, timed, durations, baselines,
        contention.sigma if contention is not None else 0.0))


@dataclass(frozen=True)
class Candidates:
    """What a strategy places a graph's ops from: the graph, its op costs and dependencies,
    the options, the target's cache groups, SMT and cores, and `timed` (simulates a candidate
    schedule once: (step, placements)); for the optimized search also the relaxation's
    `durations`, whether the baselines compete, and the host's co-running slowdown."""

    graph: Graph
    costs: OpCosts
    preds: Sequence[Sequence[int]]
    options: ScheduleOptions
    groups: tuple[tuple[int, ...], ...]
    smt: bool
    cores: int
    timed: Callable[[list[Placement]], tuple[float, list[Placement]]]
    durations: Sequence[float]
    baselines: bool
    corun_slowdown: float


def uniform_lanes(c: Candidates) -> list[Placement]:
    """TensorFlow's uniform lanes (options.lanes), or the best of its grid (options.grid)."""
    if c.options.grid:
        return min((c.timed(uniform(c.costs, c.preds, c.groups, a, b,
                                    c.options.min_team_seconds))
                    for a, b in grid_pairs(c.cores)), key=lambda r: r[0])[1]
    intra, inter = c.options.lanes(c.cores)
    return in_order(uniform(c.costs, c.preds, c.groups, intra, inter,
                            c.options.min_team_seconds))


def paper_strategies(c: Candidates) -> list[Placement]:
    """Seed 002's Strategies 1-4 (planner.schedule.paper)."""
    return in_order(paper(c.costs, c.preds, [n.op for n in c.graph.nodes], c.groups, c.smt,
                          c.options))


def optimized_search(c: Candidates) -> list[Placement]:
    """The optimized strategy's search (planner.schedule.optimized)."""
    return optimized(c.costs, c.preds, [n.op for n in c.graph.nodes], c.groups, c.smt,
                     c.cores, c.options, c.timed, c.durations, c.baselines, c.corun_slowdown)


# ScheduleOptions.strategy -> what places the ops under it (options.STRATEGIES names them).
STRATEGY_TABLE: dict[str, Callable[[Candidates], list[Placement]]] = {
    "uniform": uniform_lanes,
    "paper": paper_strategies,
    "optimized": optimized_search,
}


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
