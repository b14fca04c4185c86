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

from pydantic import TypeAdapter

from planner import __version__
from planner.beside import beside
from planner.collection import collector_off
from planner.costs import CostModel, CostTable, graph_signatures
from planner.costs.conv_layouts import chosen_layouts
from planner.errors import InfeasibleBudget, PlanError
from planner.evaluation import plan_evaluation
from planner.graph.data_parallel import compute_graph
from planner.graph.evaluation import evaluation_graph
from planner.graph.step import StepChoices
from planner.graph.step import step_graph as step_passes
from planner.ir.accumulation import micro_batches
from planner.ir.graph import Graph
from planner.ir.record import Backend, Record
from planner.memory.cpu_budget import cpu_budget_solve
from planner.memory.cpu_memory import cpu_memory
from planner.memory.decision import MemoryDecision
from planner.memory.gpu import gpu_memory, technique_curves
from planner.memory.one_lane import faster_one_lane, one_lane_ops
from planner.memory.options import MemoryOptions
from planner.memory.variants import Rows, one_lane_rows, variants_of
from planner.ops.collective import COLLECTIVE_OPS
from planner.plan import (
    Evaluation,
    MemoryPlan,
    OpPlan,
    Plan,
    PlanProvenance,
    PlanTarget,
    Summary,
    digest,
)
from planner.schedule.cpu import cpu_schedule
from planner.schedule.gpu_share import busy_seconds
from planner.schedule.options import ScheduleOptions
from planner.schedule.parallel import (
    DataParallelOptions,
    chosen_collectives,
    comm_lane,
    interconnect,
    planned_prefetch,
)
from planner.schedule.ranks import share_cpus, share_target
from planner.schedule.record import Edge, Schedule, lane_numbers
from planner.schedule.streams import (
    COMM_STREAM,
    COMPUTE_STREAMS,
    STREAMS,
    is_compute,
    stream_schedule,
)
from planner.target.backends import traits
from planner.target.records import Target, affinity_cpus


class PlanOptions(Record):
    """Every switch of planning: the scheduler's, memory planning's, data parallelism's."""

    schedule: ScheduleOptions = ScheduleOptions()
    memory: MemoryOptions = MemoryOptions()
    data_parallel: DataParallelOptions = DataParallelOptions()
    # Carry the schedule's variants for fewer free cores (planner.memory.variants); a
    # one-process CPU plan only.
    variants: bool = True


@dataclass(frozen=True)
class BackendPlanner:
    """What differs between backends in planning: the scheduler, memory planning, and the
    target's resources a plan names (logical CPUs' cores, or streams)."""

    schedule: Callable[[Graph, CostModel, ScheduleOptions], Schedule]
    memory: Callable[[Graph, Schedule, CostModel, MemoryOptions], MemoryDecision]
    resources: Callable[[Target, tuple[OpPlan, ...]], PlanTarget]
    # The bytes a step may use: host memory, or the GPU's.
    memory_bytes: Callable[[Target], int]
    # Whether the arena is held to memory_bytes (a GPU plan meets its budget instead).
    arena_limited: bool
    # The one-lane schedule's options a schedule is compared with (the faster plan is kept),
    # or None: a CPU schedule's lanes under a budget, whose arena's reuse may order the lanes'
    # ops one after another, each still on its lane's few threads (all threads per op may
    # then be faster); a GPU's co-running streams (planner.schedule.gpu_streams).
    one_lane: Callable[[Schedule, PlanOptions], ScheduleOptions | None]
    # Whether ranks on one host share its cores and memory (planner.schedule.ranks); a GPU
    # rank has its device to itself.
    ranks_share_host: bool
    # Whether memory planning's edges replace the schedule's where it added ops: a CPU plan
    # under a budget runs in memory planning's order (updates moved up past the lanes');
    # a co-running GPU plan's memory edges hold the schedule's, transitively reduced anew.
    memory_orders: Callable[[Schedule], bool]
    # The schedule `fit` plans each trial with: a GPU plan meets a budget whenever its
    # one-stream plan does (co-running streams are kept only where they meet it too), so fit
    # plans one stream, the same answer without a second memory plan per trial.
    fit_schedule: ScheduleOptions
    # Every op's thread count and seconds on one lane per core count (planner.memory.variants:
    # the plan's variants for fewer free cores, and the one-lane schedule of all its cores
    # that the main one is compared with, planner.memory.one_lane), or None: a GPU's streams
    # are not shared with other processes' threads.
    variants: Callable[..., Rows] | None = None
    # Whether its executor runs gradient accumulation (a step that skips the optimizer step's
    # ops until a step's last micro-batch: planner/ir/accumulation.py).
    accumulates: bool = False
    # The budget search whose decisions `explain` replays with and without one of them
    # (planner.memory.cpu_budget), or None: a GPU plan's greedy is explained by its curves.
    budget_solve: Callable[..., Any] | None = None
    # Seed 001's Fig. 10 counterfactual curves (liveness, + offload, + recompute) that `show
    # --memory` draws (planner.memory.gpu.technique_curves), or None.
    technique_curves: Callable[..., Any] | None = None
    # Whether the summary names which signatures the cost table measured and which the
    # analytical model priced (a CPU table's signatures are the host's profiled ones).
    lists_priced: bool = False


