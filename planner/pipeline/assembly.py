"""The Plan record of a schedule and its memory decision (`assemble`): ops in execution order,
every ordering edge once, the summary, provenance and the variants for fewer free cores.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import TypeAdapter

from planner import __version__
from planner.costs import CostModel, CostTable, graph_signatures
from planner.ir.graph import Graph
from planner.memory.decision import MemoryDecision
from planner.memory.one_lane import faster_one_lane, one_lane_memory, one_lane_ops
from planner.memory.variants import Rows, main_bits_rows, variants_of
from planner.ops.collective import COLLECTIVE_OPS
from planner.pipeline.backends import BACKENDS
from planner.pipeline.options import PlanOptions
from planner.plan import MemoryPlan, OpPlan, Plan, PlanProvenance, Summary, digest
from planner.schedule.gpu_share import busy_seconds
from planner.schedule.parallel import planned_prefetch
from planner.schedule.ranks import share_cpus
from planner.schedule.record import Edge, Schedule, lane_numbers
from planner.schedule.streams import STREAMS, is_compute
from planner.target.records import Target, affinity_cpus

OP_PLANS = TypeAdapter(tuple[OpPlan, ...])


def assemble(graph: Graph, model: CostModel, options: PlanOptions, schedule: Schedule,
             memory: MemoryDecision, host: Target | None = None,
             switch: str | None = None) -> Plan:
    """The Plan record of a schedule and its memory decision: ops in execution order (memory
    planning's, when it re-timed them), every ordering edge, the summary, provenance. `host`:
    the machine the plan names when the model priced a share of it (ranks per host); `switch`:
    why the budget changed the strategy (Summary.strategy_switch)."""
    target = host or model.target
    # A ScheduledOp's __dict__ holds its fields (no dump to copy them); the records validated
    # in one call (OpPlan(...) one by one costs 1.6x as much).
    placed = memory.ops or schedule.ops
    ops = OP_PLANS.validate_python([
        {**op.__dict__, "order": k, "lane": lane}
        for k, (op, lane) in enumerate(zip(placed, lane_numbers(placed), strict=True))])
    rank = {op.name: op.order for op in ops}
    happens = _happens(schedule, memory, rank)
    if any(n.op == "AllGather" for n in graph.nodes):  # ZeRO-3: each gather's distance as run
        ops = tuple(planned_prefetch(graph, ops, happens))
    ops, rows, one = _one_lane(graph, model, options, schedule, memory, ops, switch is not None)
    step = max((op.end for op in ops), default=0.0)
    bound = schedule.bound
    busy = {op.name: op.end - op.start for op in ops if op.name in rank}
    retimed = bool(memory.ops)
    summary = Summary(
        strategy=schedule.strategy, step_seconds=step, lower_bound_seconds=bound.seconds,
        ratio=step / bound.seconds if bound.seconds else 1.0,
        critical_path_seconds=bound.critical_path, area_bound_seconds=bound.area,
        allotment_bound_seconds=bound.allotment, cut_bound_seconds=bound.cut,
        # (a re-timed CPU plan's ops are on CPUs, not streams: its cores' busy time)
        utilization=(_core_busy(ops, model.target.cores, step)
                     if one is not None or retimed and all(op.cpus for op in ops)
                     else (_stream_busy(ops, busy) / step if step else 0.0) if retimed
                     else schedule.utilization),
        mean_corun=(sum(busy.values()) / step if step else 0.0) if retimed or one is not None
        else schedule.mean_corun,
        ops=len(ops), analytical_signatures=schedule.analytical_signatures, strategy_switch=switch,
        memory=memory.summary if one is None
        else one_lane_memory(memory.summary, ops, memory.inserted),
        **_priced(graph, model.table, BACKENDS[schedule.backend].lists_priced))
    table = model.table
    provenance = PlanProvenance(
        graph_sha256=digest(graph.to_json()), target_sha256=target.digest(),
        costs_sha256=digest(table.to_json()) if table is not None else "",
        options=_recorded(options), tool=f"planner {__version__}")
    # The schedules for fewer free cores, each computing the main schedule's bits.
    variants = variants_of(main_bits_rows(rows, ops)) \
        if rows and options.variants else ()
    return Plan(graph=graph, kind=graph.kind, backend=schedule.backend,
                target=BACKENDS[schedule.backend].resources(target, ops), ops=ops,
                happens_before=happens, tensors=memory.tensors,
                memory=MemoryPlan(ops=memory.inserted, convs=memory.convs), summary=summary,
                provenance=provenance, variants=variants)


def _happens(schedule: Schedule, memory: MemoryDecision, rank: dict[str, int]
             ) -> tuple[Edge, ...]:
    """Each distinct edge once, the records the schedule and memory planning made (building
    tens of thousands again was a tenth of assembly on ResNet-1001), in execution order."""
    named: dict[tuple[str, str], Edge] = {}
    # Where memory planning added ops, its edges may replace the schedule's (BackendPlanner).
    stated = () if memory.ops and BACKENDS[schedule.backend].memory_orders(schedule) \
        else schedule.edges
    for e in (*stated, *memory.edges):
        named.setdefault((e.before, e.after), e)
    return tuple(named[k] for k in sorted(named, key=lambda e: (rank[e[1]], rank[e[0]])))


def _one_lane(graph: Graph, model: CostModel, options: PlanOptions, schedule: Schedule,
              memory: MemoryDecision, ops: tuple[OpPlan, ...], chosen: bool = False
              ) -> tuple[tuple[OpPlan, ...], Rows, Sequence[tuple[int, float]] | None]:
    """(ops, the one-lane rows, the one-lane schedule chosen or None): `ops` on one lane of
    all the cores where that is faster and the planner chose the strategy (`optimized`, or
    `chosen`: a budget switched it)."""
    # One lane per core count, in execution order: a one-process plan's without collectives
    # (a comm lane, a data-parallel step's or a ZeRO-3 evaluation's gathers, orders the
    # collectives every rank issues). Decided by the graph too, not the options alone: a
    # graph with collectives planned under one-process options (the host's contention fit
    # once did so with the step graph it was given) gets none either.
    make_rows = BACKENDS[schedule.backend].variants
    optimized = schedule.strategy == "optimized" or chosen
    rows = (make_rows(graph, ops, memory.inserted, memory.tensors, model)
            if make_rows is not None and (options.variants or optimized)
            and options.data_parallel.ranks == 1 and all(op.cpus for op in ops)
            and not any(n.op in COLLECTIVE_OPS for n in graph.nodes) else ())
    # The planner's own choice is never slower than the one-lane schedule of the same cores
    # (planner.memory.one_lane); a strategy the user named is kept as named.
    step = max((op.end for op in ops), default=0.0)
    one = faster_one_lane(step, rows, model.target.cores) if optimized else None
    if one is not None:
        cores = model.target.cores
        ops = one_lane_ops(ops, one, [affinity_cpus(model.target, t, "compact")
                                      for t in range(1, cores + 1)])
    return ops, rows, one


def on_host_plan(plan: Plan, target: Target, share: Target, ranks_per_host: int) -> Plan:
    """`plan`'s ops on the host's CPUs where it was planned on `share`, a share of them."""
    if share is target:
        return plan
    cpus = share_cpus(target, ranks_per_host)
    return plan.model_copy(update={"ops": _on_host(plan.ops, cpus)})


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


def _recorded(options: PlanOptions) -> dict:
    """The options as the plan records them. Data parallelism is named only when used, and
    ZeRO-3's decisions only where given or chosen (under a budget:
    planner/pipeline/gathers.py): plans without them read as they did."""
    dp = options.data_parallel
    exclude = {"data_parallel"} if dp.ranks == 1 \
        else {"data_parallel": {"gathers"}} if dp.gathers is None else None
    return options.model_dump(mode="json", exclude=exclude)
