"""Memory planning as planning runs it: the backend's memory planner (`place`), and the
faster of a co-running schedule and its one-lane one once both are planned
(`co_running_if_faster`).
"""

from __future__ import annotations

from planner.costs import CostModel
from planner.errors import InfeasibleBudget
from planner.ir.graph import Graph
from planner.memory.decision import MemoryDecision
from planner.memory.options import MemoryOptions
from planner.pipeline.backends import BACKENDS
from planner.pipeline.options import PlanOptions
from planner.schedule.record import Schedule


def co_running_if_faster(graph: Graph, model: CostModel, schedule: Schedule, one: Schedule,
                          options: PlanOptions) -> tuple[Schedule, MemoryDecision]:
    """The co-running schedule and its memory decision when the planned step (conv
    algorithms, workspaces, reuse edges and copies included) is still at least `min_gain`
    shorter than that of `one` (one GPU stream; on a CPU, every op on all threads, one at a
    time), else `one`'s plan: the scheduler's guard, again after memory planning (which may
    order ops that the schedule let co-run)."""
    # A budget only one of them meets gets that one; one that neither meets is refused with
    # the smaller of their smallest feasible budgets (which one of them then meets): only
    # then are those searched for.
    quick = options.memory.model_copy(update={"infeasible_probes": 0})
    decided = []
    for s in (one, schedule):
        try:
            decided.append(place(graph, model, s, quick))
        except InfeasibleBudget:
            decided.append(None)
    one_memory, memory = decided
    if one_memory is None and memory is None:
        errors = []
        for s in (one, schedule):
            try:
                place(graph, model, s, options.memory)
            except InfeasibleBudget as e:
                errors.append(e)
        raise min(errors, key=lambda e: e.smallest_bytes)
    if memory is None:
        return one, one_memory
    if one_memory is None:
        return schedule, memory

    def step(s: Schedule, m: MemoryDecision) -> float:
        # Memory planning re-times the ops where it orders or adds some, else the schedule's.
        return max((op.end for op in m.ops or s.ops), default=0.0)

    if step(schedule, memory) <= step(one, one_memory) * (1 - options.schedule.min_gain):
        return schedule, memory
    return one, one_memory


def place(graph: Graph, model: CostModel, schedule: Schedule,
          options: MemoryOptions | None = None) -> MemoryDecision:
    """Memory planning of `schedule` by its backend's planner. Raises InfeasibleBudget."""
    return BACKENDS[schedule.backend].memory(graph, schedule, model, options or MemoryOptions())