def _cpu_resources(target: Target, ops: tuple[OpPlan, ...] = ()) -> PlanTarget:
    return PlanTarget(name=target.name, core_of=tuple(c.core for c in target.logical_cpus))


def _gpu_resources(target: Target, ops: tuple[OpPlan, ...] = ()) -> PlanTarget:
    gpu = target.gpus[0]
    # A co-running plan also names the compute streams it uses beyond `compute`, a
    # data-parallel one its comm stream.
    used = {op.stream for op in ops}
    return PlanTarget(name=target.name,
                      streams=STREAMS + tuple(s for s in (*COMPUTE_STREAMS[1:], COMM_STREAM)
                                              if s in used),
                      compute_capability=gpu.compute_capability,
                      gpu_memory_bytes=gpu.memory_bytes)


def _cpu_one_lane(schedule: Schedule, options: PlanOptions) -> ScheduleOptions | None:
    if schedule.strategy == "uniform" or options.memory.budget_bytes is None:
        return None
    return options.schedule.model_copy(update={"strategy": "uniform"})


def _gpu_one_lane(schedule: Schedule, options: PlanOptions) -> ScheduleOptions | None:
    return ScheduleOptions(strategy="uniform") if schedule.strategy == "streams" else None


BACKENDS: dict[Backend, BackendPlanner] = {
    "cpu": BackendPlanner(cpu_schedule, cpu_memory, _cpu_resources,
                          lambda t: t.host_memory_bytes, arena_limited=True,
                          one_lane=_cpu_one_lane, ranks_share_host=True,
                          memory_orders=lambda s: True, fit_schedule=ScheduleOptions(),
                          variants=one_lane_rows, accumulates=True,
                          budget_solve=cpu_budget_solve, lists_priced=True),
    "cuda": BackendPlanner(stream_schedule, gpu_memory, _gpu_resources,
                           lambda t: t.gpus[0].memory_bytes, arena_limited=False,
                           one_lane=_gpu_one_lane, ranks_share_host=False,
                           memory_orders=lambda s: s.strategy == "streams",
                           fit_schedule=ScheduleOptions(strategy="uniform"),
                           technique_curves=technique_curves),
}


def memory_of(target: Target) -> int:
    """Bytes one step may use on the target's backend: host memory for a CPU target (even one
    that lists a GPU), the first GPU's for a CUDA target."""
    return BACKENDS[target.backend].memory_bytes(target)


def step_graph(graph: Graph, target: Target,
               data_parallel: DataParallelOptions | None = None,
               costs: CostTable | None = None) -> Graph:
    """The graph a step on `target` runs: the step graph's passes (planner.graph.step) under
    what planning chooses for the target (`step_choices`). A planning decision, as the target
    is: the plan embeds this graph, and everything that prices or plans a graph for a target
    (plan, fit, profile) runs this stage."""
    return step_passes(graph, step_choices(graph, target, data_parallel, costs))


def step_choices(graph: Graph, target: Target, data_parallel: DataParallelOptions | None = None,
                 costs: CostTable | None = None) -> StepChoices:
    """What the step graph's passes read: the target's CPU cores (planner.graph.for_cores), on
    a backend whose convolution layouts are chosen the layouts `costs` measured faster
    (planner.costs.conv_layouts; without costs none: a profile measures both) and, with ranks,
    the gradient buckets' collectives (planner.schedule.parallel). PlanError for gradient
    accumulation on a backend whose executor does not run it."""
    data_parallel = data_parallel or DataParallelOptions()
    if micro_batches(graph) > 1:
        if not BACKENDS[target.backend].accumulates:
            raise PlanError(f"graph {graph.name!r} accumulates gradients over "
                            f"{micro_batches(graph)} micro-batches; the {target.backend} "
                            f"executor does not run that yet: plan it for a CPU target")
    return StepChoices(cores=target.step_cores,
                       layouts=chosen_layouts(graph, costs) if traits(target).conv_layouts
                       else {},
                       collectives=chosen_collectives(graph, target, data_parallel))


