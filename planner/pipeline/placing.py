"""Memory planning as planning runs it: the backend's memory planner (`place`), and the
choice between a co-running schedule and its one-lane one once both are planned
(`co_running_if_faster`: under a CPU budget, the main schedule unless the one-lane plan is
the cheaper way to meet it, which the plan then says).
"""

from __future__ import annotations

from functools import partial

from planner.costs import CostModel
from planner.errors import InfeasibleBudget
from planner.ir.graph import Graph
from planner.memory.decision import MemoryDecision
from planner.memory.one_lane import faster_one_lane
from planner.memory.options import MemoryOptions, format_bytes
from planner.ops.collective import COLLECTIVE_OPS
from planner.pipeline.backends import BACKENDS
from planner.pipeline.options import PlanOptions
from planner.schedule.record import Schedule


def co_running_if_faster(graph: Graph, model: CostModel, schedule: Schedule, one: Schedule,
                          options: PlanOptions, ungrouped: Schedule | None = None
                          ) -> tuple[Schedule, MemoryDecision, str | None]:
    """The co-running schedule and its memory decision, or `one`'s (one GPU stream; on a
    CPU, every op on all threads, one at a time), and why the strategy changed (None: it did
    not). Where the backend compares the two anyway (a GPU's streams), the co-running plan is
    kept where its planned step (conv algorithms, workspaces, reuse edges and copies
    included) is still at least `min_gain` shorter: the scheduler's guard, again after memory
    planning. Where only the budget brings `one` in (a CPU's lanes), the main schedule is
    kept unless `one`'s plan is the cheaper way to meet the budget (at least `min_gain`
    shorter, or the only one that fits), and then the reason is one line the plan's summary
    keeps (`planner show`, `explain` and `diff` print it). `ungrouped`: the main schedule
    made without parallel-loop groups, planned too where the main one's plan is re-timed by
    the budget search (`_without_groups`)."""
    # A budget only one of them meets gets that one; one that neither meets is refused with
    # the smaller of their smallest feasible budgets (which one of them then meets): only
    # then are those searched for.
    quick = options.memory.model_copy(update={"infeasible_probes": 0})
    (one_memory, _), (memory, refused) = (_quick(graph, model, s, quick) for s in (one, schedule))
    if ungrouped is not None and (memory is None or memory.ops):
        schedule, memory, refused = _without_groups(graph, model, schedule, memory,
                                                    ungrouped, quick, refused)
    if one_memory is None and memory is None:
        errors = []
        for s in (one, schedule):
            try:
                place(graph, model, s, options.memory)
            except InfeasibleBudget as e:
                errors.append(e)
        raise min(errors, key=lambda e: e.smallest_bytes)
    if one_memory is None:
        return schedule, memory, None
    unbudgeted = options.model_copy(update={"memory": MemoryOptions()})
    budget_only = BACKENDS[schedule.backend].one_lane(schedule, unbudgeted) is None
    budget = options.memory.budget_bytes or 0
    head = f"{schedule.strategy} -> {one.strategy} under the {format_bytes(budget)} budget: "
    if memory is None:
        # The quick search's least LOAD: a bound, said only where it is above the budget.
        need = refused.smallest_bytes if refused is not None else 0
        more = f" (it needs at least {format_bytes(need)})" if need > budget else ""
        return one, one_memory, (
            f"{head}the {schedule.strategy} schedule's plan does not fit it{more}; "
            f"{one.strategy}'s takes {_guarded(graph, model, one, one_memory) * 1e3:.3f} ms"
        ) if budget_only else None
    # Where only the budget compares them, as the plans will be: after assembly's guard.
    step = partial(_guarded, graph, model) if budget_only else _step
    mine, theirs = step(schedule, memory), step(one, one_memory)
    gain = options.schedule.min_gain
    # The main schedule by default: `one` where it is at least min_gain shorter (the plan's
    # one-lane guard in assembly then keeps the main schedule no slower than its variants).
    if (theirs >= mine * (1 - gain)) if budget_only else (mine <= theirs * (1 - gain)):
        return schedule, memory, None
    return one, one_memory, (
        f"{head}{one.strategy}'s plan takes {theirs * 1e3:.3f} ms, the {schedule.strategy} "
        f"schedule's {mine * 1e3:.3f} ms") if budget_only else None


def _quick(graph: Graph, model: CostModel, s: Schedule, options: MemoryOptions
           ) -> tuple[MemoryDecision | None, InfeasibleBudget | None]:
    """`s`'s memory decision, or why none meets the budget."""
    try:
        return place(graph, model, s, options), None
    except InfeasibleBudget as e:
        return None, e


def _without_groups(graph: Graph, model: CostModel, schedule: Schedule,
                    memory: MemoryDecision | None, ungrouped: Schedule,
                    options: MemoryOptions, refused: InfeasibleBudget | None
                    ) -> tuple[Schedule, MemoryDecision | None, InfeasibleBudget | None]:
    """The main schedule's plan under the budget, or that of the same strategy without
    parallel-loop groups where that is faster or alone fits: the budget search runs a
    group's ops one after another, each at the group's whole time (ResNet-18's co-running
    step on measured costs, 133 of its 190 ops in groups, is 2.8x as long so)."""
    try:
        other = place(graph, model, ungrouped, options)
    except InfeasibleBudget:
        return schedule, memory, refused
    if memory is None or _step(ungrouped, other) < _step(schedule, memory):
        return ungrouped, other, None
    return schedule, memory, refused


def _guarded(graph: Graph, model: CostModel, s: Schedule, m: MemoryDecision) -> float:
    """The planned step as the Plan will have it: assembly's guard takes the one-lane
    schedule of all the cores where that is shorter (planner.memory.one_lane)."""
    step = _step(s, m)
    rows_of = BACKENDS[s.backend].variants
    ops = m.ops or s.ops
    if rows_of is None or not all(o.cpus for o in ops) \
            or any(n.op in COLLECTIVE_OPS for n in graph.nodes):
        return step
    one = faster_one_lane(step, rows_of(graph, ops, m.inserted, m.tensors, model),
                          model.target.cores)
    return step if one is None else sum(seconds for _, seconds in one)


def _step(s: Schedule, m: MemoryDecision) -> float:
    # Memory planning re-times the ops where it orders or adds some, else the schedule's.
    return max((op.end for op in m.ops or s.ops), default=0.0)


def place(graph: Graph, model: CostModel, schedule: Schedule,
          options: MemoryOptions | None = None) -> MemoryDecision:
    """Memory planning of `schedule` by its backend's planner. Raises InfeasibleBudget."""
    return BACKENDS[schedule.backend].memory(graph, schedule, model, options or MemoryOptions())

