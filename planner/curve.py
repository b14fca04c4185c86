"""`planner fit --pareto`: predicted step time against memory budget, one plan per point, from
the smallest feasible budget (at or above the per-op bound) to the unconstrained arena.

    budgets   smallest feasible ... unconstrained arena, `points` of them evenly spaced
    plan      each budget planned by the pipeline (verified), its hash and its decisions
              (the graph nodes recomputed, the tensors offloaded)
    monotone  walking up the budgets, a plan predicted slower than the best one of a smaller
              budget is replaced by that one (it fits the larger budget too): a user who buys
              memory never gets a slower step

Why replace rather than re-search: the budget search is greedy (planner.memory.budget.search), so a
larger budget may stop at a state whose layout or lane order happens to be slower; the smaller
budget's plan is a plan that is known to fit and known to be faster.

Everything is a pure function of its inputs: the same graph, target, costs and options give
the same curve, byte for byte (`Curve.to_json`).

Example:
    >>> from planner.frontend.autodiff import Optimizer, make_training_graph
    >>> from planner.target import preset
    >>> from planner.zoo import build
    >>> g = make_training_graph(build("mlp", batch=16, hidden=[64], in_features=32,
    ...                               classes=4), Optimizer(kind="sgd"))
    >>> c = budget_curve(g, preset("xeon-8180"), points=3).curve
    >>> steps = [p.step_seconds for p in c.points]
    >>> steps == sorted(steps, reverse=True) and c.points[-1].budget_bytes == c.free_bytes
    True
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

from pydantic import Field

from planner.costs import CostTable
from planner.errors import InfeasibleBudget
from planner.ir.graph import Graph
from planner.ir.record import Bytes, Record, Seconds, canonical_json
from planner.pipeline import PlanOptions, plan
from planner.plan import Plan, digest
from planner.target.records import Target


class CurvePoint(Record):
    """One budget and the plan that it gets (`plan_budget_bytes` < `budget_bytes` when the
    plan of a smaller budget replaced a slower one)."""

    budget_bytes: Bytes
    plan_budget_bytes: Bytes
    plan_sha256: str
    peak_bytes: Bytes
    load_bytes: Bytes
    step_seconds: Seconds
    recompute_seconds: Seconds = 0.0
    # The host store of offloaded copies, beside the arena (on a CPU: the same memory).
    host_bytes: Bytes = 0
    # Graph nodes run again in backward, and tensors sent to the host store and back.
    recompute: tuple[str, ...] = ()
    offload: tuple[str, ...] = ()


class Curve(Record):
    """The step-time / memory-budget curve of one graph on one target (module docstring)."""

    graph: str
    graph_sha256: str
    target: str
    target_sha256: str
    costs_sha256: str = ""
    options: dict[str, Any] = Field(default_factory=dict)
    per_op_bound_bytes: Bytes
    smallest_bytes: Bytes
    free_bytes: Bytes
    points: tuple[CurvePoint, ...]

    def to_json(self) -> str:
        return canonical_json(self.model_dump(mode="json"))


@dataclass(frozen=True)
class CurvePlans:
    """The curve and the plans its points name, by plan_sha256 (for `--measure`)."""

    curve: Curve
    plans: dict[str, Plan]


def decisions(p: Plan) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(graph nodes recomputed, tensors offloaded) of a plan, sorted."""
    tensor_of = {t.name: t.tensor or t.name for t in p.tensors}
    recompute = sorted({o.node for o in p.memory.ops if o.kind == "recompute"})
    offload = sorted({tensor_of.get(o.inputs[0], o.inputs[0])
                      for o in p.memory.ops if o.kind == "offload" and o.inputs})
    return tuple(recompute), tuple(offload)


def _point(budget: int, p: Plan) -> CurvePoint:
    m = p.summary.memory
    assert m is not None
    recompute, offload = decisions(p)
    return CurvePoint(budget_bytes=budget, plan_budget_bytes=m.budget_bytes or budget,
                      plan_sha256=digest(p.to_json()), peak_bytes=m.arena_bytes,
                      load_bytes=m.load_bytes, step_seconds=p.summary.step_seconds,
                      recompute_seconds=m.recompute_seconds, host_bytes=m.host_bytes,
                      recompute=recompute,
                      offload=offload)


def _plan(graph: Graph, target: Target, table: CostTable | None, options: PlanOptions,
          budget: int | None) -> Plan:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return plan(graph, target, table, options.model_copy(update={
            "memory": options.memory.model_copy(update={"budget_bytes": budget})}))


# Each point is a plan made under its budget (seconds each on a large graph): a curve of more
# points than a plot can show would run for hours.
MAX_POINTS = 200


