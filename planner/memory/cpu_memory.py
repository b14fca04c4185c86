"""`cpu_memory`: a CPU Schedule -> the MemoryDecision that places every buffer, as named steps
(the pipeline's backend table sends GPU schedules to planner.memory.gpu instead, which adds
offload, recompute and convolution workspaces under a budget):

    order       happens-before reachability from the schedule's edges  (order.HappensBefore)
    liveness    one buffer per tensor, lifetimes from the schedule       (liveness.graph_buffers)
    scratch     one buffer per op whose kernel needs scratch, live while it runs
                                                                         (scratch_buffers)
    layout      offsets: persistent at the bottom, the rest by the best heuristic, plus the
                ordering edges reuse needs                               (layout.lay_out)
    budget      when the arena exceeds the budget: a clear error with the smallest feasible
                budget
    decide      TensorPlan records, edges, the memory summary            (assemble.decision)

Example:
    >>> from planner.costs import CostModel
    >>> from planner.schedule import ScheduleOptions, cpu_schedule
    >>> from planner.target import preset
    >>> from planner.zoo import build
    >>> g = build("mlp", batch=2, hidden=[4], in_features=3, classes=2)
    >>> model = CostModel(preset("xeon-8180"))
    >>> d = cpu_memory(g, cpu_schedule(g, model, ScheduleOptions(strategy="paper")), model)
    >>> m = d.summary
    >>> m.arena_bytes >= m.load_bytes
    True
    >>> {t.tensor for t in d.tensors if t.tensor} == {t.name for t in g.tensors}
    True
    >>> [t.name for t in d.tensors if not t.tensor]  # the MatMuls' library scratchpads
    ['fc1@scratch', 'fc2@scratch']
"""

from __future__ import annotations

import numpy as np

from planner.costs import CostModel
from planner.costs.records import CostTable
from planner.costs.signature import graph_signatures
from planner.errors import InfeasibleBudget
from planner.ir.graph import Graph
from planner.memory.arena import CPU_FIRST
from planner.memory.assemble import decision
from planner.memory.decision import MemoryDecision, MemorySummary
from planner.memory.layout import Layout, lay_out
from planner.memory.liveness import (
    Buffer,
    OpTimes,
    graph_buffers,
    load_bytes,
    naive_bytes,
    per_op_bound,
    resident_bytes,
)
from planner.memory.options import MemoryOptions, format_bytes
from planner.memory.order import HappensBefore, plan_edges
from planner.memory.scratch import kernel_scratch
from planner.ops.base import TensorType
from planner.schedule.record import Schedule, ScheduledOp


def cpu_memory(graph: Graph, schedule: Schedule, model: CostModel | None = None,
               options: MemoryOptions | None = None) -> MemoryDecision:
    """Where every buffer of the CPU `schedule` lives (module docstring). `model`'s table, where
    it measured an op's scratch at its thread count, sizes that op's scratch area.
    Raises InfeasibleBudget (a ValueError naming the smallest feasible budget).
    """
    options = options or MemoryOptions()
    ops = list(schedule.ops)
    times = schedule_of(ops)
    # The schedule's edges alone: the executor waits on them, not on deps (planner.plan).
    hb = HappensBefore(len(ops), plan_edges(
        [o.name for o in ops], [(e.before, e.after) for e in schedule.edges]))
    scratch = scratch_buffers(graph, ops, model.table if model is not None else None)
    buffers = graph_buffers(graph, times) + scratch
    budget = options.budget_bytes
    budgeted = budget is not None and (options.offload or options.recompute != "off")
    # Under a budget the layout stops as soon as it exceeds it (the same layout if it fits).
    layout = lay_out(buffers, hb, options.alignment, options.heuristics, CPU_FIRST,
                     limit=budget if budgeted else None)
    if layout is None or options.forces:  # the user's recomputes and offloads too
        from planner.memory.cpu_budget import cpu_budget_memory

        if model is None:
            raise ValueError("CPU memory planning under a budget needs the cost model of its "
                             "target")
        return cpu_budget_memory(graph, schedule, model, options)
    if budget is not None and layout.arena > budget:
        raise InfeasibleBudget(
            f"memory budget {format_bytes(budget)} is below the {format_bytes(layout.arena)} "
            f"this CPU plan needs with liveness alone (LOAD {format_bytes(load_bytes(buffers))}"
            f"); the smallest feasible budget is {layout.arena} bytes "
            f"({format_bytes(layout.arena)})", layout.arena)
    memory = summarize(graph, buffers, layout, budget,
                       workspace={ops[b.writer].name: b.bytes for b in scratch})
    return decision(ops, buffers, layout, memory)


def scratch_buffers(graph: Graph, ops: list[ScheduledOp], table: CostTable | None = None
                    ) -> list[Buffer]:
    """A buffer `<op>@scratch` for every op whose CPU kernel may need scratch (at its planned
    thread count: measured in `table`, else OpDef.scratch; planner.memory.scratch), written
    and read by that op alone, live while it runs: ops running at the same time never share
    scratch."""
    out = []
    types: dict[str, TensorType] = {}  # one record per tensor, however many ops read it

    def of(name: str) -> TensorType:
        if name not in types:
            t = graph.tensor(name)
            types[name] = TensorType(t.shape, t.dtype)
        return types[name]

    signatures = graph_signatures(graph)
    for i, op in enumerate(ops):
        node = graph.node_map[op.name]
        nbytes = kernel_scratch(node, [of(t) for t in node.inputs], [of(t) for t in node.outputs],
                                op.threads, table, signatures[op.name])
        if nbytes > 0:
            out.append(Buffer(f"{op.name}@scratch", "", nbytes, op.start, op.end, i, i, i, (i,),
                              "scratch"))
    return out


def schedule_of(ops: list[ScheduledOp]) -> OpTimes:
    return OpTimes(names=tuple(o.name for o in ops),
                    start=np.array([o.start for o in ops], dtype=float),
                    end=np.array([o.end for o in ops], dtype=float))


def summarize(graph: Graph, buffers: list[Buffer], layout: Layout, budget: int | None,
              liveness_load: int | None = None, workspace: dict[str, int] | None = None,
              **extra) -> MemorySummary:
    """The memory block of the summary for placed buffers."""
    load = load_bytes(buffers)
    return MemorySummary(
        naive_bytes=naive_bytes(buffers), load_bytes=load, arena_bytes=layout.arena,
        fragmentation=layout.arena / load - 1 if load else 0.0, peak_bytes=layout.arena,
        per_op_bound_bytes=per_op_bound(graph, workspace), resident_bytes=resident_bytes(graph),
        liveness_load_bytes=load if liveness_load is None else liveness_load,
        budget_bytes=budget, host_bytes=layout.host, allocator=layout.heuristic,
        reuse_edges=len(layout.edges), weight_packs=budget is None, **extra)
