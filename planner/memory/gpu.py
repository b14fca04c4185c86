"""GPU memory planning: a stream schedule's buffers, under a budget with offloads to the host,
recomputes and per-convolution workspaces, on the schedule's compute stream(s) and two copy
streams. With co-running compute streams (planner.schedule.gpu_streams) each node keeps its
stream and the schedule's order; lifetimes are still positions in that order, and reuse of
bytes between ops on different streams gets the happens-before edge it needs (reuse.py), the
edges are transitively reduced, and the step is timed with the kernels sharing the SMs
(planner.schedule.gpu_share).

`gpu_memory(graph, schedule, model, options)` is the whole pass, as named steps:

    steps        the schedule's compute order, priced per conv algorithm
                 (planner.schedule.streams.compute_steps)
    stash        checkpoints and recompute segments (stash.py)
    decide       while the arena exceeds the budget: the cheapest offload or recompute at
                 the live-bytes peak (budget_search.py); none needed without a budget
    materialize  ops, buffers and ordering edges of the decisions (materialize.py)
    place        offsets by the allocation heuristics (layout.py)
    workspaces   per convolution, the fastest algorithm whose workspace fits the free bytes
                 at its step (the widest gap there, or the room above the live buffers up to
                 the budget), placed there
    time         when every op starts and ends, waiting on copies where they are late
    decide       the MemoryDecision: the re-timed ops on their streams, the buffers, the
                 inserted ops, the convolution choices, the memory summary

A budget holds the arena and what the executor keeps outside it: each kernel stream's library
handles (GPU.library_bytes, library_bytes here), so the arena is planned to the rest. An
infeasible budget raises InfeasibleBudget naming the smallest budget that fits, handles
included.

Example:
    >>> from planner.costs import CostModel
    >>> from planner.graph.autodiff import Optimizer, make_training_graph
    >>> from planner.schedule.streams import stream_schedule
    >>> from planner.target import preset
    >>> from planner.zoo import build
    >>> g = make_training_graph(build("alexnet", batch=8, image=63, classes=4),
    ...                         Optimizer(kind="sgd"))
    >>> model = CostModel(preset("k40c-12gb"))
    >>> s = stream_schedule(g, model)
    >>> free = gpu_memory(g, s, model, MemoryOptions()).summary
    >>> arena = (free.per_op_bound_bytes + free.liveness_load_bytes) // 2
    >>> budget = arena + library_bytes(model.target.gpus[0], s)  # the handles' share too
    >>> tight = gpu_memory(g, s, model, MemoryOptions(budget_bytes=budget)).summary
    >>> tight.arena_bytes <= arena < free.liveness_load_bytes, tight.offloaded_tensors > 0
    (True, True)
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from planner.costs import CostModel
from planner.costs.convalgo import ConvAlgo, fastest_within
from planner.errors import InfeasibleBudget
from planner.graph.ir import Graph
from planner.memory.arena import aligned
from planner.memory.assemble import tensor_plans
from planner.memory.budget_search import State, cheapest_stop
from planner.memory.decision import ConvChoice, MemoryDecision, MemoryOp, MemorySummary
from planner.memory.floor import ArenaFloor
from planner.memory.layout import FreeBytes, Layout, place
from planner.memory.liveness import Buffer, live_profile, naive_bytes, per_op_bound
from planner.memory.materialize import NO_SMS, Material, materialize
from planner.memory.options import MemoryOptions, format_bytes
from planner.memory.order import HappensBefore
from planner.memory.pins import apply_pins, meet_regions
from planner.memory.reuse import reuse_edges
from planner.memory.stash import analyze
from planner.schedule.gpu_share import (
    busy_seconds,
    issue_times,
    simulate_streams,
)
from planner.schedule.reach import transitive_reduction
from planner.schedule.record import Edge, Schedule, ScheduledOp
from planner.schedule.streams import ALL_STREAMS, COMM_STREAM, compute_steps, is_compute

# cuDNN workspaces and the CUDA kernels' scratch are promised 256-byte alignment
# (templates/cuda/runtime/kernel.h), as cudaMalloc gives it: every device offset is a multiple.
DEVICE_ALIGNMENT = 256


def device_aligned(options: MemoryOptions) -> MemoryOptions:
    """`options` with its alignment a multiple of DEVICE_ALIGNMENT.

    >>> [device_aligned(MemoryOptions(alignment=a)).alignment for a in (64, 512, 3)]
    [256, 512, 768]
    """
    if options.alignment % DEVICE_ALIGNMENT == 0:
        return options
    return options.model_copy(update={"alignment": math.lcm(options.alignment, DEVICE_ALIGNMENT)})


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


def gpu_memory(graph: Graph, schedule: Schedule, model: CostModel,
               options: MemoryOptions) -> MemoryDecision:
    """The memory decision of a stream schedule on the model's GPU (module docstring)."""
    order, streams, joins = compute_order(schedule), None, ()
    comm = {op.name: op.end - op.start for op in schedule.ops if op.stream == COMM_STREAM}
    if len({op.stream for op in schedule.ops if is_compute(op.stream)}) > 1 or comm:
        # Co-running streams, or all-reduces on the comm stream: each node keeps its stream,
        # the order is kept as it is (a data-parallel plan's updates wait after backward,
        # planner.schedule.parallel.comm_lane), and the schedule's edges between compute
        # streams hold (its joins; the data ones come again).
        streams = {op.name: op.stream for op in schedule.ops
                   if is_compute(op.stream) or op.stream == COMM_STREAM}
        joins = tuple((e.before, e.after) for e in schedule.edges
                      if e.before in streams and e.after in streams
                      and streams[e.before] != streams[e.after]
                      and COMM_STREAM not in (streams[e.before], streams[e.after]))
    libraries = library_bytes(model.target.gpus[0], schedule)
    if options.budget_bytes is None:
        return decide_memory(graph, gpu_solve(graph, model, options, order, streams, joins,
                                              comm or None))
    budget = options.budget_bytes
    try:
        # A budget the handles fill leaves the arena 1 byte: infeasible, naming its smallest.
        return decide_memory(graph, gpu_solve(
            graph, model, options.model_copy(update={"budget_bytes": max(budget - libraries, 1)}),
            order, streams, joins, comm or None))
    except InfeasibleBudget as e:
        least = e.smallest_bytes + libraries
        bound = "at least " if "at least" in str(e) else ""
        raise InfeasibleBudget(
            f"memory budget {format_bytes(budget)} ({budget} bytes) is infeasible for "
            f"{graph.name!r}: beyond the {format_bytes(libraries)} that the library handles of "
            f"its kernel streams hold (the target's stream_library_bytes), the arena needs "
            f"{bound}{e.smallest_bytes} bytes even with every offload and recompute; the "
            f"smallest feasible budget is {bound}{least} bytes ({format_bytes(least)})",
            least) from None


