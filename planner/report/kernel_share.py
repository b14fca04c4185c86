"""Each op's share of the machine in the step, beside its kernel's share alone (issue 89): the
gap the plan owns kept apart from the kernels' own.

A kernel alone is what a cost table measured (planner profile, the host's store, or `planner
show --kernels --probe` now): the op's kernel on its signature's shapes at its thread count and
placement, run by itself in a graph of its own, best of repeats, as oneDNN's benchdnn times a
primitive (for convolutions and GEMMs the kernel is oneDNN's primitive with the reorders the
op's layouts ask for). In the step is the plan's predicted span of the op, or what a run took
(an executor's `stats()`: each op's mean seconds over the steps). Per op:

    bound         the op's roofline: max(FLOPs / (peak x threads / cores), bytes / memory
                  bandwidth), from the op registry's work rules (planner.costs.analytical):
                  no kernel on those threads is faster, but for operands held in the
                  caches, which stream faster than memory: a share over 100%
    step share    bound / seconds in the step
    alone share   bound / the kernel's seconds alone: oneDNN's (or the own kernel's)
                  efficiency on these shapes, which no schedule changes
    gap           seconds in the step / seconds alone: > 1 is what running in the step cost
                  (co-running ops, a team waiting, operands in another core's cache), the
                  plan's to win back

Summed over the ops that have both: the step's ops took `in_step` seconds of busy time, their
kernels alone `alone`, and at their bounds `bound`: in_step - alone is the plan's share of
the gap to the machine, alone - bound the kernels'.
"""

from __future__ import annotations

from collections.abc import Mapping

from planner.costs.analytical import op_work
from planner.costs.records import CostTable
from planner.costs.signature import graph_signatures
from planner.ir.record import Record
from planner.plan import Plan
from planner.report.roofline import family_of
from planner.target.records import Target


class OpShare(Record):
    """One op of the step against the machine and against its kernel alone."""

    name: str
    op: str
    family: str
    threads: int
    flops: float
    step_seconds: float
    alone_seconds: float | None
    bound_seconds: float
    step_share: float
    alone_share: float | None
    gap: float | None


class KernelShares(Record):
    """The step's ops (module docstring), heaviest in the step first."""

    measured: bool
    ops: tuple[OpShare, ...]
    in_step: float
    alone: float
    bound: float


def kernel_shares(plan: Plan, target: Target, table: CostTable | None,
                  measured: Mapping[str, float] | None = None) -> KernelShares:
    """Every op of CPU plan `plan` with FLOPs, against `target`'s peaks (the machine it was
    planned for) and `table`'s kernels alone (None: no kernel alone known); in the step as
    predicted, or as `measured` (op name -> mean seconds, an executor's `stats()`)."""
    signatures = graph_signatures(plan.graph)
    recomputed = {m.name: m.node for m in plan.memory.ops if m.kind == "recompute"}
    cpu, cores = target.cpu, target.cores
    rows = []
    for op in plan.ops:
        signature = signatures.get(recomputed.get(op.name, op.name))
        seconds = op.end - op.start if measured is None else measured.get(op.name, 0.0)
        if signature is None or not seconds > 0:
            continue
        work = op_work(signature)
        bound = max(work.flops / (cpu.peak_flops_for(work.math) * max(1, op.threads) / cores),
                    work.bytes / cpu.memory_bandwidth)
        if not bound > 0:
            continue
        alone = _alone(table, signature, op.threads, op.affinity)
        rows.append(OpShare(
            name=op.name, op=signature.op, family=family_of(signature.op), threads=op.threads,
            flops=work.flops, step_seconds=seconds, alone_seconds=alone,
            bound_seconds=bound, step_share=bound / seconds,
            alone_share=None if alone is None else bound / alone,
            gap=None if alone is None else seconds / alone))
    rows.sort(key=lambda r: (-r.step_seconds, r.name))
    both = [r for r in rows if r.alone_seconds is not None]
    return KernelShares(measured=measured is not None, ops=tuple(rows),
                        in_step=sum(r.step_seconds for r in both),
                        alone=sum(r.alone_seconds or 0.0 for r in both),
                        bound=sum(r.bound_seconds for r in both))


def _alone(table: CostTable | None, signature, threads: int, affinity: str) -> float | None:
    """The kernel's measured time alone at this placement (the sample the op was priced from),
    or None where the table has none (the op was priced by the model)."""
    entry = None if table is None else table.entry(signature)
    for sample in () if entry is None else entry.cpu:
        if sample.threads == threads and sample.affinity == affinity:
            return sample.seconds
    return None


def format_kernel_shares(k: KernelShares, top: int = 15) -> str:
    """`planner show --kernels`' lines: the sums, then the `top` heaviest ops."""
    where = "measured (stats)" if k.measured else "predicted"
    lines = [f"ops against their kernels alone (in the step: {where}; alone: the cost table's "
             f"measurement; share: the op's roofline bound over its time):"]
    if k.alone > 0:
        lines.append(f"  busy {k.in_step * 1e3:.3f} ms in the step, {k.alone * 1e3:.3f} ms "
                     f"alone, {k.bound * 1e3:.3f} ms at their bounds: the plan's gap "
                     f"{(k.in_step - k.alone) * 1e3:+.3f} ms, the kernels' "
                     f"{(k.alone - k.bound) * 1e3:+.3f} ms")
    else:
        lines.append("  no kernel of these ops was measured alone (an analytical plan: give a "
                     "table with --costs, or measure them now with --probe)")
    lines.append(f"  {'op':<28} {'type':<14} {'thr':>3} {'MFLOP':>9} {'step ms':>9} "
                 f"{'alone ms':>9} {'step':>6} {'alone':>6} {'gap':>5}")
    for r in k.ops[:top]:
        alone = "-" if r.alone_seconds is None else f"{r.alone_seconds * 1e3:.3f}"
        share = "-" if r.alone_share is None else f"{r.alone_share:.0%}"
        gap = "-" if r.gap is None else f"{r.gap:.2f}"
        lines.append(f"  {_clip(r.name, 28):<28} {_clip(r.op, 14):<14} {r.threads:>3} "
                     f"{r.flops / 1e6:>9.2f} {r.step_seconds * 1e3:>9.3f} {alone:>9} "
                     f"{r.step_share:>6.0%} {share:>6} {gap:>5}")
    if len(k.ops) > top:
        lines.append(f"  ... {len(k.ops) - top} more (--json has them all)")
    return "\n".join(lines)


def _clip(text: str, width: int) -> str:
    printable = "".join(c if c.isprintable() else "?" for c in text)
    return printable if len(printable) <= width else printable[:width - 3] + "..."
