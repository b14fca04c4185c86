"""What a rank that shares its host plans for: share 0 of the host's cores
(planner.target.shares), as a Target of its own.

Example (a Xeon 8180 of 28 cores, 2 ranks: 13 compute cores each, the 14th the comm
engine's):
    >>> from planner.target import preset
    >>> share_target(preset("xeon-8180"), 2).cores
    13
"""

from __future__ import annotations

from planner.errors import UserError
from planner.ir.record import CpuId
from planner.target.records import CPU, LogicalCPU, Target
from planner.target.shares import rank_cpus


def share_cpus(target: Target, per_host: int) -> tuple[CpuId, ...]:
    """The host ids of the logical CPUs one of `per_host` ranks plans for (share 0's compute
    CPUs, ascending); UserError when the target's CPUs are not numbered 0..n-1."""
    core_of = tuple(c.core for c in target.logical_cpus)
    if [c.id for c in target.logical_cpus] != list(range(len(core_of))):
        raise UserError(f"target {target.name!r}: ranks per host need logical CPUs "
                        f"numbered 0..n-1")
    return tuple(sorted(rank_cpus(core_of, per_host, 0).compute))


def share_target(target: Target, per_host: int) -> Target:
    """The machine one of `per_host` ranks plans for: share 0's compute CPUs, renumbered
    0..m-1 in order (share_cpus(target, per_host)[i] is CPU i's host id), that share of the
    CPU's peaks and of host memory. `target` itself when the share is the whole host.

    >>> from planner.target import preset
    >>> half = share_target(preset("xeon-8180"), 2)
    >>> half.cores, len(half.logical_cpus), half.logical_cpus[13].smt_siblings
    (13, 26, (0,))
    """
    keep = share_cpus(target, per_host)
    if len(keep) == len(target.logical_cpus):
        return target
    new = {old: i for i, old in enumerate(keep)}
    cpus = [c for c in target.logical_cpus if c.id in new]
    core = {k: i for i, k in enumerate(sorted({c.core for c in cpus}))}
    group = {k: i for i, k in enumerate(sorted({c.cache_group for c in cpus}))}
    fraction = len(core) / target.cores
    cpu = target.cpu
    assert cpu is not None  # logical CPUs come with one
    return target.model_copy(update={
        "host_memory_bytes": max(1, target.host_memory_bytes // per_host),
        "cpu": CPU(**{**cpu.__dict__, "peak_flops": cpu.peak_flops * fraction,
                      "math_peak_flops": cpu.math_peak_flops and {
                          k: v * fraction for k, v in cpu.math_peak_flops.items()},
                      "memory_bandwidth": cpu.memory_bandwidth * fraction}),
        "logical_cpus": tuple(LogicalCPU(**{
            **c.__dict__, "id": new[c.id], "core": core[c.core],
            "cache_group": group[c.cache_group],
            "smt_siblings": tuple(new[s] for s in c.smt_siblings)}) for c in cpus)})