def library_bytes(gpu, schedule: Schedule) -> int:
    """Device memory `schedule`'s executor holds outside the arena: the library handles of
    every stream that runs kernels (the compute streams, the comm stream); the copy streams'
    offloads and prefetches get none (templates/cuda/runtime/executor.cpp)."""
    kernels = {op.stream for op in schedule.ops
               if is_compute(op.stream) or op.stream == COMM_STREAM}
    return gpu.library_bytes(max(len(kernels), 1))


def technique_curves(graph: Graph, order: list[str], model: CostModel) -> dict[str, np.ndarray]:
    """Seed 001's Fig. 10 counterfactuals: live device bytes per step of `order` (graph node
    names) with liveness alone, then with every offload that lowers the peak, then with every
    recompute too, by the same greedy that plans GPU memory (no budget: each technique until
    it lowers the peak no more)."""
    stash = analyze(compute_steps(graph, model, order))
    gpu = model.target.gpus[0]
    out = {}
    for name, offload, recompute in (("liveness", False, False), ("+ offload", True, False),
                                     ("+ recompute", True, True)):
        state = State(stash, gpu.host_link_bandwidth, offload=offload, recompute=recompute,
                      host_limit=gpu.pinned_host_limit_bytes)
        while (move := state.best_move()) is not None:
            state.apply(move)
        out[name] = state.profile[stash.key_of_step] + stash.persistent_bytes
    return out


def compute_order(schedule: Schedule) -> list[str]:
    """Graph node names in the schedule's order on its compute streams and the comm one."""
    return [op.name for op in schedule.ops if is_compute(op.stream) or op.stream == COMM_STREAM]


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

    @property
    def step_seconds(self) -> float:
        return float(self.end.max()) if len(self.end) else 0.0


def gpu_solve(graph: Graph, model: CostModel, options: MemoryOptions | None = None,
              order: list[str] | None = None, streams: dict[str, str] | None = None,
              joins: tuple[tuple[str, str], ...] = (),
              comm: dict[str, float] | None = None) -> Solved:
    """Everything gpu_memory decides, before it becomes records. `order`: graph node names in
    the compute order to keep (default: the graph's, updates moved up); `streams` and
    `joins`: a co-running schedule's compute stream per node and edges between streams;
    `comm`: the seconds of each all-reduce on the comm stream."""
    options = device_aligned(options or MemoryOptions())
    if not model.target.gpus:
        raise ValueError(f"target {model.target.name!r} has no GPU")
    gpu = model.target.gpus[0]
    steps = compute_steps(graph, model, order, streams=streams, joins=joins, comm=comm)
    stash = analyze(steps, "cost-aware" if options.recompute == "off" else options.recompute)
    state = State(stash, gpu.host_link_bandwidth, offload=options.offload,
                  recompute=options.recompute != "off", host_limit=gpu.pinned_host_limit_bytes)
    liveness_load = state.load()
    apply_pins(state, options.pins)
    meet_regions(state, options.region_budgets)
    placed = decide(state, options, kernel_scratch(steps))
    return solve(placed.state, placed, options, liveness_load)


