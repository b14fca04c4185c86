"""Schedule variants: how a CPU plan runs when the process is granted fewer free cores.

The main schedule owns its cores: pinned OpenMP teams co-running on lanes. Beside other busy
processes (data-loader workers, a neighbour's job) a pinned thread waits for its one CPU and a
team's join for the slowest of them, and the step falls behind one that simply asks the OS for
threads. So a plan also carries, per core count k in the halvings of the target's cores down to
one, a variant (the same thread counts are kept once, under the fewest cores they need): every
op on ONE unpinned lane, in the plan's execution order, with the thread count that is fastest on
at most k threads by the same cost model.

A variant is derived from the main schedule, not solved again: the order, the ops and their
scratch areas are the main schedule's, and each op is only re-timed. Each signature's time on
1..cores threads is priced once (one curve, shared by the variants and by the ops with that
signature), and an op's scratch is checked for the fastest thread counts first, so a plan's
variants cost a small fraction of its main schedule (inception_v3 b16, 1,018 ops on 68 cores:
0.1 s, where one variant per core count up to 16 priced each op 238 times: 6 s).

Why one lane in execution order is safe with the plan's memory: `order` is a linear extension
of every happens-before edge (memory reuse's included), so a single lane running the ops in
that order keeps every ordering the main schedule guarantees; the arena's offsets and
lifetimes hold unchanged. An op's thread count is one whose kernel scratch fits the area the
plan gave that op (planner.memory.scratch), so no variant needs memory the plan did not plan.

Every variant computes the main schedule's bits: the executor's own reductions split by the
data, not the team, and the ops whose oneDNN primitive splits by its team (THREAD_BOUND) keep
the main schedule's thread count in every variant (main_bits_rows), so a switch changes the
step's time, never its numbers (docs/executor.md, "Which ops' bits depend on the thread count").

It is memory planning's last step (and lives here) because a variant is bound by the memory
decision: the ops memory planning added, the execution order its reuse needs, each op's scratch
area. The executor picks one at run time from what it measures (docs/executor.md); `planner verify`
checks every variant (planner.verify.variants).

Example:
    >>> core_counts(2), core_counts(20), core_counts(68)
    ((2, 1), (20, 10, 5, 2, 1), (68, 34, 17, 8, 4, 2, 1))
"""

from __future__ import annotations

import warnings
from bisect import bisect_left
from collections.abc import Callable, Sequence

from pydantic import Field

from planner.costs.model import CostModel, MissingCostWarning
from planner.costs.signature import OpSignature, graph_signatures
from planner.ir.graph import Graph
from planner.ir.record import Record, Seconds
from planner.memory.decision import MemoryOp, TensorPlan
from planner.memory.scratch import scratch_by_threads
from planner.ops.base import TensorType
from planner.schedule.record import ScheduledOp


class ScheduleVariant(Record):
    """One variant: `threads[i]` is the thread count of the plan's i-th op in execution
    order; all ops run on one unpinned lane in that order. `step_seconds`: its predicted
    step (the ops one after another)."""

    name: str = Field(pattern=r"^cores-\d+$")
    cores: int = Field(ge=1)
    step_seconds: Seconds
    threads: tuple[int, ...]


