"""The planner, as named stages over one record: graph + target + cost table + options -> Plan.

    plan(graph, target, costs, options) = run(planning(graph, target, costs, options)).plan

    STAGES, each a pure function Planning -> Planning:
        step graph    the rewrites that depend on the target (planner.graph.step's passes,
                      each checked): the step's CPU cores, the convolutions' measured layouts,
                      the ranks' gradient collectives
        fits          nothing to plan, or a node far too large: refused before any decision
        price         CostModel(target, costs): every op's time per thread count, per conv
                      algorithm
        evaluation    a training plan's evaluation graph planned by the same stages
                      (planner/evaluation.py); nothing reads it before `assemble`, so `run`
                      plans it beside the next stages, in a forked child (planner.beside)
        schedule      BACKENDS[target.backend].schedule (CPU or GPU: decided here only), the
                      collectives on the comm lane, and the one-lane schedule it is compared with
        place memory  BACKENDS[...].memory: a MemoryDecision (the faster of the two schedules
                      that meet the budget)
        assemble      the Plan record: summary, bounds, provenance, once; on the host's CPUs;
                      with the evaluation schedule
        verify        the independent checker, always (unless check=False)

Drivers that need part of the back half run those stages by name (`run(p, names)`): `decide`
is DECISIONS (price, schedule, place memory), for searches that plan many graphs and keep none
(`planner fit`); explain re-runs the decisions and assembly of a plan's embedded step graph;
profiling's placements start from a schedule made elsewhere (`place` is memory planning alone).

Example:
    >>> from planner.target import preset
    >>> from planner.zoo import build
    >>> g = build("mlp", batch=2, hidden=[4], in_features=3, classes=2)
    >>> p = plan(g, preset("xeon-8180"))
    >>> p.backend, len(p.ops), p.summary.memory.arena_bytes >= p.summary.memory.load_bytes
    ('cpu', 6, True)
    >>> plan(g, preset("k40c-12gb")).ops[0].stream
    'compute'
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from planner.beside import beside
from planner.collection import collector_off
from planner.costs import CostModel, CostTable
from planner.errors import PlanError
from planner.evaluation import plan_evaluation
from planner.graph.data_parallel import compute_graph
from planner.ir.graph import Graph
from planner.memory.decision import MemoryDecision
from planner.memory.options import MemoryOptions
from planner.pipeline.assembly import assemble, on_host_plan
from planner.pipeline.backends import BACKENDS, memory_of
from planner.pipeline.choices import step_graph
from planner.pipeline.options import PlanOptions
from planner.pipeline.placing import co_running_if_faster, place
from planner.plan import Evaluation, Plan
from planner.schedule.parallel import DataParallelOptions, comm_lane, interconnect
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
    memory: MemoryDecision | None = None
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


def _step(p: Planning) -> Planning:
    return p.but(graph=step_graph(p.graph, p.target, p.options.data_parallel, p.costs))


def _fits(p: Planning) -> Planning:
    """Nothing to plan, a node far too large for the memory, pins naming no tensor: refused
    before any decision (ValueError)."""
    from planner.limits import check_graph_fits
    from planner.memory.pins import check_pins_name_tensors

    check_graph_fits(p.graph, p.share, memory_of(p.share))
    check_pins_name_tensors(p.graph.tensor_map, p.options.memory.pins)
    return p


def _price(p: Planning) -> Planning:
    # A model the record already holds for the same share and table (the step's, for its
    # evaluation plan) keeps its curves: a signature is priced once per plan.
    if p.model is not None and p.model.target is p.share and p.model.table is p.costs:
        return p
    return p.but(model=CostModel(p.share, p.costs))


def _schedule(p: Planning) -> Planning:
    """The compute lanes' schedule, then the gradients' collectives on the comm lane; and the
    one-lane schedule it is compared with."""
    assert p.model is not None
    backend = BACKENDS[p.share.backend]
    link = p.options.data_parallel.link or interconnect(p.share)
    compute = compute_graph(p.graph)
    schedule = comm_lane(p.graph, backend.schedule(compute, p.model, p.options.schedule), link)
    one_lane = backend.one_lane(schedule, p.options)
    return p.but(schedule=schedule, one_lane=None if one_lane is None else
                 comm_lane(p.graph, backend.schedule(compute, p.model, one_lane), link))


def _place_memory(p: Planning) -> Planning:
    """Memory planning of the schedule (and of the one-lane one: the faster plan is kept).
    Raises InfeasibleBudget when no plan fits options.memory.budget_bytes."""
    assert p.model is not None and p.schedule is not None
    if p.one_lane is None:
        return p.but(memory=place(p.graph, p.model, p.schedule, p.options.memory))
    schedule, memory = co_running_if_faster(p.graph, p.model, p.schedule, p.one_lane,
                                            p.options)
    return p.but(schedule=schedule, one_lane=None, memory=memory)


def _assemble(p: Planning) -> Planning:
    """The Plan record, on the host's CPUs where it was planned on a share of them, its arena
    held to the memory where the backend's is."""
    from planner.limits import check_arena_fits

    assert p.model is not None and p.schedule is not None and p.memory is not None
    out = p.on_host(assemble(p.graph, p.model, p.options, p.schedule, p.memory,
                             host=p.target))
    if p.evaluation_plan is not None:
        out = out.model_copy(update={"evaluation": p.evaluation_plan})
    if out.summary.memory is not None and BACKENDS[out.backend].arena_limited:
        check_arena_fits(out.summary.memory.arena_bytes, p.graph, p.share)
    return p.but(plan=out)