def priced_graphs(graph: Graph, target: Target, options: PlanOptions | None = None,
                  evaluation: bool = True) -> tuple[Graph, ...]:
    """The graphs whose ops `plan(graph, target, ..., options, evaluation=)` prices: the step's
    graph (both convolution layouts left to the costs) and a training plan's evaluation graph
    (what measured costs are asked for: planner.costs.host_costs)."""
    options = options or PlanOptions()
    step = step_graph(graph, target, options.data_parallel)
    if evaluation and step.kind == "training" and options.data_parallel.ranks == 1:
        return step, evaluation_graph(step)
    return (step,)


# ---- the stages ------------------------------------------------------------------------------
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
    schedule, memory = _co_running_if_faster(p.graph, p.model, p.schedule, p.one_lane,
                                             p.options)
    return p.but(schedule=schedule, one_lane=None, memory=memory)


def _assemble(p: Planning) -> Planning:
    """The Plan record, on the host's CPUs where it was planned on a share of them, its arena
    held to the memory where the backend's is."""
    from planner.limits import check_arena_fits

    assert p.model is not None and p.schedule is not None and p.memory is not None
    out = _on_host_plan(assemble(p.graph, p.model, p.options, p.schedule, p.memory,
                                 host=p.target), p)
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
    evaluation = plan_evaluation(p.graph, lambda g: _on_host_plan(_evaluation_plan(g, p), p))
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