def core_counts(cores: int) -> tuple[int, ...]:
    """The core counts a plan for `cores` cores carries variants for, largest first: the
    halvings of `cores` (a process granted 50 of 68 cores runs the 34-core variant: at most
    half the granted cores idle, and a plan carries log2(cores) variants, not cores)."""
    counts = [cores]
    while counts[-1] > 1:
        counts.append(counts[-1] // 2)
    return tuple(counts)


def schedule_variants(graph: Graph, ops: Sequence[ScheduledOp], inserted: Sequence[MemoryOp],
                      tensors: Sequence[TensorPlan], model: CostModel
                      ) -> tuple[ScheduleVariant, ...]:
    """The variants of a CPU plan whose ops are `ops` in execution order (graph nodes and
    memory planning's `inserted` ops), its buffers `tensors`, priced by `model`."""
    return variants_of(one_lane_rows(graph, ops, inserted, tensors, model))


# Per core count k (smallest first): k, and every op's (threads, seconds) on at most k
# threads, in execution order.
Rows = tuple[tuple[int, tuple[tuple[int, float], ...]], ...]


def main_bits_rows(rows: Rows, ops: Sequence[ScheduledOp]) -> Rows:
    """`rows` with every THREAD_BOUND op of the main schedule `ops` (execution order, as
    `rows`) on its main thread count at every core count: its time there, stretched by
    threads / cores where the count exceeds the cores (an oversubscribed team). The
    one-lane main schedule is chosen from the rows before this (any thread count is the main
    schedule's own there); the variants from the rows after it."""
    kept = {i: (op.threads, op.end - op.start) for i, op in enumerate(ops)
            if op.op in THREAD_BOUND and op.threads > 1}
    if not kept:
        return rows
    return tuple((k, tuple((kept[i][0], kept[i][1] * max(1.0, kept[i][0] / k)) if i in kept
                           else cell for i, cell in enumerate(row)))
                 for k, row in rows)


def variants_of(rows: Rows) -> tuple[ScheduleVariant, ...]:
    """The variants of `one_lane_rows`' rows: a larger count that gives the same thread
    counts is the same schedule, kept once under the fewest cores it needs."""
    out: list[ScheduleVariant] = []
    for k, row in rows:
        threads, seconds = zip(*row, strict=True) if row else ((), ())
        if not out or out[-1].threads != threads:
            out.append(ScheduleVariant(name=f"cores-{k}", cores=k, step_seconds=sum(seconds),
                                       threads=threads))
    return tuple(reversed(out))


def one_lane_rows(graph: Graph, ops: Sequence[ScheduledOp], inserted: Sequence[MemoryOp],
                  tensors: Sequence[TensorPlan], model: CostModel) -> Rows:
    """Per core count of `core_counts` (smallest first), every op's thread count and seconds
    on one lane in execution order (the variants before duplicates are dropped)."""
    signatures = graph_signatures(graph)
    kernel_of = {m.name: m.node for m in inserted if m.kind == "recompute"}
    area = {t.writer: t.bytes for t in tensors if not t.tensor and t.writer}
    types = {t.name: TensorType(t.shape, t.dtype) for t in graph.tensors}
    counts = core_counts(model.target.cores)
    curves = _Curves(model)
    # Per signature, its scratch by thread count, asked for lazily (the fastest counts first).
    scratch: dict[int, tuple[Callable[[int], int], dict[int, int]]] = {}
    # Per op, per count k (smallest first): its thread count and seconds on at most k threads;
    # alike ops (one signature object: graph_signatures) with alike scratch areas share one.
    columns: list[list[tuple[int, float]]] = []
    alike: dict[tuple[int, int], list[tuple[int, float]]] = {}
    for op in ops:
        node = graph.node_map.get(kernel_of.get(op.name, op.name))
        if node is None:  # a transfer: a copy, its planned time on at most k threads
            columns.append([(t, (op.end - op.start) * op.threads / t)
                            for t in (min(op.threads, k) for k in reversed(counts))])
            continue
        signature = signatures[node.name]
        budget = area.get(op.name, 0)
        if (id(signature), budget) in alike:
            columns.append(alike[id(signature), budget])
            continue

        # Alike nodes share one signature object (graph_signatures): one scratch figure.
        if id(signature) not in scratch:
            ins = [types[i] for i in node.inputs]
            outs = [types[o] for o in node.outputs]
            scratch[id(signature)] = (scratch_by_threads(node, ins, outs, model.table,
                                                         signature), {})
        rule, known = scratch[id(signature)]

        def fits(t: int, rule=rule, known=known, budget=budget) -> bool:
            if t not in known:
                known[t] = rule(t)
            return known[t] <= budget

        column = _fastest(curves.of(signature), counts[::-1], fits)
        alike[id(signature), budget] = column
        columns.append(column)
    # Per count, every op's (threads, seconds) in execution order (zip: a transpose in C).
    rows = zip(*columns, strict=True) if columns else [()] * len(counts)
    return tuple(zip(reversed(counts), rows, strict=True))


# Ops whose oneDNN primitive splits a reduction by its thread count (another count rounds
# differently: docs/executor.md, "Busy machines" lists the harness's findings): a variant
# runs them with the main schedule's thread count, so every variant computes the main
# schedule's bits; on fewer cores than that count the team is oversubscribed, and priced so
# (its time on its threads, stretched by threads / cores).
THREAD_BOUND = frozenset({
    "Conv2DBackpropFilter", "MatMul", "LayerNormGrad",
})


class _Curves:
    """Each signature's seconds on 1..cores threads (compact), priced once: as an array from
    the analytical model, sample by sample from a cost table."""

    def __init__(self, model: CostModel) -> None:
        self.model = model
        self.memo: dict[int, tuple[OpSignature, list[tuple[float, int]]]] = {}

    def of(self, signature: OpSignature) -> list[tuple[float, int]]:
        """(seconds, threads) for every thread count, fastest first (ties: fewer threads)."""
        hit = self.memo.get(id(signature))
        if hit is not None:
            return hit[1]
        model, cores = self.model, self.model.target.cores
        entry = model.table.entry(signature) if model.table is not None else None
        if entry is None or not entry.cpu:
            seconds = model.analytical_curve(signature).tolist()
        else:
            # The main schedule already warned about signatures the table lacks.
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", MissingCostWarning)
                seconds = [model.time(signature, t).seconds for t in range(1, cores + 1)]
        ranked = sorted(zip(seconds, range(1, cores + 1), strict=True))
        # Keyed by identity (graph_signatures shares one object among alike nodes); the
        # signature is held so its id is not reused.
        self.memo[id(signature)] = (signature, ranked)
        return ranked


def _fastest(ranked: list[tuple[float, int]], ks: Sequence[int], fits: Callable[[int], bool]
             ) -> list[tuple[int, float]]:
    """Per count k of `ks` (ascending): the fastest thread count up to k whose scratch fits
    (ties: fewer threads), with its seconds; one thread if none fits.

    One pass over `ranked` for all of them: the first count that fits answers every count
    at or above it still unanswered, so each thread count is checked once (per k, a scan
    from the fastest checked the fast ones again for every k)."""
    out: list[tuple[int, float] | None] = [None] * len(ks)
    waiting = len(ks)  # ks[:waiting] are unanswered: those below every count that fit
    for s, t in ranked:
        if not waiting:
            break
        if t <= ks[waiting - 1] and fits(t):
            answered = bisect_left(ks, t, 0, waiting)
            out[answered:waiting] = [(t, s)] * (waiting - answered)
            waiting = answered
    if waiting:
        one = next(s for s, t in ranked if t == 1)
        out[:waiting] = [(1, one)] * waiting
    return out  # type: ignore[return-value]
