"""The budget solver both backends' memory planning share: a stash's state of decisions
(planner.memory.budget.search: modes, moves, the exact live-bytes profile) searched until its
laid-out arena fits the budget, then its convolutions' workspaces, reuse edges and times, and
the MemoryDecision record. The fronts say what differs: planner.memory.gpu (a stream schedule,
device alignment, the library handles, the CUDA kernels' scratch) and planner.memory.cpu_budget
(a CPU schedule's lanes, the CPU kernels' scratch, its own timing).

    decide         while the arena exceeds the budget: the cheapest stop or the best move
                   (budget/search.py); none needed without a budget; InfeasibleBudget naming
                   the smallest feasible budget (`infeasible`) when no state fits
    lay            materialize a state (materialize.py) and place it (layout.py)
    solve          workspaces per convolution (`give_workspaces`), reuse edges (reuse.py),
                   times (`simulate`, or `shared_times` with co-running streams)
    decide_memory  the MemoryDecision of a solved state
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from planner.costs.convalgo import ConvAlgo, fastest_within
from planner.errors import InfeasibleBudget
from planner.ir.graph import Graph
from planner.memory.arena import aligned
from planner.memory.assemble import tensor_plans
from planner.memory.budget.floor import ArenaFloor
from planner.memory.budget.materialize import COPY_STREAMS, NO_SMS, Material, materialize
from planner.memory.budget.search import State, cheapest_stop
from planner.memory.decision import ConvChoice, MemoryDecision, MemoryOp, MemorySummary
from planner.memory.layout import FreeBytes, Layout, place
from planner.memory.liveness import Buffer, live_profile, naive_bytes, per_op_bound
from planner.memory.options import MemoryOptions, format_bytes
from planner.memory.order import HappensBefore
from planner.memory.reuse import reuse_edges
from planner.schedule.gpu_share import (
    busy_seconds,
    issue_times,
    simulate_streams,
)
from planner.schedule.reach import transitive_reduction
from planner.schedule.record import Edge, ScheduledOp
from planner.schedule.streams import ALL_STREAMS

# Buffers a backend's kernels need besides the tensors: per op of a materialized state (graph
# nodes and recomputes alike), e.g. the CPU kernels' scratch areas (planner.memory.cpu_budget).
ExtraBuffers = Callable[[Material], list[Buffer]]


@dataclass
class Placed:
    """A materialized state with offsets (workspaces not yet given)."""

    state: State
    material: Material
    offsets: list[int]
    arena: int
    host: int
    heuristic: str


@dataclass
class Solved:
    """Everything decided, before it becomes records: the state and its layout, with
    workspaces, reuse edges and predicted times, under `budget` bytes (None: no budget)."""

    state: State
    placed: Placed
    buffers: list[Buffer]
    offsets: list[int]
    arena: int
    choice: dict[int, ConvAlgo]
    edges: list[tuple[int, int]]
    reuse: list[tuple[int, int]]
    seconds: list[float]
    start: np.ndarray
    end: np.ndarray
    liveness_load: int
    budget: int | None
    # The order its ops run in, where a backend searches more than one
    # (planner.memory.cpu_budget.ORDERS; "": the stream's).
    order: str = ""

    @property
    def step_seconds(self) -> float:
        return float(self.end.max()) if len(self.end) else 0.0


def solve(state: State, placed: Placed, options: MemoryOptions, liveness_load: int) -> Solved:
    """Workspaces, reuse edges and times of a placed state."""
    m = placed.material
    buffers, offsets, arena, choice = give_workspaces(placed, state, options)
    hb = HappensBefore(len(m.ops), m.edges)
    extra = reuse_edges(buffers, offsets, hb)
    edges = sorted(set(m.edges) | set(extra))
    seconds = [choice[i].seconds if i in choice else o.seconds for i, o in enumerate(m.ops)]
    steps = state.stash.steps
    if steps.stream and steps.occupancy:
        # Several GPU streams: an event only where no other path orders the two ops, and
        # kernels timed as they share the SMs and the bandwidth. (A CPU plan's lanes, its
        # comm lane too, run as their edges order them: `simulate`.)
        chain = stream_chains(m)
        edges = transitive_reduction(len(m.ops), set(edges) | chain, keep=chain)
        start, end = shared_times(m, seconds, edges, steps, steps.bandwidth)
    else:
        start, end = simulate(m, seconds, edges)
    return Solved(state, placed, buffers, offsets, arena, choice, edges, extra, seconds, start,
                  end, liveness_load, options.budget_bytes)


def decide(state: State, options: MemoryOptions, extra: ExtraBuffers | None = None) -> Placed:
    """Apply moves until the laid-out arena fits the budget (at once without one); `extra`
    adds the buffers the ops' kernels need besides the tensors."""
    budget = options.budget_bytes
    if budget is None:
        return lay(state, options, extra)
    loads: list[int] = []
    # The layout of the state `fits` saw last: cheapest_stop returns right after a fit.
    last: list[Placed] = []
    floor = ArenaFloor(state.stash, extra, options.alignment)

    def fits(s: State) -> bool:
        if floor.above(s, budget):  # cannot fit: no layout needed (planner.memory.budget.floor)
            return False
        placed = lay(s, options, extra, limit=budget)
        last[:] = [placed] if placed is not None else []
        return placed is not None

    while True:
        loads.append(state.load())
        stop = cheapest_stop(state, budget, fits)
        if stop is not None:
            assert last and last[0].state is stop
            return last[0]
        move = state.best_move()
        if move is None:
            if not options.infeasible_probes:
                low = min(loads)
                raise InfeasibleBudget(f"memory budget {format_bytes(budget or 0)} is "
                                       f"infeasible: the smallest feasible budget is at least "
                                       f"{low} bytes ({format_bytes(low)})", low)
            raise infeasible(state, options, loads, extra)
        state.apply(move)


