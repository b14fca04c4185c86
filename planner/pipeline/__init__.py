"""The planner's back half: graph + target + cost table + options -> Plan, as named stages over
one record (planner.pipeline.driver runs the stages, in order).

    driver      STAGES, run, decide, plan: the stages in order and the drivers' entry points
    record      Planning: the record the stages run over (planning: the first one)
    stages      the stages but the evaluation's (which plans by them: the driver's)
    backends    BACKENDS: planning's backend table (scheduler, memory planning, resources, ...)
    choices     the step graph a plan embeds (step_graph, step_choices, priced_graphs)
    placing     memory planning as planning runs it (place, co_running_if_faster)
    assembly    the Plan record of a schedule and its memory decision (assemble)
    options     PlanOptions: every switch of planning
    explain     `planner explain`: a plan's inputs planned again, to say why it decided what
                it did (imported by its callers, not here)
"""

from planner.pipeline.assembly import assemble
from planner.pipeline.backends import BACKENDS, BackendPlanner, memory_of
from planner.pipeline.choices import priced_graphs, step_choices, step_graph
from planner.pipeline.driver import BESIDE, DECISIONS, STAGES, Stage, decide, plan, run
from planner.pipeline.options import PlanOptions
from planner.pipeline.placing import place
from planner.pipeline.record import Planning, planning

__all__ = ["BACKENDS", "BESIDE", "DECISIONS", "STAGES", "BackendPlanner", "PlanOptions",
           "Planning", "Stage", "assemble", "decide", "memory_of", "place", "plan",
           "planning", "priced_graphs", "run", "step_choices", "step_graph"]
