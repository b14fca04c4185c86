"""CPU memory planning under a budget the liveness layout does not meet: the GPU pass's
decisions (planner.memory.gpu: cost-aware recompute segments first where they are cheap,
offload to a host store where recompute cannot reach the budget) on the CPU schedule's op
order, carried out by the CPU executor's lanes.

    steps        the schedule's ops in plan order, each at its scheduled time, in the
                 lanes' own order or with updates moved up as on a stream (`cpu_steps`)
    decide       stash, moves and layout as on a GPU, with every op's kernel scratch area
                 (driver.scratch_buffers' rule, at the op's thread count) laid out with it:
                 a recompute of a node gets a scratch area of its own too; an offload
                 costs the full time of both its copies (nothing runs beside a copy
                 that takes a core; planner.memory.budget.search)
    lanes        in the materialized order (a topological order), every op on its planned
                 CPUs: a graph node keeps its CPUs, thread count and smt mark (a recompute
                 runs its node's kernel at the same thread count, so it writes the same
                 bits), a transfer runs on one thread of the first CPU. Ops on other CPUs
                 run at the same time where their data and the arena's reuse allow
                 (`lane_edges`, then the reuse edges): the schedule's co-running lanes are
                 kept, its parallel-loop groups are not (their ops run one after another).
                 On a CPU a copy takes a core like any op, so none is hidden. Where the
                 arena's reuse orders the lanes' few-thread ops one after another, every op
                 on all threads may be faster: planner.pipeline plans both and keeps the
                 lanes unless the one-lane plan is min_gain faster (or alone fits).
    orders       the search runs in the lanes' own order and with updates moved up
                 (ORDERS), and keeps the faster plan that fits

The host store is a separate allocation (placement "host", offsets in
MemorySummary.host_bytes); the arena alone is what the budget bounds.

Example:
    >>> from planner.costs import CostModel
    >>> from planner.frontend.autodiff import Optimizer, make_training_graph
    >>> from planner.memory.cpu_memory import cpu_memory
    >>> from planner.schedule import ScheduleOptions, cpu_schedule
    >>> from planner.target import preset
    >>> from planner.zoo import build
    >>> g = make_training_graph(build("lenet", batch=8, image=32), Optimizer(kind="sgd"))
    >>> model = CostModel(preset("xeon-8180"))
    >>> s = cpu_schedule(g, model, ScheduleOptions(strategy="paper"))
    >>> free = cpu_memory(g, s, model).summary
    >>> budget = free.per_op_bound_bytes + (free.arena_bytes - free.per_op_bound_bytes) // 2
    >>> d = cpu_memory(g, s, model, MemoryOptions(budget_bytes=budget))
    >>> d.summary.arena_bytes <= budget < free.arena_bytes
    True
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np

from planner.costs import CostModel
from planner.costs.records import CostTable
from planner.costs.signature import graph_signatures
from planner.errors import InfeasibleBudget
from planner.ir.graph import Graph
from planner.ir.phases import node_phase
from planner.memory.arena import CPU_FIRST
from planner.memory.budget.materialize import Material
from planner.memory.budget.search import Move, State
from planner.memory.budget.solver import (
    Placed,
    Solved,
    decide,
    decide_memory,
    lay,
    simulate,
    solve,
)
from planner.memory.decision import MemoryDecision
from planner.memory.layout import place
from planner.memory.liveness import Buffer, per_op_bound
from planner.memory.options import MemoryOptions
from planner.memory.pins import apply_pins, meet_regions
from planner.memory.scratch import kernel_scratch
from planner.memory.stash import analyze
from planner.ops.base import TensorType
from planner.schedule.cpu import measured_handoff
from planner.schedule.record import Schedule, ScheduledOp
from planner.schedule.streams import ALL_STREAMS, COMM_STREAM, ComputeSteps, stream_order

# The orders a CPU plan's ops may run in under a budget (`cpu_steps`): the lanes' own, as
# the schedule timed them, or each update moved up to right after its gradient (less memory:
# gradients never all live at once, but a lane then waits for the update another lane's op
# was scheduled beside: ResNet-18's co-running step is 44% longer so, with nothing
# recomputed). The search runs in both and keeps the faster plan that fits.
ORDERS = ("schedule", "stream")
# A data-parallel plan's collectives run on the comm lane (planner.schedule.parallel), one at
# a time, beside the CPUs' lanes: the comm stream's index in a materialized op's `stream`.
COMM_INDEX = ALL_STREAMS.index(COMM_STREAM)


def cpu_budget_memory(graph: Graph, schedule: Schedule, model: CostModel,
                      options: MemoryOptions) -> MemoryDecision:
    """The memory decision of a CPU schedule under options.budget_bytes (module docstring).
    Raises InfeasibleBudget naming the smallest feasible budget."""
    solved, where = cpu_budget_solve(graph, schedule, model, options)
    d = decide_memory(graph, solved)
    ops = [ScheduledOp(name=o.name, op=o.op, deps=o.deps, start=o.start, end=o.end, **at)
           for o, at in zip(d.ops, where, strict=True)]
    m = solved.placed.material
    workspace = {b.name.removesuffix("@scratch"): b.bytes for b in m.buffers
                 if b.kind == "scratch" and not b.tensor}
    summary = d.summary.model_copy(update={
        "per_op_bound_bytes": per_op_bound(graph, workspace)})
    # These ops and edges replace the schedule's (planner.pipeline.assemble): the serial order
    # moves updates past the lanes' order.
    return d.model_copy(update={"ops": tuple(ops), "summary": summary})


def cpu_budget_solve(graph: Graph, schedule: Schedule, model: CostModel,
                     options: MemoryOptions, moves: list[Move] | None = None,
                     order: str | None = None) -> tuple[Solved, list[dict]]:
    """Everything cpu_budget_memory decides, before it becomes records, and where each op
    runs (its CPUs, threads). `moves`: these decisions instead of the search's (in order;
    laid out without the budget's limit), what `planner explain` replays without one, in
    `order` (the solved plan's `Solved.order`). Without an order, the search runs in each
    of ORDERS and keeps the faster plan that fits (the first of equals): the cheapest way to
    the budget, recomputes and offloads chosen with the order the lanes run in."""
    if order is not None:
        return _solve_in(graph, schedule, model, options, moves, order)
    if moves is not None:  # decisions of one order's stash mean nothing in another's
        raise ValueError("replayed decisions need the order they were taken in")
    found, refused = [], []
    for name in ORDERS:
        try:
            found.append(_solve_in(graph, schedule, model, options, moves, name))
        except InfeasibleBudget as e:
            refused.append(e)
    if not found:  # the smaller of the smallest feasible budgets: one order meets it
        raise min(refused, key=lambda e: e.smallest_bytes)
    return min(found, key=lambda f: f[0].step_seconds)


def _solve_in(graph: Graph, schedule: Schedule, model: CostModel, options: MemoryOptions,
              moves: list[Move] | None, order: str) -> tuple[Solved, list[dict]]:
    """cpu_budget_solve in one of ORDERS."""
    placed_on = {o.name: o for o in schedule.ops}
    steps = cpu_steps(graph, schedule, moved_up=order == "stream")
    stash = analyze(steps, "cost-aware" if options.recompute == "off" else options.recompute,
                    options.recompute_products)
    # A copy to the host store is a memcpy on one core; it takes that core (not overlapped).
    state = State(stash, model.target.cpu.core_bandwidth, offload=options.offload,
                  recompute=options.recompute != "off", overlapped=False)
    liveness_load = state.load()

    def scratch(m: Material) -> list[Buffer]:
        return op_scratch(steps, m, placed_on, model.table)

    if moves is None:
        apply_pins(state, options.pins)
        meet_regions(state, options.region_budgets)
        placed = decide(state, options, scratch)
    else:
        state.replay(moves)
        # The search's heuristics, no limit: without a decision the budget may not be met.
        placed = lay(state, options, scratch)
    first_cpu = min(c for o in schedule.ops for c in o.cpus)
    core_of = {c.id: c.core for c in model.target.logical_cpus}

    def where_of(m: Material) -> list[dict]:
        return op_places(m, steps, placed_on, first_cpu)

    def on_lanes(p: Placed) -> tuple[Placed, bool]:
        # Timed as the lanes run them (an op handed over from another lane waits to be
        # woken), then laid out over those times where that fits (`timed_layout`).
        m = p.material
        where = where_of(m)
        m.edges = sorted(set(lane_edges(m, where, core_of)) | issued_behind(m, schedule))
        for spec, at in zip(m.ops, where, strict=True):
            spec.lane = min(at["cpus"]) if "cpus" in at else -1 - COMM_INDEX
        m.handoff = measured_handoff(model)
        timed = timed_layout(p, options)
        return timed or p, timed is not None

    placed, timed = on_lanes(placed)
    if moves is not None:  # nothing to refuse: the replay is a what-if
        solved = solve(placed.state, placed, options.model_copy(update={"budget_bytes": None}),
                       liveness_load)
    else:
        solved = solve(placed.state, placed, options, liveness_load)
        # The keys' layout shares bytes between ops of different lanes, and its reuse edges
        # then order them: a few more recomputes may cost less than those waits.
        more = None if timed or options.budget_bytes is None else \
            _timed_with_more_moves(placed.state, options, scratch, on_lanes)
        if more is not None:
            other = solve(more.state, more, options, liveness_load)
            if other.step_seconds < solved.step_seconds:
                solved = other
    solved.order = order
    return solved, where_of(solved.placed.material)


def op_places(m: Material, steps: ComputeSteps, placed_on: dict[str, ScheduledOp],
              first_cpu: int) -> list[dict]:
    """Where each op of `m` runs: a node, or its recompute, on its scheduled CPUs, threads,
    affinity and smt mark; a transfer on one thread of the first CPU."""
    out = []
    for spec in m.ops:
        at = placed_on.get(steps.nodes[spec.step].name) if spec.step >= 0 else None
        if at is not None and at.stream:  # a collective, on its lane as scheduled
            out.append({"stream": at.stream, "prefetch": at.prefetch})
            continue
        out.append({"cpus": at.cpus, "threads": at.threads, "affinity": at.affinity,
                    "smt": at.smt} if at is not None else {"cpus": (first_cpu,), "threads": 1})
    return out


# Rounds of `_timed_with_more_moves`, each applying twice as many moves as the one before.
MORE_ROUNDS = 8


def _timed_with_more_moves(state: State, options: MemoryOptions,
                           scratch: Callable[[Material], list[Buffer]],
                           on_lanes: Callable[[Placed], tuple[Placed, bool]]) -> Placed | None:
    """The search's state with more of its moves (1, 2, 4, ... more: the search's own next
    ones) until its layout over the lanes' times fits the budget, so that no reuse edge
    delays a lane; None when the moves or MORE_ROUNDS run out first."""
    probe = State(state.stash, state.bandwidth, state.allow_offload, state.allow_recompute,
                  state.host_limit, state.overlapped)
    probe.replay(list(state.log))
    batch = 1
    for _ in range(MORE_ROUNDS):
        for _ in range(batch):
            move = probe.best_move()
            if move is None:
                return None
            probe.apply(move)
        placed = lay(probe, options, scratch)
        if placed is not None:
            placed, timed = on_lanes(placed)
            if timed:
                return placed
        batch *= 2
    return None


def timed_layout(placed: Placed, options: MemoryOptions) -> Placed | None:
    """The decided state laid out over the times its ops run at on their lanes (ordered by
    `m.edges` alone) rather than over keys, as an unconstrained CPU plan is: buffers of ops
    that co-run never share bytes, so sharing needs no edge that would delay an op (each
    reuse edge joins ops that run one after the other already). None when that arena exceeds
    the budget: the keys' layout stands, and its reuse edges order what it shares."""
    m = placed.material
    n = len(m.ops)
    start, end = simulate(m, [o.seconds for o in m.ops], m.edges)
    before, after = float(start.min(initial=0.0)) - 1.0, float(end.max(initial=0.0)) + 1.0
    timed = []
    for b in m.buffers:
        touch = list(b.accessors)
        first = before if b.first < 0 or not touch else min(float(start[i]) for i in touch)
        last = after if b.last >= n or not touch else max(float(end[i]) for i in touch)
        timed.append(replace(b, start=first, end=max(last, float(np.nextafter(first, np.inf)))))
    heuristics = tuple(h for h in options.heuristics if h != "perturbed-size") \
        or options.heuristics
    got = place(timed, options.alignment, heuristics, CPU_FIRST, limit=options.budget_bytes)
    if got is None:
        return None
    offsets, arena, host, heuristic = got
    # Execution order by start time: every edge, reuse ones too, then goes forward in it.
    order = sorted(range(n), key=lambda i: (float(start[i]), float(end[i]), i))
    return Placed(placed.state, renumbered(replace(m, buffers=timed), order), offsets, arena,
                  host, heuristic)


