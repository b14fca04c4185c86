"""Write memory decisions into a Plan: buffers as TensorPlan records, added ops and edges, and
the memory summary. Pure: returns a new Plan.

Buffers are listed by first write, then name; happens-before edges keep the schedule's sort
(by the later op's order, then the earlier's), so plan files diff well.
"""

from __future__ import annotations

from collections.abc import Sequence

from planner.memory.layout import Layout
from planner.memory.liveness import Buffer
from planner.memory.order import OpIndex
from planner.plan import Edge, MemoryPlan, MemorySummary, OpPlan, Plan, TensorPlan


def tensor_plans(buffers: Sequence[Buffer], layout: Layout, ops: Sequence[OpPlan]
                 ) -> tuple[TensorPlan, ...]:
    """TensorPlan records of buffers placed by `layout`; ops by index into `ops`."""
    n = len(ops)

    def order(i: int) -> int:
        return -1 if i < 0 else n if i >= n else ops[i].order

    records = [TensorPlan(name=b.name, tensor=b.tensor, bytes=b.bytes, offset=off,
                          placement=b.placement, first=order(b.first), last=order(b.last),
                          writer=ops[b.writer].name if b.writer >= 0 else "",
                          readers=tuple(ops[r].name for r in b.readers), alias_of=b.alias_of)
               for b, off in zip(buffers, layout.offsets, strict=True)]
    return tuple(sorted(records, key=lambda t: (t.first, t.name)))


def with_memory(plan: Plan, ops: Sequence[OpPlan], buffers: Sequence[Buffer], layout: Layout,
                memory: MemorySummary, extra: MemoryPlan | None = None,
                edges: Sequence[tuple[OpIndex, OpIndex]] = (),
                step_seconds: float | None = None) -> Plan:
    """`plan` with `ops` (in execution order, memory ops included), the buffers, the reuse
    edges and `edges` (ordering the added ops) appended to happens-before, and the summary's
    memory block (and step time, when the added ops changed it)."""
    rank = {op.name: op.order for op in ops}
    named = {(e.before, e.after) for e in plan.happens_before}
    named |= {(ops[u].name, ops[w].name) for u, w in (*layout.edges, *edges)}
    happens = tuple(Edge(before=a, after=b)
                    for a, b in sorted(named, key=lambda e: (rank[e[1]], rank[e[0]])))
    summary = plan.summary.model_copy(update={"memory": memory})
    if step_seconds is not None:
        bound = summary.lower_bound_seconds
        summary = summary.model_copy(update={
            "step_seconds": step_seconds, "ops": len(ops),
            "ratio": step_seconds / bound if bound else 1.0})
    return plan.model_copy(update={
        "ops": tuple(ops), "happens_before": happens,
        "tensors": tensor_plans(buffers, layout, ops), "summary": summary,
        "memory": extra or MemoryPlan()})