def budgets_between(lo: int, hi: int, points: int) -> list[int]:
    """`points` budgets evenly spaced from lo to hi, both included, without repeats.

    >>> budgets_between(100, 200, 5), budgets_between(7, 7, 4)
    ([100, 125, 150, 175, 200], [7])
    """
    if points < 2 or hi <= lo:
        return [hi]
    return sorted({lo + (hi - lo) * k // (points - 1) for k in range(points)})


def budget_curve(graph: Graph, target: Target, table: CostTable | None = None,
                 options: PlanOptions | None = None, points: int = 10) -> CurvePlans:
    """The curve of `graph` on `target` (module docstring); `options.memory.budget_bytes` is
    ignored (each point sets its own). Raises InfeasibleBudget only if no budget at all fits
    (the unconstrained plan does not fit the target's memory)."""
    if not 2 <= points <= MAX_POINTS:
        raise ValueError(f"a curve has 2 to {MAX_POINTS} points, got {points}")
    options = options or PlanOptions()
    free = _plan(graph, target, table, options, None)
    m = free.summary.memory
    assert m is not None
    top = m.arena_bytes
    try:
        _plan(graph, target, table, options, m.per_op_bound_bytes)
        smallest = m.per_op_bound_bytes
    except InfeasibleBudget as e:
        smallest = min(max(e.smallest_bytes, m.per_op_bound_bytes), top)
    plans: dict[str, Plan] = {}
    out: list[CurvePoint] = []
    best: CurvePoint | None = None
    for budget in budgets_between(smallest, top, points):
        try:
            p = _plan(graph, target, table, options, budget)
        except InfeasibleBudget:
            # The smallest budget is the least arena the search saw, a bound: one probe can
            # miss it. A point that does not fit is no point of the curve.
            continue
        point = _point(budget, p)
        if best is not None and point.step_seconds > best.step_seconds:
            point = best.model_copy(update={"budget_bytes": budget})
        else:
            plans[point.plan_sha256] = p
            best = point
        out.append(point)
    if not out:
        raise InfeasibleBudget(f"graph {graph.name!r}: no budget between {smallest} and {top} "
                               f"bytes gave a plan", top)
    return CurvePlans(Curve(
        graph=graph.name, graph_sha256=free.provenance.graph_sha256, target=target.name,
        target_sha256=free.provenance.target_sha256,
        costs_sha256=free.provenance.costs_sha256,
        options={k: v for k, v in free.provenance.options.items() if k != "memory"},
        per_op_bound_bytes=m.per_op_bound_bytes, smallest_bytes=smallest, free_bytes=top,
        points=tuple(out)), plans)


def format_curve(curve: Curve) -> str:
    """The curve as a table, one line per point."""
    from planner.memory.options import format_bytes

    lines = [f"budget curve of {curve.graph} on {curve.target}: per-op bound "
             f"{format_bytes(curve.per_op_bound_bytes)}, smallest feasible "
             f"{format_bytes(curve.smallest_bytes)}, unconstrained "
             f"{format_bytes(curve.free_bytes)}",
             f"  {'budget':>11} {'peak':>11} {'host':>11} {'step ms':>9} {'recompute':>9} "
             f"{'offload':>7}  plan"]
    for p in curve.points:
        note = "" if p.plan_budget_bytes == p.budget_bytes else \
            f"  (the plan of budget {format_bytes(p.plan_budget_bytes)}: faster)"
        lines.append(f"  {format_bytes(p.budget_bytes):>11} {format_bytes(p.peak_bytes):>11} "
                     f"{format_bytes(p.host_bytes):>11} {p.step_seconds * 1e3:>9.3f} "
                     f"{len(p.recompute):>9} {len(p.offload):>7}"
                     f"  {p.plan_sha256[:12]}{note}")
    return "\n".join(lines)


def enough_memory(curve: Curve, within: float = 0.01) -> CurvePoint:
    """The point of smallest budget whose predicted step is within `within` of the fastest:
    memory beyond it buys nothing (the plot rings it).

    >>> c = Curve(graph="g", graph_sha256="", target="t", target_sha256="",
    ...           per_op_bound_bytes=1, smallest_bytes=1, free_bytes=4, points=tuple(
    ...     CurvePoint(budget_bytes=b, plan_budget_bytes=b, plan_sha256=str(b), peak_bytes=b,
    ...                load_bytes=b, step_seconds=s) for b, s in ((1, 2.0), (2, 1.005), (4, 1.0))))
    >>> enough_memory(c).budget_bytes
    2
    """
    best = min(p.step_seconds for p in curve.points)
    return min((p for p in curve.points if p.step_seconds <= best * (1 + within)),
               key=lambda p: p.budget_bytes)
