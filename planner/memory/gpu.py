"""GPU memory planning: a stream schedule's buffers, under a budget with offloads to the host,
recomputes and per-convolution workspaces, on the schedule's compute stream(s) and two copy
streams. With co-running compute streams (planner.schedule.gpu_streams) each node keeps its
stream and the schedule's order; lifetimes are still positions in that order, and reuse of
bytes between ops on different streams gets the happens-before edge it needs (reuse.py), the
edges are transitively reduced, and the step is timed with the kernels sharing the SMs
(planner.schedule.gpu_share).

`gpu_memory(graph, schedule, model, options)` is the whole pass, as named steps (the budget
solver's, planner.memory.budget.solver, with the GPU's stream schedule, alignment, library
handles and kernel scratch):

    steps        the schedule's compute order, priced per conv algorithm
                 (planner.schedule.streams.compute_steps)
    stash        checkpoints and recompute segments (stash.py)
    decide       while the arena exceeds the budget: the cheapest offload or recompute at
                 the live-bytes peak (budget/search.py); none needed without a budget
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
    >>> from planner.frontend.autodiff import Optimizer, make_training_graph
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

import numpy as np

from planner.costs import CostModel
from planner.errors import InfeasibleBudget
from planner.ir.graph import Graph
from planner.memory.budget.materialize import Material
from planner.memory.budget.search import State
from planner.memory.budget.solver import (
    ExtraBuffers,
    Solved,
    decide,
    decide_memory,
    least_workspace_ops,
    solve,
)
from planner.memory.decision import MemoryDecision
from planner.memory.liveness import Buffer
from planner.memory.options import MemoryOptions, format_bytes
from planner.memory.pins import apply_pins, meet_regions
from planner.memory.stash import analyze
from planner.schedule.record import Schedule
from planner.schedule.streams import COMM_STREAM, compute_steps, is_compute

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
    stash = analyze(steps, "cost-aware" if options.recompute == "off" else options.recompute,
                    options.recompute_products)
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
    count them (placed after the layout, a state that fits could leave them no room). A
    convolution whose every algorithm needs a workspace (a low-type gradient:
    planner.costs.convalgo) has its least one reserved the same way; the workspace it is given
    later takes that place when it fits there (planner.memory.budget.solver)."""
    def extra(m: Material) -> list[Buffer]:
        own = [(i, steps.scratch[m.ops[i].step]) for i in scratch_ops(m, steps)]
        least = [(i, n) for i, n in least_workspace_ops(m, steps) if n]
        return [Buffer(f"{m.ops[i].name}@workspace", "", n, m.ops[i].key, m.ops[i].key + 1,
                       i, i, i, (i,), "workspace") for i, n in sorted(own + least)]
    return extra


def scratch_ops(m: Material, steps) -> list[int]:
    """The graph-node ops whose CUDA kernel needs scratch of its own (OpDef.gpu_scratch)."""
    return [i for i, o in enumerate(m.ops)
            if o.kind == "node" and not steps.algos[o.step] and steps.scratch
            and steps.scratch[o.step]]
