"""The record the stages of planner.pipeline run over (`Planning`): a plan's inputs and what
each stage decided so far; `planning` makes the first one."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from planner.costs import CostModel, CostTable
from planner.ir.graph import Graph
from planner.memory.decision import MemoryDecision
from planner.pipeline.assembly import on_host_plan
from planner.pipeline.backends import BACKENDS
from planner.pipeline.options import PlanOptions
from planner.plan import Evaluation, Plan
from planner.schedule.ranks import share_target
from planner.schedule.record import Schedule
from planner.target.records import Target


@dataclass(frozen=True)
class Planning:
    """One plan in the making: its inputs, and what each stage of STAGES decided so far."""

    graph: Graph
    # The machine the plan names; `share`, what one rank plans for (ranks that share a host:
    # its share of the cores and memory, planner.schedule.ranks; else the target itself).
    target: Target
    share: Target
    costs: CostTable | None
    options: PlanOptions
    # A training plan carries its evaluation schedule (planner/evaluation.py).
    evaluation: bool = True
    # The independent checker runs (tests that corrupt plans on purpose skip it).
    check: bool = True
    model: CostModel | None = None
    schedule: Schedule | None = None
    # The one-lane schedule the schedule is compared with (BackendPlanner.one_lane), if any.
    one_lane: Schedule | None = None
    # Under a budget, the main strategy's schedule without parallel-loop groups, where the
    # main one has some (planner.pipeline.placing._without_groups).
    ungrouped: Schedule | None = None
    memory: MemoryDecision | None = None
    # Why memory planning kept the one-lane schedule rather than the main one under the
    # budget (planner.pipeline.placing.co_running_if_faster), if it did.
    switch: str | None = None
    # A training plan's evaluation schedule, planned beside the step's (`_evaluation`).
    evaluation_plan: Evaluation | None = None
    plan: Plan | None = None

    def but(self, **changes: Any) -> Planning:
        return replace(self, **changes)

    def on_host(self, plan: Plan) -> Plan:
        """`plan` (of this record's share) on the host's CPUs."""
        return on_host_plan(plan, self.target, self.share,
                            self.options.data_parallel.ranks_per_host)


def planning(graph: Graph, target: Target, costs: CostTable | None = None,
             options: PlanOptions | None = None, evaluation: bool = True,
             check: bool = True) -> Planning:
    """The record STAGES start from: nothing decided yet."""
    options = options or PlanOptions()
    # A GPU rank has its device to itself: nothing to share.
    share = (share_target(target, options.data_parallel.ranks_per_host)
             if options.data_parallel.ranks > 1 and BACKENDS[target.backend].ranks_share_host
             else target)
    return Planning(graph, target, share, costs, options, evaluation, check)