def renumbered(m: Material, order: list[int]) -> Material:
    """`m` with its ops in `order` (old indices), every index into them renumbered; a
    buffer's first and last op are its accessors' earliest and latest in the new order."""
    n = len(m.ops)
    at = [0] * n
    for k, i in enumerate(order):
        at[i] = k
    buffers = []
    for b in m.buffers:
        touch = [at[i] for i in b.accessors]
        first = b.first if b.first < 0 or not touch else min(touch)
        last = b.last if b.last >= n or not touch else max(touch)
        buffers.append(replace(b, first=first, last=last,
                               writer=at[b.writer] if b.writer >= 0 else b.writer,
                               readers=tuple(at[r] for r in b.readers),
                               extra=tuple(at[x] for x in b.extra)))
    return replace(m, ops=[m.ops[i] for i in order], buffers=buffers,
                   edges=sorted((at[u], at[w]) for u, w in m.edges),
                   deps=[sorted(at[d] for d in m.deps[i]) for i in order])


def issued_behind(m: Material, schedule: Schedule) -> set[tuple[int, int]]:
    """The schedule's edges into its collectives from the compute ops they are issued behind
    (a ZeRO-3 all-gather's prefetch depth, planner.schedule.parallel.issue_point), between
    `m`'s graph nodes: with them a gather starts where the schedule issues it, not as soon as
    the comm lane is free (its copy would then be held from there)."""
    at = {o.name: i for i, o in enumerate(m.ops) if o.kind == "node"}
    comm = {o.name for o in schedule.ops if o.stream}
    return {(at[e.before], at[e.after]) for e in schedule.edges
            if e.after in comm and e.before in at and e.after in at
            and at[e.before] < at[e.after]}


