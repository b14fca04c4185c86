"""How close a CPU plan's step is to the machine: achieved FLOP/s against the target's peak, per
op family, and the step's roofline bound (issue 60: "faster than eager" was the only yardstick).

From the plan's embedded graph (each node's FLOPs and bytes: the op registry's rules, as the
analytical model reads them, planner.costs.analytical.op_work), its ops' predicted times and
thread counts, and the target's peaks (float32, or the math type the op computes in; memory
bandwidth):

    achieved      the family's FLOPs / its ops' predicted busy seconds
    peak share    the family's FLOPs / sum over its ops of (seconds x peak x threads / cores):
                  an op on t of the P cores can reach at most t / P of the peak
    roofline      max(sum of FLOPs / peak, sum of bytes / memory bandwidth): no schedule of the
                  step on these cores is shorter, whatever runs beside what

Families by the op's cost class (planner.ops): convolutions, GEMMs, pointwise (elementwise),
reductions, and the rest (scatters, data movement, ops without a FLOP rule). Ops memory planning
added (recomputes, copies) count as their node's work where they recompute one, else as none.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping

from planner.costs.analytical import op_work
from planner.costs.signature import graph_signatures
from planner.ir.record import Record
from planner.ops.base import get_op
from planner.plan import Plan
from planner.target.backends import traits
from planner.target.records import Target

FAMILIES = {"conv": "convs", "gemm": "GEMMs", "elementwise": "pointwise",
            "reduction": "reductions"}
OTHER = "other"


class FamilyFigures(Record):
    """One op family's work and predicted time in the step."""

    family: str
    ops: int
    flops: float
    seconds: float
    achieved_flops: float
    peak_share: float


class Roofline(Record):
    """A step against the machine's limits (module docstring)."""

    step_seconds: float
    flops: float
    bytes: float
    peak_flops: float
    memory_bandwidth: float
    compute_seconds: float
    memory_seconds: float
    bound_seconds: float
    achieved_flops: float
    peak_share: float
    families: tuple[FamilyFigures, ...]


def family_of(op: str) -> str:
    """The family an op type is counted in."""
    try:
        return FAMILIES.get(get_op(op).cost_class, OTHER)
    except Exception:  # noqa: BLE001 - an op the registry lacks is counted as other
        return OTHER


def roofline(plan: Plan, target: Target, measured: Mapping[str, float] | None = None,
             step_seconds: float | None = None) -> Roofline:
    """The step of CPU plan `plan` on `target` (the machine it was planned for) against its
    peaks: the plan's predicted times, or with `measured` (op name -> seconds, an executor's
    `stats()`) and `step_seconds` the times a run of it took. ValueError for a plan without
    CPU ops or a target without a CPU."""
    if target.cpu is None or not traits(plan).host_cores:
        raise ValueError(f"plan of {plan.graph.name!r}: the roofline is a CPU plan's "
                         f"(backend {plan.backend!r}, target {target.name!r})")
    cpu, cores = target.cpu, target.cores
    signatures = graph_signatures(plan.graph)
    recomputed = {m.name: m.node for m in plan.memory.ops if m.kind == "recompute"}
    acc: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0, 0.0])
    flops = nbytes = compute = 0.0
    for op in plan.ops:
        node = recomputed.get(op.name, op.name)
        signature = signatures.get(node)
        seconds = op.end - op.start if measured is None else measured[op.name]
        if signature is None:  # a copy memory planning added: time, no work
            a = acc[OTHER]
            a[0], a[2] = a[0] + 1, a[2] + seconds
            continue
        work = op_work(signature)
        peak = cpu.peak_flops_for(work.math)
        a = acc[family_of(signature.op)]
        a[0] += 1
        a[1] += work.flops
        a[2] += seconds
        a[3] += seconds * peak * max(1, op.threads) / cores
        flops += work.flops
        nbytes += work.bytes
        compute += work.flops / peak
    families = tuple(
        FamilyFigures(family=f, ops=int(a[0]), flops=a[1], seconds=a[2],
                      achieved_flops=a[1] / a[2] if a[2] else 0.0,
                      peak_share=a[1] / a[3] if a[3] else 0.0)
        for f in (*FAMILIES.values(), OTHER) if (a := acc.get(f)) is not None)
    step = plan.summary.step_seconds if step_seconds is None else step_seconds
    memory = nbytes / cpu.memory_bandwidth
    return Roofline(step_seconds=step, flops=flops, bytes=nbytes, peak_flops=cpu.peak_flops,
                    memory_bandwidth=cpu.memory_bandwidth, compute_seconds=compute,
                    memory_seconds=memory, bound_seconds=max(compute, memory),
                    achieved_flops=flops / step if step else 0.0,
                    peak_share=compute / step if step else 0.0, families=families)


def format_roofline(r: Roofline) -> str:
    """`planner show`'s lines for a roofline."""
    lines = [f"against the machine (peak {r.peak_flops / 1e9:.1f} GFLOP/s float32, memory "
             f"{r.memory_bandwidth / 1e9:.1f} GB/s; predicted times):",
             f"  step        {r.flops / 1e9:.3f} GFLOP, {r.bytes / 1e6:.1f} MB moved: "
             f"{r.achieved_flops / 1e9:.1f} GFLOP/s, {r.peak_share:.1%} of peak",
             f"  roofline    {r.bound_seconds * 1e3:.3f} ms (compute "
             f"{r.compute_seconds * 1e3:.3f}, memory {r.memory_seconds * 1e3:.3f}); step / "
             f"roofline {r.step_seconds / r.bound_seconds if r.bound_seconds else 0.0:.2f}",
             "  by family (ops, GFLOP, busy ms, GFLOP/s, share of the peak of its threads):"]
    lines += [f"  {f.family:<11} {f.ops:>5} {f.flops / 1e9:>9.3f} {f.seconds * 1e3:>9.3f} "
              f"{f.achieved_flops / 1e9:>9.1f}  {f.peak_share:.1%}" for f in r.families]
    return "\n".join(lines)
