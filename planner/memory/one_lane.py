"""The main schedule as one lane, where that is predicted fastest.

A CPU plan's variants (planner.memory.variants) run its ops on one lane in execution order,
each on its fastest thread count; the one for all the target's cores is a schedule of the same
cores as the main one. The optimized search list-schedules co-running lanes and keeps the best
of them and its baselines (uniform lanes, the paper's strategy), but none of those is "one lane,
each op on its own fastest thread count", and co-running ops pay the measured contention: on
two cores the small LSTM's co-running schedule was predicted 0.18 ms, its own one-lane variant
0.10 ms (issue 60). The plan the planner calls best must not be slower than one it builds
anyway, so when the one-lane schedule of all the cores is predicted shorter than the main step
(memory planning's re-timing included: it is compared after memory planning), it becomes the
main schedule.

It is safe with the plan's memory for the variants' reason: execution order is a linear
extension of every happens-before edge, so one lane running the ops in that order keeps every
ordering the memory plan relies on, and each op's thread count is one whose kernel scratch fits
the area the plan gave it. Its ops run pinned, as the main schedule's do, on the first cores
(compact); every op of the plan is on lane 0.

Example:
    >>> from planner.schedule.record import ScheduledOp
    >>> ops = [ScheduledOp(name=n, op="Relu", cpus=c, threads=len(c), start=0.0, end=1.0)
    ...        for n, c in [("a", (0,)), ("b", (1,))]]
    >>> [(o.cpus, o.start, o.end) for o in one_lane_ops(ops, ((2, 0.5), (1, 0.25)), ((0,), (0, 1)))]
    [((0, 1), 0.0, 0.5), ((0,), 0.5, 0.75)]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from planner.memory.decision import MemoryOp, MemorySummary
from planner.schedule.record import ScheduledOp

Op = TypeVar("Op", bound=ScheduledOp)


def one_lane_ops(ops: Sequence[Op], row: Sequence[tuple[int, float]],
                 cpus_of: Sequence[tuple[int, ...]]) -> tuple[Op, ...]:
    """`ops` (execution order) one after another, op i on row[i] = (threads, seconds), on the
    logical CPUs cpus_of[threads - 1]; no parallel-loop groups (a group runs as one loop of
    one thread count, and the row gives each member its own). Their order is unchanged."""
    out: list[Op] = []
    now = 0.0
    for op, (threads, seconds) in zip(ops, row, strict=True):
        update = {"cpus": cpus_of[threads - 1], "threads": threads, "affinity": "compact",
                  "smt": False, "group": "", "start": now, "end": now + seconds}
        if hasattr(op, "lane"):
            update["lane"] = 0
        out.append(op.model_copy(update=update))
        now += seconds
    return tuple(out)


def faster_one_lane(step: float, rows: Sequence[tuple[int, Sequence[tuple[int, float]]]],
                    cores: int) -> Sequence[tuple[int, float]] | None:
    """The row of the one-lane schedule on all `cores` when it is predicted shorter than
    `step` (the main schedule's), else None (ties keep the main schedule)."""
    for k, row in rows:
        if k == cores and sum(s for _, s in row) < step:
            return row
    return None


def one_lane_memory(summary: MemorySummary, ops: Sequence[ScheduledOp],
                    inserted: Sequence[MemoryOp]) -> MemorySummary:
    """Memory planning's summary with the timings of the one-lane schedule `ops`: its recompute
    ops' seconds, and its stall, the transfers' seconds (on one lane they run between the
    compute ops, not beside them). What the verifier re-derives from the plan's ops."""
    kind = {m.name: m.kind for m in inserted}
    span = {op.name: op.end - op.start for op in ops}
    return summary.model_copy(update={
        "recompute_seconds": sum(s for n, s in span.items() if kind.get(n) == "recompute"),
        "stall_seconds": sum(s for n, s in span.items()
                             if kind.get(n) in ("offload", "prefetch"))})