def lane_edges(m: Material, where: list[dict], core_of: dict[int, int]
               ) -> list[tuple[int, int]]:
    """The ordering edges of `m` on CPUs: its data, in-place and transfer edges (not the
    compute stream's chain: ops on other CPUs may run at the same time, as the schedule's
    lanes ran them), and on every logical CPU, and every physical core of an op not marked
    smt, each op after the previous one using it (ops never share a CPU at once, nor a core
    unless one is marked smt), and on the comm lane each collective after the previous one.
    Memory reuse between ops that may now co-run is ordered by the reuse edges `solve` adds
    over these."""
    transfer = [o.kind in ("offload", "prefetch") for o in m.ops]
    edges = {(u, w) for u, w in m.edges if transfer[u] or transfer[w]}
    edges |= {(d, i) for i, ds in enumerate(m.deps) for d in ds}
    last: dict[tuple[str, int | str], int] = {}
    for i, at in enumerate(where):
        if "stream" in at:  # a collective: after the previous one on its lane
            keys: list[tuple[str, int | str]] = [("stream", at["stream"])]
        else:
            keys = [("cpu", c) for c in at["cpus"]]
        if not at.get("smt") and "cpus" in at:
            keys += [("core", core_of.get(c, -1 - c)) for c in at["cpus"]]
        for k in keys:
            if k in last:
                edges.add((last[k], i))
            last[k] = i
    return sorted(e for e in edges if e[0] != e[1])


