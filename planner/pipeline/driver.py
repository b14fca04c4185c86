"""The planner, as named stages over one record: graph + target + cost table + options -> Plan.

    plan(graph, target, costs, options) = run(planning(graph, target, costs, options)).plan

    STAGES, each a pure function Planning -> Planning:
        gathers       under --memory-budget, ZeRO-3's memory decisions (bucket size, prefetch
                      depths, which buckets' forward copies are freed and gathered again)
                      chosen by planning the step under each (planner/pipeline/gathers.py),
                      recorded in the options; without a budget the default decisions
        step graph    the rewrites that depend on the target, each checked:
                      planner.step.STEP_PASSES = (for_cores, layouts, fold_norm_relu,
                      fold_conv_leaky, fold_sum_relu, fold_norm_sum, collectives, blocked),
                      under what planning chose (pipeline.step_choices)
        fits          nothing to plan, or a node far too large: refused before any decision
        price         CostModel(target, costs): every op's time per thread count, per conv
                      algorithm
        evaluation    a training plan's evaluation graph planned by the same stages
                      (planner/evaluation.py); nothing reads it before `assemble`, so `run`
                      plans it beside the next stages, in a forked child (planner.beside)
        schedule      BACKENDS[target.backend].schedule (CPU or GPU: decided here only), the
                      collectives on the comm lane, and the one-lane schedule it is compared with
        place memory  BACKENDS[...].memory: a MemoryDecision (under a budget, the main
                      schedule's unless the one-lane one's plan is the cheaper way to meet
                      it: the plan's summary then says why, in one line)
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
from functools import partial
from typing import Any

import planner.pipeline.stages as stages
from planner.beside import beside
from planner.collection import collector_off
from planner.costs import CostModel, CostTable
from planner.evaluation import plan_evaluation
from planner.ir.graph import Graph
from planner.memory.decision import MemoryDecision
from planner.memory.options import MemoryOptions
from planner.pipeline.assembly import assemble
from planner.pipeline.gathers import choose_gathers
from planner.pipeline.options import PlanOptions
from planner.pipeline.record import Planning, planning
from planner.plan import Plan
from planner.schedule.parallel import DataParallelOptions
from planner.schedule.record import Schedule
from planner.target.backends import traits
from planner.target.records import Target


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


Stage = Callable[[Planning], Planning]

# The back half, in order: each a pure function of the record (the front half is
# planner.frontend.prepare's PASSES). Drivers that need part of it run those stages by name.
STAGES: tuple[tuple[str, Stage], ...] = (
    ("gathers", choose_gathers),
    ("step graph", stages.step),
    ("fits", stages.fits),
    ("price", stages.price),
    ("evaluation", _evaluation),
    ("schedule", stages.schedule),
    ("place memory", stages.place_memory),
    ("assemble", stages.assemble_plan),
    ("verify", stages.verify),
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
    # user sets), with the same scheduler switches and alignment; no variants and no
    # parallel-loop groups (an evaluation runs its ops one at a time, in plan order: a group's
    # members would each run on one thread, one after another). A data-parallel step's
    # evaluation has no collective but ZeRO-3's all-gathers (its graph's, on the step's
    # process group): each rank evaluates its own shard (the metrics are the caller's to
    # reduce).
    schedule = p.options.schedule
    if traits(p.share).host_cores:  # a GPU's streams have no groups (and refuse CPU switches)
        schedule = schedule.model_copy(update={"grouping": False, "corun_groups": False})
    options = p.options.model_copy(update={"memory": MemoryOptions(
        alignment=p.options.memory.alignment), "variants": False,
        "data_parallel": DataParallelOptions(), "schedule": schedule})
    e = run(p.but(graph=graph, options=options, schedule=None, memory=None, plan=None),
            DECISIONS)
    assert e.model is not None and e.schedule is not None and e.memory is not None
    return assemble(graph, e.model, options, e.schedule, e.memory, host=p.target)


