"""Ranks that share a host: each rank its own cores, the comm engine's threads among them.

`torchrun --nproc-per-node L` starts L ranks of a data-parallel plan on one host. Were each
planned for the whole host, all L would pin their lanes to the same CPUs and time-slice them.
Instead the host's cores are cut into L shares of whole cores (SMT siblings stay together),
in core order; every rank runs the same plan (its hash is checked across ranks), made for
share 0, and at load each rank maps the plan's CPUs onto its own share, position by position
(planner.runtime.distributed.join, LOCAL_RANK of LOCAL_WORLD_SIZE).

The comm engine (the executor's comm lane, which runs the all-reduces, and the process
group's own threads, gloo's, which do the transfers and the summing) gets its share's last
core to itself once the share has `COMM_CORE_FROM` cores or more: a share of 4 gives up at
most a quarter of its compute for it, and all-reduces then never take a core from a compute
lane. A smaller share keeps every core for compute, and the comm threads run on the share's
cores beside the lanes (they sleep while waiting on the network). Either way they stay
inside the rank's share: two ranks never run on one core.

    host cores       0   1   2   3   4   5   6   7           (L = 2, 4 cores per share)
    share            0   0   0   0   1   1   1   1
    compute          0   1   2   .   4   5   6   .
    comm                         3               7

Example (a host of 8 cores without SMT, 2 ranks):
    >>> rank_cpus(tuple(range(8)), 2, 1)
    RankCpus(compute=(4, 5, 6), comm=(7,))
    >>> placement(tuple(range(8)), 2, 1)[:4]
    [4, 5, 6, 7]
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import Field

from planner.errors import UserError
from planner.ir.record import CpuId, Record

# The smallest share whose last core the comm engine gets to itself (module docstring).
COMM_CORE_FROM = 4


class RankCpus(Record):
    """One local rank's logical CPUs (host ids, ascending): where its compute lanes run, and
    where its comm engine's threads run (its own core, or the compute CPUs themselves)."""

    compute: tuple[CpuId, ...] = Field(min_length=1)
    comm: tuple[CpuId, ...] = Field(min_length=1)


def _cores(core_of: Sequence[int]) -> list[tuple[CpuId, ...]]:
    # Per core, in core order: its logical CPUs ascending (core_of[cpu id] = its core).
    by: dict[int, list[CpuId]] = {}
    for cpu, core in enumerate(core_of):
        by.setdefault(core, []).append(cpu)
    return [tuple(by[c]) for c in sorted(by)]


def rank_cpus(core_of: Sequence[int], per_host: int, local_rank: int) -> RankCpus:
    """The CPUs of rank `local_rank` of `per_host` ranks on a host whose logical CPU i lies on
    core core_of[i]: every rank floor(cores / per_host) whole cores (leftovers stay idle).
    UserError when the host has fewer cores than ranks."""
    cores = _cores(core_of)
    if not 0 <= local_rank < per_host:
        raise UserError(f"local rank {local_rank} is not one of the {per_host} ranks per host")
    size = len(cores) // per_host
    if size == 0:
        raise UserError(f"{per_host} ranks per host need a core each; the host has "
                        f"{len(cores)}")
    mine = cores[local_rank * size:(local_rank + 1) * size]
    if size >= COMM_CORE_FROM:
        return RankCpus(compute=tuple(c for core in mine[:-1] for c in core), comm=mine[-1])
    every = tuple(c for core in mine for c in core)
    return RankCpus(compute=every, comm=every)


def placement(core_of: Sequence[int], per_host: int, local_rank: int) -> list[CpuId]:
    """Where a plan's logical CPU i runs on local rank `local_rank`: the CPU at the same
    position in that rank's share as i holds in share 0 (the plan's); CPUs outside share 0
    (no op of the plan uses them) keep their ids."""
    here, there = (rank_cpus(core_of, per_host, k) for k in (0, local_rank))
    out = list(range(len(core_of)))
    for a, b in zip(here.compute + here.comm, there.compute + there.comm, strict=True):
        out[a] = b
    return out
