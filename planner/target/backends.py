"""What each backend is, in the words of the layers below planning: where its ops run, what
measures its kernels, how its ranks talk. The target chooses the backend once
(`Target.backend`); everything else asks this table (or planning's, planner.pipeline.BACKENDS,
and codegen's runtimes, codegen.backends.RUNTIMES) instead of comparing backend names, so a
new backend is a row, not a hunt for branches (tests/test_backend_branches.py holds it).

Example:
    >>> from planner.target import preset
    >>> traits(preset("xeon-8180")).placed_by, traits(preset("k40c-12gb")).placed_by
    ('cpus', 'stream')
    >>> BACKEND_TRAITS["cuda"].host_cores, BACKEND_TRAITS["cpu"].host_cores
    (False, True)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

from planner.ir.record import Backend


class Targeted(Protocol):
    """A target (planner.target.records.Target, which reads this table: not imported here)."""

    @property
    def backend(self) -> Backend: ...


@dataclass(frozen=True)
class BackendTraits:
    """One backend's facts that the target, costs and schedule layers read."""

    name: Backend
    # The field of a scheduled op that places it: a CPU op's logical CPUs, a GPU op's stream.
    placed_by: Literal["cpus", "stream"]
    # Whether a step's ops run on the host's cores, each on a number of threads: the graph is
    # rewritten for the cores (planner.step.for_cores), an op has a time per thread count,
    # and the step runs in any process of this host (a GPU's needs a GPU this host lists).
    host_cores: bool
    # Whether its kernels are timed by running its executor on this host's CPUs
    # (codegen/profiling.py): the costs measured for target `host`, measured times folded
    # into a cost table, `curve --measure`; a GPU's are timed by CUDA events
    # (codegen/gpu_profiling.py).
    timed_on_host: bool
    # Whether a convolution's kernel layout is a planning decision from measured costs
    # (oneDNN's blocked layouts: planner.costs.conv_layouts).
    conv_layouts: bool
    # Whether ranks without a preset's interconnect talk over the GPUs' host links (NCCL),
    # rather than gloo over the host's loopback (planner.target.interconnect).
    gpu_links: bool
    # Whether its executor runs sharded parameters (ZeRO-3: planner.step.collectives).
    shards_parameters: bool
    # Whether its executor clips gradient shards (ShardedClipGradNorm: clip_grad_norm with
    # --shard-optimizer or --shard-parameters).
    clips_shards: bool
    # Whether its executor unscales gradient shards and skips sharded updates on overflow
    # (ShardedUnscaleGrads, ShardedUpdate's skip_on_overflow: fp16-mixed with sharding).
    unscales_shards: bool
    # The bytes between a sharded bucket's members and shards: its arena's alignment
    # (planner.memory.options' default on the CPU; planner.memory.gpu's DEVICE_ALIGNMENT on a
    # GPU). The collectives name it in their `alignment` attr (planner.ops.collective).
    bucket_alignment: int
    # Whether an offloaded tensor leaves the memory the budget counts for a slower tier (a
    # GPU's host RAM). A CPU's host store is the same RAM as its arena: offloading there frees
    # no memory of the process, so `planner fit` does not offload on it.
    slower_tier: bool


BACKEND_TRAITS: dict[Backend, BackendTraits] = {
    "cpu": BackendTraits("cpu", placed_by="cpus", host_cores=True, timed_on_host=True,
                         conv_layouts=True, gpu_links=False, shards_parameters=True,
                         clips_shards=True, unscales_shards=True, bucket_alignment=64,
                         slower_tier=False),
    "cuda": BackendTraits("cuda", placed_by="stream", host_cores=False, timed_on_host=False,
                          conv_layouts=False, gpu_links=True, shards_parameters=False,
                          clips_shards=False, unscales_shards=False, bucket_alignment=256,
                          slower_tier=True),
}


def traits(target: Targeted) -> BackendTraits:
    """The traits of the backend that runs `target`'s plans."""
    return BACKEND_TRAITS[target.backend]


def channel_block(target) -> int:
    """Channels per block of the images a step on `target` keeps blocked (planner.step.
    blocked): its CPU's vector floats on a backend whose kernels choose their layouts, else 0
    (every image plain). `target`: a planner.target.records.Target."""
    return (target.cpu.vector_floats or 0) if traits(target).conv_layouts and target.cpu else 0
