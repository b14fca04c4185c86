"""Schedule variants: how a CPU plan runs when the process is granted fewer free cores.

The main schedule owns its cores: pinned OpenMP teams co-running on lanes. Beside other busy
processes (data-loader workers, a neighbour's job) a pinned thread waits for its one CPU and a
team's join for the slowest of them, and the step falls behind one that simply asks the OS for
threads. So a plan also carries, per core count k from the target's cores down to one, a
variant (the same thread counts are kept once, under the fewest cores they need): every op on
ONE unpinned lane, in the plan's execution order, with the thread count
that is fastest on at most k threads by the same cost model.

Why one lane in execution order is safe with the plan's memory: `order` is a linear extension
of every happens-before edge (memory reuse's included), so a single lane running the ops in
that order keeps every ordering the main schedule guarantees; the arena's offsets and
lifetimes hold unchanged. An op's thread count is one whose kernel scratch fits the area the
plan gave that op (planner.memory.scratch), so no variant needs memory the plan did not plan.

It is memory planning's last step (and lives here) because a variant is bound by the memory
decision: the ops memory planning added, the execution order its reuse needs, each op's scratch
area. The executor picks one at run time from what it measures (docs/executor.md); `planner verify`
checks every variant (planner.verify.variants).

Example:
    >>> core_counts(2), core_counts(20)[:3], core_counts(68)[-4:]
    ((2, 1), (20, 16, 15), (4, 3, 2, 1))
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

from pydantic import Field

from planner.costs.model import CostModel, MissingCostWarning
from planner.costs.signature import graph_signatures
from planner.graph.ir import Graph
from planner.memory.decision import MemoryOp, TensorPlan
from planner.memory.scratch import kernel_scratch
from planner.ops.base import TensorType
from planner.records import Record, Seconds
from planner.schedule.record import ScheduledOp

# Up to this many cores every count gets a variant; above, halvings of the full count (a
# process granted 50 of 68 cores runs the 34-core variant: at most half the cores idle).
EVERY_COUNT_UP_TO = 16


class ScheduleVariant(Record):
    """One variant: `threads[i]` is the thread count of the plan's i-th op in execution
    order; all ops run on one unpinned lane in that order. `step_seconds`: its predicted
    step (the ops one after another)."""

    name: str = Field(pattern=r"^cores-\d+$")
    cores: int = Field(ge=1)
    step_seconds: Seconds
    threads: tuple[int, ...]


def core_counts(cores: int) -> tuple[int, ...]:
    """The core counts a plan for `cores` cores carries variants for, largest first."""
    counts = set(range(1, min(cores, EVERY_COUNT_UP_TO) + 1))
    k = cores
    while k > EVERY_COUNT_UP_TO:
        counts.add(k)
        k //= 2
    return tuple(sorted(counts, reverse=True))


def schedule_variants(graph: Graph, ops: Sequence[ScheduledOp], inserted: Sequence[MemoryOp],
                      tensors: Sequence[TensorPlan], model: CostModel
                      ) -> tuple[ScheduleVariant, ...]:
    """The variants of a CPU plan whose ops are `ops` in execution order (graph nodes and
    memory planning's `inserted` ops), its buffers `tensors`, priced by `model`."""
    signatures = graph_signatures(graph)
    kernel_of = {m.name: m.node for m in inserted if m.kind == "recompute"}
    area = {t.writer: t.bytes for t in tensors if not t.tensor and t.writer}
    types = {t.name: TensorType(t.shape, t.dtype) for t in graph.tensors}
    out: list[ScheduleVariant] = []
    # Smallest count first: a larger count that gives the same thread counts is the same
    # schedule, kept once under the fewest cores it needs.
    for k in reversed(core_counts(model.target.cores)):
        threads, seconds = [], 0.0
        for op in ops:
            node = graph.node_map.get(kernel_of.get(op.name, op.name))
            if node is None:  # a transfer: a copy, its planned time on at most k threads
                t = min(op.threads, k)
                threads.append(t)
                seconds += (op.end - op.start) * op.threads / t
                continue
            ins = [types[i] for i in node.inputs]
            outs = [types[o] for o in node.outputs]
            fits = [t for t in range(1, k + 1)
                    if kernel_scratch(node, ins, outs, t, model.table) <= area.get(op.name, 0)]
            t, s = _fastest(model, signatures[node.name], fits or [1])
            threads.append(t)
            seconds += s
        if not out or out[-1].threads != tuple(threads):
            out.append(ScheduleVariant(name=f"cores-{k}", cores=k, step_seconds=seconds,
                                       threads=tuple(threads)))
    return tuple(reversed(out))


def _fastest(model: CostModel, signature, counts: Sequence[int]) -> tuple[int, float]:
    # The main schedule already warned about signatures the table lacks.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MissingCostWarning)
        times = [(model.time(signature, t).seconds, t) for t in counts]
    s, t = min(times)
    return t, s