def lay(state: State, options: MemoryOptions, extra: ExtraBuffers | None = None,
        limit: int | None = None) -> Placed | None:
    """Materialize and place a state. Under a budget this runs inside the search over states,
    so the seeded multi-start heuristic and the skyline ones (the slowest) are left out there.
    With `limit`: None when the arena would exceed it (the heuristics stop early)."""
    m = materialize(state)
    if extra is not None:
        m.buffers = m.buffers + extra(m)
    heuristics = options.heuristics
    if options.budget_bytes is not None:
        heuristics = tuple(h for h in heuristics if h != "perturbed-size"
                           and not h.startswith("skyline-")) or heuristics
    placed = place(m.buffers, options.alignment, heuristics, limit=limit)
    if placed is None:
        return None
    offsets, arena, host, heuristic = placed
    return Placed(state, m, offsets, arena, host, heuristic)


def infeasible(state: State, options: MemoryOptions, loads: list[int],
               extra: ExtraBuffers | None = None) -> InfeasibleBudget:
    """The error for a budget no state fits: the smallest arena among the states visited
    (laid out in order of their LOAD, a lower bound on their arena, until none can win)."""
    moves = list(state.log)
    best = None
    floor = ArenaFloor(state.stash, extra, options.alignment)
    for k in sorted(range(len(loads)), key=lambda k: (loads[k], -k))[:options.infeasible_probes]:
        if best is not None and loads[k] >= best:
            break
        probe = State(state.stash, state.bandwidth, state.allow_offload,
                      state.allow_recompute, state.host_limit, state.overlapped)
        probe.replay(moves[:k])
        if best is not None and floor(probe) >= best:
            continue  # its arena cannot be smaller
        placed = lay(probe, options, extra, limit=None if best is None else best - 1)
        if placed is not None:
            best = placed.arena
    assert best is not None
    budget = options.budget_bytes or 0
    return InfeasibleBudget(
        f"memory budget {format_bytes(budget)} ({budget} bytes) is infeasible for "
        f"{state.stash.steps.graph.name!r}: even with every offload and recompute the peak "
        f"stays above it; the smallest feasible budget is {best} bytes ({format_bytes(best)})",
        best)