def _co_running_if_faster(graph: Graph, model: CostModel, schedule: Schedule, one: Schedule,
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


def _on_host_plan(plan: Plan, p: Planning) -> Plan:
    """`plan`'s ops on the host's CPUs where it was planned on a share of them."""
    if p.share is p.target:
        return plan
    cpus = share_cpus(p.target, p.options.data_parallel.ranks_per_host)
    return plan.model_copy(update={"ops": _on_host(plan.ops, cpus)})


OP_PLANS = TypeAdapter(tuple[OpPlan, ...])


def assemble(graph: Graph, model: CostModel, options: PlanOptions, schedule: Schedule,
             memory: MemoryDecision, host: Target | None = None) -> Plan:
    """The Plan record of a schedule and its memory decision: ops in execution order (memory
    planning's, when it re-timed them), every ordering edge, the summary, provenance. `host`:
    the machine the plan names when the model priced a share of it (ranks per host)."""
    target = host or model.target
    # A ScheduledOp's __dict__ holds its fields (no dump to copy them); the records validated
    # in one call (OpPlan(...) one by one costs 1.6x as much).
    placed = memory.ops or schedule.ops
    ops = OP_PLANS.validate_python([
        {**op.__dict__, "order": k, "lane": lane}
        for k, (op, lane) in enumerate(zip(placed, lane_numbers(placed), strict=True))])
    rank = {op.name: op.order for op in ops}
    # Each distinct edge once, the records the schedule and memory planning made (building
    # tens of thousands again was a tenth of assembly on ResNet-1001).
    named: dict[tuple[str, str], Edge] = {}
    # Where memory planning added ops, its edges may replace the schedule's (BackendPlanner).
    stated = () if memory.ops and BACKENDS[schedule.backend].memory_orders(schedule) \
        else schedule.edges
    for e in (*stated, *memory.edges):
        named.setdefault((e.before, e.after), e)
    happens = tuple(named[k] for k in sorted(named, key=lambda e: (rank[e[1]], rank[e[0]])))
    if any(n.op == "AllGather" for n in graph.nodes):  # ZeRO-3: each gather's distance as run
        ops = tuple(planned_prefetch(graph, ops, happens))
    # One lane per core count, in execution order: a one-process plan's without collectives
    # (a comm lane, a data-parallel step's or a ZeRO-3 evaluation's gathers, orders the
    # collectives every rank issues). Decided by the graph too, not the options alone: a
    # graph with collectives planned under one-process options (the host's contention fit
    # once did so with the step graph it was given) gets none either.
    make_rows = BACKENDS[schedule.backend].variants
    optimized = schedule.strategy == "optimized"
    rows = (make_rows(graph, ops, memory.inserted, memory.tensors, model)
            if make_rows is not None and (options.variants or optimized)
            and options.data_parallel.ranks == 1 and all(op.cpus for op in ops)
            and not any(n.op in COLLECTIVE_OPS for n in graph.nodes) else ())
    step = max((op.end for op in ops), default=0.0)
    # The planner's own choice is never slower than the one-lane schedule of the same cores
    # (planner.memory.one_lane); a strategy the user named is kept as named.
    one = faster_one_lane(step, rows, model.target.cores) if optimized else None
    if one is not None:
        cores = model.target.cores
        ops = one_lane_ops(ops, one, [affinity_cpus(model.target, t, "compact")
                                      for t in range(1, cores + 1)])
        step = max((op.end for op in ops), default=0.0)
    bound = schedule.bound
    busy = {op.name: op.end - op.start for op in ops if op.name in rank}
    retimed = bool(memory.ops)
    summary = Summary(
        strategy=schedule.strategy, step_seconds=step, lower_bound_seconds=bound.seconds,
        ratio=step / bound.seconds if bound.seconds else 1.0,
        critical_path_seconds=bound.critical_path, area_bound_seconds=bound.area,
        allotment_bound_seconds=bound.allotment, cut_bound_seconds=bound.cut,
        utilization=(_core_busy(ops, model.target.cores, step) if one is not None
                     else (_stream_busy(ops, busy) / step if step else 0.0) if retimed
                     else schedule.utilization),
        mean_corun=(sum(busy.values()) / step if step else 0.0) if retimed or one is not None
        else schedule.mean_corun,
        ops=len(ops), analytical_signatures=schedule.analytical_signatures,
        memory=memory.summary,
        **_priced(graph, model.table, BACKENDS[schedule.backend].lists_priced))
    table = model.table
    provenance = PlanProvenance(
        graph_sha256=digest(graph.to_json()), target_sha256=target.digest(),
        costs_sha256=digest(table.to_json()) if table is not None else "",
        # Data parallelism is named only when used: one-process plans read as they did.
        options=options.model_dump(mode="json", exclude=None if options.data_parallel.ranks > 1
                                   else {"data_parallel"}), tool=f"planner {__version__}")
    # The schedules for fewer free cores.
    variants = variants_of(rows) if rows and options.variants else ()
    return Plan(graph=graph, kind=graph.kind, backend=schedule.backend,
                target=BACKENDS[schedule.backend].resources(target, ops), ops=ops,
                happens_before=happens, tensors=memory.tensors,
                memory=MemoryPlan(ops=memory.inserted, convs=memory.convs), summary=summary,
                provenance=provenance, variants=variants)


def _priced(graph: Graph, table: CostTable | None, listed: bool) -> dict[str, tuple[str, ...]]:
    """Summary fields: which of a CPU plan's signatures `table` measured, which it lacked
    (the analytical model priced them); none without a table (or `listed`)."""
    if table is None or not listed:
        return {}
    keys = sorted({s.key for s in graph_signatures(graph).values()})
    return {"measured_signatures": tuple(k for k in keys if k in table.index),
            "modelled_signatures": tuple(k for k in keys if k not in table.index)}


def _on_host(ops: tuple[OpPlan, ...], ids: tuple[int, ...]) -> tuple[OpPlan, ...]:
    # Ops planned on a share of the host (planner.schedule.ranks.share_target), on the host's
    # CPUs: CPU i becomes ids[i] (ascending, so lanes and orders stay as they were).
    return tuple(op.model_copy(update={"cpus": tuple(ids[c] for c in op.cpus)})
                 if op.cpus else op for op in ops)


def _core_busy(ops: tuple[OpPlan, ...], cores: int, step: float) -> float:
    # A one-lane CPU step: busy core-seconds / (cores x step).
    return sum((op.end - op.start) * op.threads for op in ops) / (cores * step) if step else 0.0


def _stream_busy(ops: tuple[OpPlan, ...], busy: dict[str, float]) -> float:
    # A re-timed GPU step: the compute stream's busy time (several: while any runs a kernel).
    if len({op.stream for op in ops if is_compute(op.stream)}) > 1:
        return busy_seconds((op.start, op.end) for op in ops if is_compute(op.stream))
    return sum(busy[op.name] for op in ops if op.stream == STREAMS[0])
