"""The stages of planner.pipeline's STAGES, each a pure function Planning -> Planning, but the
evaluation's (which plans a graph by the stages: planner/pipeline/driver.py)."""

from __future__ import annotations

from functools import partial

from planner.costs import CostModel
from planner.errors import PlanError
from planner.pipeline.assembly import assemble
from planner.pipeline.backends import BACKENDS, memory_of
from planner.pipeline.choices import step_graph
from planner.pipeline.placing import co_running_if_faster, place
from planner.pipeline.record import Planning
from planner.schedule.parallel import comm_lane, interconnect
from planner.step.collectives.data_parallel import compute_graph


def step(p: Planning) -> Planning:
    """The graph a step on the target runs (planner/pipeline/choices.py)."""
    return p.but(graph=step_graph(p.graph, p.target, p.options.data_parallel, p.costs))


def fits(p: Planning) -> Planning:
    """Nothing to plan, a node far too large for the memory, pins naming no tensor: refused
    before any decision (ValueError)."""
    from planner.limits import check_graph_fits
    from planner.memory.pins import check_pins_name_tensors

    check_graph_fits(p.graph, p.share, memory_of(p.share))
    check_pins_name_tensors(p.graph.tensor_map, p.options.memory.pins)
    return p


def price(p: Planning) -> Planning:
    """The cost model of the share the plan is for (CostModel(share, costs))."""
    # A model the record already holds for the same share and table (the step's, for its
    # evaluation plan) keeps its curves: a signature is priced once per plan.
    if p.model is not None and p.model.target is p.share and p.model.table is p.costs:
        return p
    return p.but(model=CostModel(p.share, p.costs))


def schedule(p: Planning) -> Planning:
    """The compute lanes' schedule, then the gradients' collectives on the comm lane; and the
    one-lane schedule it is compared with."""
    assert p.model is not None
    backend = BACKENDS[p.share.backend]
    link = p.options.data_parallel.link or interconnect(p.share)
    gathers = p.options.data_parallel.gathers
    lane = partial(comm_lane, p.graph, link=link,
                   prefetch=gathers.prefetch_limits() if gathers is not None else None)
    compute = compute_graph(p.graph)
    schedule = lane(backend.schedule(compute, p.model, p.options.schedule))
    one_lane = backend.one_lane(schedule, p.options)
    # Under a budget, the main strategy without parallel-loop groups too (the budget search
    # runs a group's ops one after another: planner.pipeline.placing._without_groups).
    grouped = one_lane is not None and p.options.memory.budget_bytes is not None \
        and any(o.group for o in schedule.ops)
    plain = p.options.schedule.model_copy(update={"grouping": False, "corun_groups": False})
    return p.but(schedule=schedule, one_lane=None if one_lane is None else
                 lane(backend.schedule(compute, p.model, one_lane)),
                 ungrouped=lane(backend.schedule(compute, p.model, plain)) if grouped else None)


def place_memory(p: Planning) -> Planning:
    """Memory planning of the schedule (and of the one-lane one: co_running_if_faster says
    which plan is kept, and why a budget switched the strategy, if it did). Raises
    InfeasibleBudget when no plan fits options.memory.budget_bytes."""
    assert p.model is not None and p.schedule is not None
    if p.one_lane is None:
        return p.but(memory=place(p.graph, p.model, p.schedule, p.options.memory))
    schedule, memory, switch = co_running_if_faster(p.graph, p.model, p.schedule,
                                                    p.one_lane, p.options, p.ungrouped)
    return p.but(schedule=schedule, one_lane=None, ungrouped=None, memory=memory,
                 switch=switch)


def assemble_plan(p: Planning) -> Planning:
    """The Plan record, on the host's CPUs where it was planned on a share of them, its arena
    held to the memory where the backend's is."""
    from planner.limits import check_arena_fits

    assert p.model is not None and p.schedule is not None and p.memory is not None
    out = p.on_host(assemble(p.graph, p.model, p.options, p.schedule, p.memory,
                             host=p.target, switch=p.switch))
    if p.evaluation_plan is not None:
        out = out.model_copy(update={"evaluation": p.evaluation_plan})
    if out.summary.memory is not None and BACKENDS[out.backend].arena_limited:
        check_arena_fits(out.summary.memory.arena_bytes, p.graph, p.share)
    return p.but(plan=out)


def verify(p: Planning) -> Planning:
    """The independent checker (planner.verify): PlanError when it rejects the plan (a
    planner bug: the message names the rule and the op)."""
    if not p.check:
        return p
    from planner.verify import verify_plan

    assert p.plan is not None
    problems = verify_plan(p.plan)
    if problems:
        raise PlanError(f"the planner made a plan that does not verify: {problems[0]}"
                        + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""))
    return p