def give_workspaces(placed: Placed, state: State, options: MemoryOptions
                    ) -> tuple[list[Buffer], list[int], int, dict[int, ConvAlgo]]:
    """Per convolution, the fastest algorithm whose workspace fits the free bytes at its key,
    placed there; returns the buffers and offsets with workspaces, the arena, the choices."""
    m = placed.material
    budget = options.budget_bytes
    steps = state.stash.steps
    if budget is None:
        return _unbounded_workspaces(placed, state, options)
    buffers, offsets = list(m.buffers), list(placed.offsets)
    arena = placed.arena
    choice: dict[int, ConvAlgo] = {}
    convs = [i for i, o in enumerate(m.ops) if o.kind == "node" and steps.algos[o.step]]
    needy = sorted(convs)  # the kernels' own scratch is laid out already (kernel_scratch)
    # A convolution's least workspace, reserved in the layout (planner.memory.gpu.kernel_scratch)
    conv_ops = frozenset(convs)
    reserved = {b.first: k for k, b in enumerate(buffers)
                if b.kind == "workspace" and b.first in conv_ops}
    free = FreeBytes(m.buffers, placed.offsets, options.alignment)
    for i, (gap_lo, gap_hi, top) in zip(needy, free.sweep([m.ops[i].key for i in needy]),
                                        strict=True):
        o = m.ops[i]
        algos = list(steps.algos[o.step])
        room = int((gap_hi - gap_lo).max(initial=0))
        held = buffers[reserved[i]].bytes if i in reserved else 0
        limit = max(room, budget - top, held) if options.workspaces else held
        algo = fastest_within(algos, limit)
        choice[i] = algo
        nbytes = algo.workspace_bytes
        if nbytes == 0 or nbytes <= held:
            if i in reserved:  # its reserved place, as large as what the algorithm needs
                buffers[reserved[i]] = replace(buffers[reserved[i]], bytes=nbytes)
            continue
        size = aligned(nbytes, options.alignment)
        # The smallest gap that holds it (the lowest among equals), else above the live ones.
        width = gap_hi - gap_lo
        fitting = np.nonzero(width >= size)[0]
        offset = int(gap_lo[fitting[np.lexsort((gap_lo[fitting], width[fitting]))[0]]]) \
            if len(fitting) else top
        if i in reserved:  # outgrew its reserved place: that place is left empty
            buffers[reserved[i]] = Buffer(f"{o.name}@workspace", "", nbytes, o.key, o.key + 1,
                                          i, i, i, (i,), "workspace")
            offsets[reserved[i]] = offset
        else:
            buffers.append(Buffer(f"{o.name}@workspace", "", nbytes, o.key,
                                  o.key + 1, i, i, i, (i,), "workspace"))
            offsets.append(offset)
        arena = max(arena, offset + size)
    if arena > budget:
        raise InfeasibleBudget(
            f"memory budget {format_bytes(budget)} ({budget} bytes) is infeasible for "
            f"{steps.graph.name!r}: its convolutions' workspaces need {arena} bytes "
            f"({format_bytes(arena)})", arena)
    return buffers, offsets, arena, choice


def least_workspace_ops(m: Material, steps) -> list[tuple[int, int]]:
    """(op, bytes): each convolution's least workspace over its algorithms; no plan runs it
    with less (a low-type gradient has no zero-workspace algorithm: planner.costs.convalgo)."""
    return [(i, min(a.workspace_bytes for a in steps.algos[o.step]))
            for i, o in enumerate(m.ops) if o.kind == "node" and steps.algos[o.step]]


def _unbounded_workspaces(placed: Placed, state: State, options: MemoryOptions
                          ) -> tuple[list[Buffer], list[int], int, dict[int, ConvAlgo]]:
    """Without a budget: every convolution's fastest algorithm, its workspace laid out with
    the other buffers by the allocation heuristics."""
    m = placed.material
    steps = state.stash.steps
    choice = {i: fastest_within(list(steps.algos[o.step]), None if options.workspaces else 0)
              for i, o in enumerate(m.ops) if o.kind == "node" and steps.algos[o.step]}
    need = {i: a.workspace_bytes for i, a in choice.items()}
    # (the least workspaces reserved in the layout are replaced by the ones chosen)
    buffers = [b for b in m.buffers if not (b.kind == "workspace" and b.first in choice)] + [
        Buffer(f"{m.ops[i].name}@workspace", "", nbytes, m.ops[i].key,
               m.ops[i].key + 1, i, i, i, (i,), "workspace")
        for i, nbytes in sorted(need.items()) if nbytes]
    offsets, arena, _, _ = place(buffers, options.alignment, options.heuristics)
    return buffers, offsets, arena, choice


def simulate(m: Material, seconds: list[float], edges: list[tuple[int, int]]
             ) -> tuple[np.ndarray, np.ndarray]:
    """Start and end of every op: after its incoming edges' sources end, `m.handoff` later
    for a source on another lane (ops are numbered in a topological order of the edges)."""
    preds: list[list[int]] = [[] for _ in m.ops]
    for u, w in edges:
        preds[w].append(u)
    start = np.zeros(len(m.ops))
    end = np.zeros(len(m.ops))
    lane, handoff = [o.lane for o in m.ops], m.handoff
    for i in range(len(m.ops)):
        start[i] = max((end[u] + handoff if handoff and lane[u] != lane[i] else end[u]
                        for u in preds[i]), default=0.0)
        end[i] = start[i] + seconds[i]
    return start, end


def stream_chains(m: Material) -> set[tuple[int, int]]:
    """Each stream's consecutive ops, as edges (the stream orders them without an event)."""
    chain: set[tuple[int, int]] = set()
    last: dict[int, int] = {}
    for i, o in enumerate(m.ops):
        if o.stream in last:
            chain.add((last[o.stream], i))
        last[o.stream] = i
    return chain


