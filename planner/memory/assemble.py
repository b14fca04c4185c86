"""Memory decisions as records: buffers as TensorPlan records (ordered by first write, then
name), reuse edges as named Edges (by the later op's position, then the earlier's), so plan
files diff well. Pure: returns a new MemoryDecision.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import TypeAdapter

from planner.memory.decision import MemoryDecision, MemorySummary, TensorPlan
from planner.memory.layout import Layout
from planner.memory.liveness import Buffer
from planner.schedule.record import Edge, ScheduledOp

TENSOR_PLANS = TypeAdapter(tuple[TensorPlan, ...])


def tensor_plans(buffers: Sequence[Buffer], layout: Layout, ops: Sequence[ScheduledOp]
                 ) -> tuple[TensorPlan, ...]:
    """TensorPlan records of buffers placed by `layout`; ops by index into `ops`, which are in
    execution order (so an op's index is its order)."""
    n = len(ops)

    def order(i: int) -> int:
        return -1 if i < 0 else n if i >= n else i

    # Validated in one call (TensorPlan(...) one by one costs 1.5x as much).
    records = TENSOR_PLANS.validate_python([
        {"name": b.name, "tensor": b.tensor, "bytes": b.bytes, "offset": off,
         "placement": b.placement, "first": order(b.first), "last": order(b.last),
         "writer": ops[b.writer].name if b.writer >= 0 else "",
         "readers": tuple(ops[r].name for r in b.readers), "alias_of": b.alias_of}
        for b, off in zip(buffers, layout.offsets, strict=True)])
    return tuple(sorted(records, key=lambda t: (t.first, t.name)))


def decision(ops: Sequence[ScheduledOp], buffers: Sequence[Buffer], layout: Layout,
             memory: MemorySummary) -> MemoryDecision:
    """The MemoryDecision of buffers placed by `layout` over the schedule's `ops`: the
    buffers, the edges reuse needs, the summary."""
    edges = sorted(set(layout.edges), key=lambda e: (e[1], e[0]))
    return MemoryDecision(
        tensors=tensor_plans(buffers, layout, ops),
        edges=tuple(Edge(before=ops[u].name, after=ops[w].name) for u, w in edges),
        summary=memory)