def cpu_steps(graph: Graph, schedule: Schedule, moved_up: bool = True) -> ComputeSteps:
    """The schedule's ops in plan order, each at its scheduled time; `moved_up`: each update
    moved up to right after its last predecessor (as on a stream: gradients then never all
    live at once). A data-parallel schedule's collectives keep their comm lane
    (ComputeSteps.stream: the comm stream's index, every other op's 0)."""
    names = [o.name for o in schedule.ops]
    where = {n.name: i for i, n in enumerate(graph.nodes)}
    order = stream_order(graph, names) if moved_up else [where[n] for n in names]
    seconds = {o.name: o.end - o.start for o in schedule.ops}
    nodes = tuple(graph.nodes[i] for i in order)
    comm = {o.name for o in schedule.ops if o.stream == COMM_STREAM}
    return ComputeSteps(graph=graph, nodes=nodes,
                        phase=tuple(node_phase(graph, n) for n in nodes),
                        algos=tuple(() for _ in nodes),
                        seconds=np.array([seconds[n.name] for n in nodes], dtype=float),
                        analytical=0,
                        stream=tuple(COMM_INDEX if n.name in comm else 0 for n in nodes)
                        if comm else ())


def op_scratch(steps: ComputeSteps, m: Material, placed_on: dict[str, ScheduledOp],
               table: CostTable | None = None) -> list[Buffer]:
    """`<op>@scratch` for every node and recompute of `m` whose CPU kernel needs scratch at
    its node's planned thread count, live while it runs (as driver.scratch_buffers)."""
    graph = steps.graph
    signatures = graph_signatures(graph)
    out = []
    for i, o in enumerate(m.ops):
        if o.kind not in ("node", "recompute"):
            continue
        node = steps.nodes[o.step]
        ins = [TensorType(graph.tensor(t).shape, graph.tensor(t).dtype) for t in node.inputs]
        outs = [TensorType(graph.tensor(t).shape, graph.tensor(t).dtype) for t in node.outputs]
        nbytes = kernel_scratch(node, ins, outs, placed_on[node.name].threads, table,
                                signatures.get(node.name))
        if nbytes > 0:
            out.append(Buffer(f"{o.name}@scratch", "", nbytes, o.key, o.key + 1, i, i, i, (i,),
                              "scratch"))
    return out
