"""`plan_memory`: a scheduled Plan -> the same Plan with every buffer placed. The driver, as
named steps:

    schedule    the plan's ops in execution order, with their predicted times
    order       happens-before reachability from the plan's edges       (order.HappensBefore)
    liveness    one buffer per tensor, lifetimes from the schedule       (liveness.graph_buffers)
    layout      offsets: persistent at the bottom, the rest by the best heuristic, plus the
                ordering edges reuse needs                               (layout.lay_out)
    budget      when the arena exceeds the budget: a clear error with the smallest feasible
                budget (GPU plans get offload, recompute and workspaces: planner.memory.gpu)
    assemble    TensorPlan records, edges, the summary's memory block    (assemble.with_memory)

Example:
    >>> from planner.costs import CostModel
    >>> from planner.schedule import ScheduleOptions, make_plan
    >>> from planner.target import preset
    >>> from planner.zoo import build
    >>> g = build("mlp", batch=2, hidden=[4], in_features=3, classes=2)
    >>> p = plan_memory(make_plan(g, CostModel(preset("xeon-8180")),
    ...                           ScheduleOptions(strategy="paper")))
    >>> m = p.summary.memory
    >>> m.arena_bytes >= m.load_bytes, len(p.tensors) == len(g.tensors)
    (True, True)
"""

from __future__ import annotations

import numpy as np

from planner.graph.ir import Graph
from planner.memory.assemble import with_memory
from planner.memory.layout import Layout, lay_out
from planner.memory.liveness import (
    Buffer,
    Schedule,
    graph_buffers,
    load_bytes,
    naive_bytes,
    per_op_bound,
    resident_bytes,
)
from planner.memory.options import MemoryOptions, format_bytes
from planner.memory.order import HappensBefore, plan_edges
from planner.plan import MemorySummary, OpPlan, Plan


class InfeasibleBudget(ValueError):
    """No plan fits the budget; `smallest_bytes` is the smallest budget that would fit."""

    def __init__(self, message: str, smallest_bytes: int) -> None:
        super().__init__(message)
        self.smallest_bytes = smallest_bytes


def plan_memory(plan: Plan, graph: Graph | None = None, target=None, cost_model=None,
                options: MemoryOptions | None = None) -> Plan:
    """`plan` with its buffers placed and the memory summary filled (module docstring).

    Parameters: `plan` from the scheduler; `graph` defaults to the plan's embedded graph;
    `target` and `cost_model` price what a budget makes memory planning add (GPU plans).
    Raises InfeasibleBudget (a ValueError naming the smallest feasible budget).
    """
    options = options or MemoryOptions()
    graph = graph or plan.graph
    ops = sorted(plan.ops, key=lambda o: o.order)
    if plan.target.streams:
        from planner.memory.gpu import plan_gpu_memory

        return plan_gpu_memory(plan, graph, target, cost_model, options)
    schedule = schedule_of(ops)
    hb = HappensBefore(len(ops), plan_edges(
        [o.name for o in ops], [(e.before, e.after) for e in plan.happens_before],
        [(o.name, o.deps) for o in ops]))
    buffers = graph_buffers(graph, schedule)
    layout = lay_out(buffers, hb, options.alignment, options.heuristics)
    budget = options.budget_bytes
    if budget is not None and layout.arena > budget:
        raise InfeasibleBudget(
            f"memory budget {format_bytes(budget)} is below the {format_bytes(layout.arena)} "
            f"this CPU plan needs with liveness alone (LOAD {format_bytes(load_bytes(buffers))}"
            f"); the smallest feasible budget is {layout.arena} bytes "
            f"({format_bytes(layout.arena)})", layout.arena)
    memory = summarize(graph, buffers, layout, budget)
    return with_memory(plan, ops, buffers, layout, memory)


def schedule_of(ops: list[OpPlan]) -> Schedule:
    return Schedule(names=tuple(o.name for o in ops),
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
        reuse_edges=len(layout.edges), **extra)