def kernel_scratch(steps) -> ExtraBuffers:
    """The CUDA kernels' own scratch (OpDef.gpu_scratch) as buffers live during their op, laid
    out with the tensors: not optional, so the budget search and the smallest feasible budget
    count them (placed after the layout, a state that fits could leave them no room)."""
    def extra(m: Material) -> list[Buffer]:
        return [Buffer(f"{m.ops[i].name}@workspace", "", steps.scratch[m.ops[i].step],
                       m.ops[i].key, m.ops[i].key + 1, i, i, i, (i,), "workspace")
                for i in scratch_ops(m, steps)]
    return extra


def solve(state: State, placed: Placed, options: MemoryOptions, liveness_load: int) -> Solved:
    """Workspaces, reuse edges and times of a placed state."""
    m = placed.material
    buffers, offsets, arena, choice = give_workspaces(placed, state, options)
    hb = HappensBefore(len(m.ops), m.edges)
    extra = reuse_edges(buffers, offsets, hb)
    edges = sorted(set(m.edges) | set(extra))
    seconds = [choice[i].seconds if i in choice else o.seconds for i, o in enumerate(m.ops)]
    steps = state.stash.steps
    if steps.stream:
        # Several compute streams: an event only where no other path orders the two ops,
        # and kernels timed as they share the SMs and the bandwidth.
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
        if floor.above(s, budget):  # cannot fit: no layout needed (planner.memory.floor)
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
    free = FreeBytes(m.buffers, placed.offsets, options.alignment)
    for i, (gap_lo, gap_hi, top) in zip(needy, free.sweep([m.ops[i].key for i in needy]),
                                        strict=True):
        o = m.ops[i]
        algos = list(steps.algos[o.step])
        room = int((gap_hi - gap_lo).max(initial=0))
        limit = max(room, budget - top) if options.workspaces else 0
        algo = fastest_within(algos, limit)
        choice[i] = algo
        nbytes = algo.workspace_bytes
        if nbytes == 0:
            continue
        size = aligned(nbytes, options.alignment)
        # The smallest gap that holds it (the lowest among equals), else above the live ones.
        width = gap_hi - gap_lo
        fitting = np.nonzero(width >= size)[0]
        offset = int(gap_lo[fitting[np.lexsort((gap_lo[fitting], width[fitting]))[0]]]) \
            if len(fitting) else top
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


def scratch_ops(m: Material, steps) -> list[int]:
    """The graph-node ops whose CUDA kernel needs scratch of its own (OpDef.gpu_scratch)."""
    return [i for i, o in enumerate(m.ops)
            if o.kind == "node" and not steps.algos[o.step] and steps.scratch
            and steps.scratch[o.step]]


def _unbounded_workspaces(placed: Placed, state: State, options: MemoryOptions
                          ) -> tuple[list[Buffer], list[int], int, dict[int, ConvAlgo]]:
    """Without a budget: every convolution's fastest algorithm, its workspace laid out with
    the other buffers by the allocation heuristics."""
    m = placed.material
    steps = state.stash.steps
    choice = {i: fastest_within(list(steps.algos[o.step]), None if options.workspaces else 0)
              for i, o in enumerate(m.ops) if o.kind == "node" and steps.algos[o.step]}
    need = {i: a.workspace_bytes for i, a in choice.items()}
    buffers = list(m.buffers) + [
        Buffer(f"{m.ops[i].name}@workspace", "", nbytes, m.ops[i].key,
               m.ops[i].key + 1, i, i, i, (i,), "workspace")
        for i, nbytes in sorted(need.items()) if nbytes]
    offsets, arena, _, _ = place(buffers, options.alignment, options.heuristics)
    return buffers, offsets, arena, choice


def simulate(m: Material, seconds: list[float], edges: list[tuple[int, int]]
             ) -> tuple[np.ndarray, np.ndarray]:
    """Start and end of every op: after its incoming edges' sources end (ops are numbered in
    a topological order of the edges)."""
    preds: list[list[int]] = [[] for _ in m.ops]
    for u, w in edges:
        preds[w].append(u)
    start = np.zeros(len(m.ops))
    end = np.zeros(len(m.ops))
    for i in range(len(m.ops)):
        start[i] = max((end[u] for u in preds[i]), default=0.0)
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
    compute = [i for i, o in enumerate(m.ops) if o.stream == 0]
    busy = float(sum(seconds[i] for i in compute))
    if state.stash.steps.stream:  # co-running: the time some compute stream is busy
        busy = busy_seconds((float(start[i]), float(end[i])) for i, o in enumerate(m.ops)
                            if o.stream not in NO_SMS)
    recompute = [i for i, o in enumerate(m.ops) if o.kind == "recompute"]
    copies = [o for o in m.ops if o.kind == "offload"]
    load = int(live_profile(buffers)[1].max())
    memory = MemorySummary(
        naive_bytes=naive_bytes([b for b in buffers if b.kind not in (
            "workspace", "recompute", "scratch", "prefetch", "host")]),
        load_bytes=load, arena_bytes=arena, fragmentation=arena / load - 1 if load else 0.0,
        peak_bytes=arena, per_op_bound_bytes=per_op_bound(graph),
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