def shared_times(m: Material, seconds: list[float], edges: list[tuple[int, int]], steps,
                 bandwidth: float) -> tuple[np.ndarray, np.ndarray]:
    """Start and end of every op with kernels on several compute streams sharing the SMs and
    bandwidth (planner.schedule.gpu_share); copies use neither."""
    into: list[list[int]] = [[] for _ in m.ops]
    for u, w in edges:
        into[w].append(u)
    occ = [0.0 if o.stream in NO_SMS else steps.occupancy[o.step] for o in m.ops]
    demand = [0.0 if o.stream in NO_SMS or s <= 0 else steps.moved[o.step] / s
              for o, s in zip(m.ops, seconds, strict=True)]
    run = simulate_streams(seconds, into, occ, demand, bandwidth,
                           issue_times([o.stream for o in m.ops], edges))
    return np.array(run.start), np.array(run.end)


def decide_memory(graph: Graph, solved: Solved) -> MemoryDecision:
    """The MemoryDecision of a solved state: ops on their streams, re-timed; buffers; the
    inserted ops; each convolution's choice; the summary."""
    state, placed, m = solved.state, solved.placed, solved.placed.material
    buffers, offsets, arena, choice = solved.buffers, solved.offsets, solved.arena, solved.choice
    extra, edges, seconds = solved.reuse, solved.edges, solved.seconds
    start, end, liveness_load = solved.start, solved.end, solved.liveness_load
    layout = Layout(tuple(offsets), arena, placed.host, placed.heuristic, tuple(extra))
    names = [o.name for o in m.ops]
    blocks = state.stash.steps.blocks
    ops = tuple(ScheduledOp(name=o.name, op=o.op, stream=ALL_STREAMS[o.stream],
                            deps=tuple(names[d] for d in m.deps[i]),
                            block=blocks[o.step] if blocks and o.step >= 0 else 0,
                            start=float(start[i]), end=float(end[i]))
                for i, o in enumerate(m.ops))
    step = float(end.max()) if len(end) else 0.0
    gpu = bool(state.stash.steps.occupancy)
    # The work: a GPU's compute stream; on a CPU every op but the copies (the collectives
    # on its comm lane too), and no stall without copies (as planner.verify.summary counts).
    compute = [i for i, o in enumerate(m.ops)
               if o.stream == 0 or not gpu and o.stream not in COPY_STREAMS]
    busy = float(sum(seconds[i] for i in compute))
    if not gpu and not any(o.stream in COPY_STREAMS for o in m.ops):
        busy = max(busy, step)
    if gpu and state.stash.steps.stream:  # co-running: the time some compute stream is busy
        busy = busy_seconds((float(start[i]), float(end[i])) for i, o in enumerate(m.ops)
                            if o.stream not in NO_SMS)
    recompute = [i for i, o in enumerate(m.ops) if o.kind == "recompute"]
    copies = [o for o in m.ops if o.kind == "offload"]
    load = int(live_profile(buffers)[1].max())
    memory = MemorySummary(
        naive_bytes=naive_bytes([b for b in buffers if b.kind not in (
            "workspace", "recompute", "scratch", "prefetch", "host")]),
        load_bytes=load, arena_bytes=arena, fragmentation=arena / load - 1 if load else 0.0,
        peak_bytes=arena, per_op_bound_bytes=per_op_bound(graph, {
            m.ops[i].name: n for i, n in least_workspace_ops(m, state.stash.steps)}),
        resident_bytes=state.stash.persistent_bytes, liveness_load_bytes=liveness_load,
        budget_bytes=solved.budget, host_bytes=placed.host, allocator=placed.heuristic,
        recompute_ops=len(recompute), recompute_seconds=float(sum(seconds[i] for i in recompute)),
        offloaded_tensors=len(copies), transfer_bytes=2 * sum(
            state.stash.uses[o.tensor].bytes for o in copies),
        stall_seconds=max(0.0, step - busy), reuse_edges=len(extra))
    return MemoryDecision(
        tensors=tensor_plans(buffers, layout, ops), summary=memory, ops=ops,
        inserted=tuple(_memory_op(o) for o in m.ops if o.kind != "node"),
        convs=tuple(ConvChoice(node=m.ops[i].name, algorithm=a.algorithm,
                               workspace_bytes=a.workspace_bytes, seconds=a.seconds,
                               source=a.source) for i, a in sorted(choice.items())),
        edges=tuple(Edge(before=names[u], after=names[w])
                    for u, w in sorted(edges, key=lambda e: (e[1], e[0]))))


def _memory_op(o) -> MemoryOp:
    node = o.name.split("/", 1)[1].rsplit("/", 1)[0] if o.kind == "recompute" else ""
    return MemoryOp(name=o.name, kind=o.kind, node=node, inputs=tuple(o.reads),
                    outputs=tuple(o.writes))