def _evaluation(p: Planning) -> Planning:
    """A training plan's evaluation schedule: its evaluation graph planned by the same stages
    (planner/evaluation.py), on the prices of the step's. ZeRO-3's keeps the forward's
    all-gathers: collectives of its own, on the process group the step runs on. Nothing reads
    it before `assemble`: `run` plans it beside the step's stages (BESIDE)."""
    if not p.evaluation or p.graph.kind != "training":
        return p
    evaluation = plan_evaluation(p.graph, lambda g: p.on_host(_evaluation_plan(g, p)))
    # Its text made here, beside the step's stages (the child has time to spare): writing
    # the plan takes it as it is.
    _ = evaluation.json_text
    return p.but(evaluation_plan=evaluation)


def _verify(p: Planning) -> Planning:
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


Stage = Callable[[Planning], Planning]

# The back half, in order: each a pure function of the record (the front half is
# planner.frontend.prepare's PASSES). Drivers that need part of it run those stages by name.
STAGES: tuple[tuple[str, Stage], ...] = (
    ("step graph", _step),
    ("fits", _fits),
    ("price", _price),
    ("evaluation", _evaluation),
    ("schedule", _schedule),
    ("place memory", _place_memory),
    ("assemble", _assemble),
    ("verify", _verify),
)
# Stages that may run beside the ones after them (planner.beside: in a forked child, where a
# core is free and the graph large enough to pay for the fork): name -> the field of the record
# it decides, and the first stage that reads that field.
BESIDE: dict[str, tuple[str, str]] = {"evaluation": ("evaluation_plan", "assemble")}
# Nodes of the step graph from which a child is worth forking: a fork and the pickled result
# cost about 20 ms; inception_v3's evaluation plan (1,018 step nodes) takes 140 ms.
BESIDE_NODES = 400
# The decisions of a plan, before it is a Plan record (`decide`).
DECISIONS = ("price", "schedule", "place memory")


def run(p: Planning, names: tuple[str, ...] | None = None) -> Planning:
    """`p` through the stages of STAGES named in `names` (all of them: None), in STAGES'
    order."""
    unknown = set(names or ()) - {name for name, _ in STAGES}
    if unknown:
        raise ValueError(f"no stage named {sorted(unknown)[0]!r}")
    chosen = [(name, stage) for name, stage in STAGES if names is None or name in names]
    with collector_off(), ExitStack() as children:
        # field -> (its result, the stage that reads it) of stages running beside
        pending: dict[str, tuple[Callable[[], Any], str]] = {}
        for name, stage in chosen:
            for field, (result, reader) in list(pending.items()):
                if reader == name:
                    p = p.but(**{field: result()})
                    del pending[field]
            if name in BESIDE and any(n == BESIDE[name][1] for n, _ in chosen):
                field, reader = BESIDE[name]
                planned = partial(_decided, stage, p, field)
                pending[field] = (children.enter_context(
                    beside(planned, worth=len(p.graph.nodes) >= BESIDE_NODES)), reader)
            else:
                p = stage(p)
    return p


def _decided(stage: Stage, p: Planning, field: str) -> Any:
    """What `stage` decides of `p`: one field of the record (picklable, unlike the record's
    cost model)."""
    return getattr(stage(p), field)


def decide(graph: Graph, target: Target, costs: CostTable | None = None,
           options: PlanOptions | None = None) -> tuple[CostModel, Schedule, MemoryDecision]:
    """Price, schedule and plan memory of a step graph on `target` (one rank's share): every
    decision of a plan, not yet a Plan record. Raises InfeasibleBudget when no plan fits
    options.memory.budget_bytes."""
    options = options or PlanOptions()
    p = run(Planning(graph, target, target, costs, options), DECISIONS)
    assert p.model is not None and p.schedule is not None and p.memory is not None
    return p.model, p.schedule, p.memory


def plan(graph: Graph, target: Target, costs: CostTable | None = None,
         options: PlanOptions | None = None, check: bool = True,
         evaluation: bool = True) -> Plan:
    """The verified plan of `graph` on `target`: the graph through every stage of STAGES
    (module docstring). `check=False` skips the independent verification (tests that corrupt
    plans on purpose build them this way). `evaluation`: a training plan carries its
    evaluation schedule (planner/evaluation.py).

    Raises InfeasibleBudget (a ValueError naming the smallest feasible budget), PlanError when
    the checker rejects the plan (a planner bug: the message names the rule and the op)."""
    out = run(planning(graph, target, costs, options, evaluation, check)).plan
    assert out is not None
    return out


def _evaluation_plan(graph: Graph, p: Planning) -> Plan:
    # An evaluation graph's plan: its own small arena, without the step's budget (the one a
    # user sets), with the same scheduler switches and alignment; no variants (an evaluation
    # runs its ops one at a time, in plan order). A data-parallel step's evaluation has no
    # collective but ZeRO-3's all-gathers (its graph's, on the step's process group): each
    # rank evaluates its own shard (the metrics are the caller's to reduce).
    options = p.options.model_copy(update={"memory": MemoryOptions(
        alignment=p.options.memory.alignment), "variants": False,
        "data_parallel": DataParallelOptions()})
    e = run(p.but(graph=graph, options=options, schedule=None, memory=None, plan=None),
            DECISIONS)
    assert e.model is not None and e.schedule is not None and e.memory is not None
    return assemble(graph, e.model, options, e.schedule, e.memory, host=p.target)


