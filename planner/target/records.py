"""Target records: the machine a plan is made for, as immutable data with a canonical JSON form.

A Target holds the host's logical CPUs (each with its physical core, SMT siblings, cache-sharing
group and NUMA node), the CPU's peaks, host memory, and any GPUs. Presets (`planner.target.presets`)
and host detection (`planner.target.detect`) both produce these records.

A two-core machine whose cores share an L2 (one cache group), two hardware threads per core:

    logical CPU   0   1   2   3
    core          0   1   0   1      <- CPUs 0 and 2 are SMT siblings on core 0
    cache group   0   0   0   0

Example:
    >>> cpus = tuple(LogicalCPU(id=i, core=i % 2, smt_siblings=((i + 2) % 4,), cache_group=0)
    ...              for i in range(4))
    >>> t = Target(name="toy", host_memory_bytes=2**30, logical_cpus=cpus,
    ...            cpu=CPU(model="toy", peak_flops=1e11, memory_bandwidth=2e10,
    ...                    core_bandwidth=1e10, cache_group_level=2, cache_group_bytes=2**20))
    >>> t.cores, len(t.cache_groups), Target.from_json(t.to_json()) == t
    (2, 1, True)
"""

from __future__ import annotations

import hashlib
from functools import cached_property
from typing import Annotated, Literal

from pydantic import Field, model_validator

from planner.ir.record import Backend, CpuId, Record, canonical_json
from planner.target.backends import BACKEND_TRAITS

# How the threads of one op are placed on cores (seed 002, Section III-C):
#   compact  fill one cache group's cores before the next (threads share the group's cache)
#   spread   one core per cache group in turn (no two threads share a cache while groups remain)
Affinity = Literal["compact", "spread"]
AFFINITIES: tuple[Affinity, ...] = ("compact", "spread")


class LogicalCPU(Record):
    """One hardware thread. `core` and `cache_group` are machine-wide indices from 0."""

    id: CpuId = Field(ge=0)
    core: int = Field(ge=0)
    package: int = Field(default=0, ge=0)
    # The other logical CPUs on the same core, ascending (empty without SMT).
    smt_siblings: tuple[CpuId, ...] = ()
    # The group of cores sharing the cache named by CPU.cache_group_level (a KNL tile).
    cache_group: int = Field(ge=0)
    numa_node: int = Field(default=0, ge=0)


# The math types a processor may have a peak of its own for (tensor cores, AMX tiles): the
# compute type of a convolution or GEMM that reads operands of that dtype, or "tf32" for a
# float32 one of a graph whose math is tf32 on a GPU that has it
# (planner.frontend.passes.precision.compute_type). float32's peak is `peak_flops` itself.
MathType = Literal["bfloat16", "float16", "tf32"]


class Processor(Record):
    """What a CPU and a GPU record share: the float32 peak and the peaks of other math types.

    math_peak_flops: FLOP/s per math type where the hardware runs it faster than float32
    (absent, or a type not listed: the float32 rate, which is what a kernel library falls back
    to without the units). Unset, the field is left out of the JSON, so targets written before
    it existed read and write back unchanged.

    >>> g = GPU(name="g", memory_bytes=1, sm_count=1, peak_flops=1e12, memory_bandwidth=1,
    ...         host_link_bandwidth=1, pinned_host_limit_bytes=0,
    ...         math_peak_flops={"bfloat16": 8e12})
    >>> g.peak_flops_for("bfloat16"), g.peak_flops_for("float16"), g.peak_flops_for("float32")
    (8000000000000.0, 1000000000000.0, 1000000000000.0)
    """

    peak_flops: float = Field(gt=0)
    math_peak_flops: dict[MathType, Annotated[float, Field(gt=0)]] | None = None

    def peak_flops_for(self, math: str) -> float:
        """FLOP/s of kernels computing in `math` (a dtype name; float32's for unlisted types)."""
        return (self.math_peak_flops or {}).get(math, self.peak_flops)


class CPU(Processor):
    """The host processor's peaks. Rates are for all cores together unless named per core.

    peak_flops: FP32 FLOP/s (a datasheet peak for presets, a measured large GEMM for detected
    hosts, which is what kernels can reach); math_peak_flops: bfloat16's from AMX or
    AVX512_BF16 (Processor). memory_bandwidth: bytes/s streamed by all cores;
    core_bandwidth: bytes/s one core streams alone (bandwidth saturates at about
    memory_bandwidth / core_bandwidth cores). vector_floats: float32 lanes of the widest
    vectors its kernel library runs (16 with AVX-512, 8 with AVX2): the channel block of
    oneDNN's blocked layouts there (planner.step.blocked); unset (a preset), no activation is
    kept blocked.
    """

    model: str
    memory_bandwidth: float = Field(gt=0)
    core_bandwidth: float = Field(gt=0)
    # The cache level whose sharing defines cache groups (2 for a KNL tile's L2) and its size.
    cache_group_level: int = Field(ge=0)
    cache_group_bytes: int = Field(ge=0)
    # Left out of the JSON when unset, so targets written before it read and write back
    # unchanged.
    vector_floats: Literal[8, 16] | None = Field(default=None, exclude_if=lambda v: v is None)
    # What identifies the machine (planner.target.host_cache.machine_key: a digest of the CPU
    # model, its ISA flags, the logical CPUs' topology, the cache group and the cgroup CPU
    # quota), set by host detection; unset (a preset), left out of the JSON.
    machine: str | None = Field(default=None, exclude_if=lambda v: v is None)


# The CPU figures host detection measures (planner.target.measure): they move with the
# machine's load and are measured again when it is quiet, so they are values kept for a
# machine, never part of what identifies it (Target.identity).
MEASURED_FIGURES = frozenset({"peak_flops", "math_peak_flops", "memory_bandwidth",
                              "core_bandwidth"})


# A kernel stream's cuDNN and cuBLAS handles with their first-use allocations where the target
# has no measurement: none counted, as plans were made before the field (about 23 MB each by
# the one H100 reading, 70 MB for 3 streams; counting that by default would move every GPU
# plan made under a budget, toy budgets of a few MB included, before it is measured).
STREAM_LIBRARY_BYTES = 0


def cublas_workspace(compute_capability: str) -> int:
    """cuBLAS's recommended workspace (its cublasSetWorkspace documentation): 32 MiB on Hopper
    and newer, 4 MiB before.

    >>> cublas_workspace("9.0") // 2**20, cublas_workspace("8.0") // 2**20
    (32, 4)
    """
    major = int(compute_capability.split(".")[0]) if compute_capability else 0
    return (32 if major >= 9 else 4) * 2**20


class GPU(Processor):
    """One GPU. Rates in FLOP/s and bytes/s; host_link_bandwidth is one direction, pinned.
    peak_flops is FP32 on the CUDA cores; math_peak_flops the dense tensor-core rates."""

    name: str
    memory_bytes: int = Field(gt=0)
    sm_count: int = Field(gt=0)
    memory_bandwidth: float = Field(gt=0)
    host_link_bandwidth: float = Field(gt=0)
    # Most host memory the planner may pin for offload (page-locked buffers).
    pinned_host_limit_bytes: int = Field(ge=0)
    # DMA engines: 2 lets a host-to-device and a device-to-host copy overlap with each other.
    copy_engines: int = Field(default=2, ge=1)
    # "major.minor" (9.0 for Hopper): the architecture the CUDA runtime is built for and the
    # executor checks at load; "" when detection could not read it.
    compute_capability: str = Field(default="", pattern=r"^(\d{1,2}\.\d)?$")
    # Device memory the CUDA executor holds outside its arena per stream that runs kernels: the
    # stream's cuDNN and cuBLAS handles and what the libraries allocate at their first use.
    # Measured on the GPU (bench/device/window_checks.py prints it) and set in the target's
    # JSON; unset (left out of the JSON), STREAM_LIBRARY_BYTES.
    stream_library_bytes: int | None = Field(default=None, ge=0)
    # cuBLAS's workspace for each GEMM, planned as the MatMul's scratch in the arena (so GEMMs
    # on co-running streams never share one); unset (left out of the JSON): none, cuBLAS's
    # slower workspace-free paths. Detection sets cuBLAS's recommendation (cublas_workspace).
    cublas_workspace_bytes: int | None = Field(default=None, ge=0)

    def library_bytes(self, streams: int) -> int:
        """What `streams` kernel streams hold outside the arena (counted in a budget).

        >>> g = GPU(name="g", memory_bytes=1, sm_count=1, peak_flops=1, memory_bandwidth=1,
        ...         host_link_bandwidth=1, pinned_host_limit_bytes=0)
        >>> g.library_bytes(2), g.model_copy(update={"stream_library_bytes": 5}).library_bytes(3)
        (0, 15)
        """
        per = STREAM_LIBRARY_BYTES if self.stream_library_bytes is None \
            else self.stream_library_bytes
        return streams * per

    @property
    def sm_arch(self) -> str:
        """The compute capability as nvcc names the architecture ("90" for 9.0); "" unknown.

        >>> GPU(name="g", memory_bytes=1, sm_count=1, peak_flops=1, memory_bandwidth=1,
        ...     host_link_bandwidth=1, pinned_host_limit_bytes=0, compute_capability="8.9").sm_arch
        '89'
        """
        return self.compute_capability.replace(".", "")

    @property
    def has_tf32(self) -> bool:
        """TF32 tensor cores: compute capability 8.0 or newer (the CUDA executor's rule at
        load; a GPU of unknown capability is taken to have none).

        >>> GPU(name="g", memory_bytes=1, sm_count=1, peak_flops=1, memory_bandwidth=1,
        ...     host_link_bandwidth=1, pinned_host_limit_bytes=0, compute_capability="7.0").has_tf32
        False
        """
        return bool(self.sm_arch) and int(self.sm_arch) >= 80


class TargetProvenance(Record):
    """Where a detected target came from; the only place a date may appear."""

    tool: str
    date: str
    method: str = ""


class Target(Record):
    """A machine: host CPUs (optional for a GPU-only preset), host memory, GPUs.

    Invariants (checked on construction): logical CPU ids unique and listed ascending; `cpu` is
    given exactly when `logical_cpus` is non-empty; cores and cache groups numbered 0..n-1 with
    no gaps; SMT siblings are exactly the other CPUs of the same core; a core lies in one group.
    """

    name: str = Field(min_length=1)
    description: str = ""
    host_memory_bytes: int = Field(gt=0)
    cpu: CPU | None = None
    logical_cpus: tuple[LogicalCPU, ...] = ()
    gpus: tuple[GPU, ...] = ()
    # How values were obtained: fallbacks taken during detection, assumptions of a preset.
    notes: tuple[str, ...] = ()
    provenance: TargetProvenance | None = None

    @model_validator(mode="after")
    def _consistent(self) -> Target:
        if self.cpu is None and not self.gpus:
            raise ValueError(f"target {self.name!r}: needs a cpu or at least one gpu")
        if (self.cpu is None) != (not self.logical_cpus):
            raise ValueError(f"target {self.name!r}: 'cpu' and 'logical_cpus' go together")
        ids = [c.id for c in self.logical_cpus]
        if ids != sorted(set(ids)):
            raise ValueError(f"target {self.name!r}: logical CPU ids must be unique and ascending")
        by_core: dict[int, list[LogicalCPU]] = {}
        for c in self.logical_cpus:
            by_core.setdefault(c.core, []).append(c)
        _check_dense(self.name, "core", set(by_core))
        _check_dense(self.name, "cache_group", {c.cache_group for c in self.logical_cpus})
        for core, members in by_core.items():
            member_ids = {m.id for m in members}
            for m in members:
                if m.smt_siblings != tuple(sorted(member_ids - {m.id})):
                    raise ValueError(f"target {self.name!r}: logical CPU {m.id}: smt_siblings "
                                     f"{list(m.smt_siblings)} != other CPUs of core {core} "
                                     f"{sorted(member_ids - {m.id})}")
            if len({m.cache_group for m in members}) != 1:
                raise ValueError(f"target {self.name!r}: core {core} lies in several cache groups")
        return self

    # ---- views (cached: records are frozen) ----------------------------------------------
    @property
    def backend(self) -> Backend:
        """The executor that runs plans for this target: its CPUs when it has any (a GPU-only
        preset such as k40c-12gb: its first GPU)."""
        return "cpu" if self.cpu is not None else "cuda"

    @property
    def cores(self) -> int:
        """Number of physical cores."""
        return len(self.core_cpus)

    @property
    def step_cores(self) -> int | None:
        """The physical cores a training step runs on, for the rewrites planning makes for them
        (planner.step.for_cores): a CPU target's cores (a host sliced to N CPUs has those),
        None for a GPU's step."""
        return self.cores if BACKEND_TRAITS[self.backend].host_cores else None

    @cached_property
    def core_cpus(self) -> tuple[tuple[CpuId, ...], ...]:
        """Per core (by index), its logical CPUs ascending; the first is its primary thread."""
        acc: dict[int, list[CpuId]] = {}
        for c in self.logical_cpus:
            acc.setdefault(c.core, []).append(c.id)
        return tuple(tuple(acc[k]) for k in sorted(acc))

    @cached_property
    def cache_groups(self) -> tuple[tuple[int, ...], ...]:
        """Per cache group (by index), its cores ascending."""
        acc: dict[int, set[int]] = {}
        for c in self.logical_cpus:
            acc.setdefault(c.cache_group, set()).add(c.core)
        return tuple(tuple(sorted(acc[k])) for k in sorted(acc))

    @property
    def smt_width(self) -> int:
        """Hardware threads per core (the largest, if cores differ)."""
        return max((len(c) for c in self.core_cpus), default=0)

    def core_of(self, cpu: CpuId) -> int:
        for c in self.logical_cpus:
            if c.id == cpu:
                return c.core
        raise KeyError(f"target {self.name!r} has no logical CPU {cpu}")

    # ---- canonical JSON ------------------------------------------------------------------
    def to_json(self) -> str:
        """Canonical JSON: sorted keys, one logical CPU or GPU per line."""
        return canonical_json(self.model_dump(mode="json", exclude_none=True))

    @classmethod
    def from_json(cls, text: str) -> Target:
        from planner.io.read import parse_json  # every command's reader

        return cls.model_validate(parse_json(text, "target"))

    def identity(self) -> dict:
        """What the machine is, as JSON data: the target less the figures detection measures
        (MEASURED_FIGURES), its notes and its provenance (which say what was measured, when
        and at what load). A host measured again, quiet or busy, is the same host: what is
        kept under its identity (the cost store, planner.costs.host_costs.host_key) stays.

        >>> cpus = (LogicalCPU(id=0, core=0, cache_group=0),)
        >>> t = Target(name="t", host_memory_bytes=2**30, logical_cpus=cpus, cpu=CPU(
        ...     model="m", peak_flops=1e11, memory_bandwidth=2e10, core_bandwidth=1e10,
        ...     cache_group_level=2, cache_group_bytes=2**20, machine="k"))
        >>> slower = t.model_copy(update={"cpu": t.cpu.model_copy(update={"peak_flops": 5e10})})
        >>> slower.identity() == t.identity(), "peak_flops" in t.identity()["cpu"]
        (True, False)
        """
        cpu = {"cpu": set(MEASURED_FIGURES)} if self.cpu is not None else {}
        return self.model_dump(mode="json", exclude={"notes": True, "provenance": True, **cpu})

    def digest(self) -> str:
        """sha256 of the canonical JSON without provenance: equal machines, equal digests."""
        data = self.model_dump(mode="json", exclude_none=True, exclude={"provenance"})
        return hashlib.sha256(canonical_json(data).encode()).hexdigest()


def _check_dense(target: str, what: str, values: set[int]) -> None:
    if values != set(range(len(values))):
        raise ValueError(f"target {target!r}: {what} indices must be 0..{len(values) - 1}, "
                         f"got {sorted(values)}")


def affinity_cpus(target: Target, threads: int, affinity: Affinity) -> tuple[CpuId, ...]:
    """The logical CPUs an op with `threads` threads runs on: one per core, primary threads.

    compact fills cache groups in order (KNL: cores 0, 1 share tile 0, then tile 1, ...);
    spread takes the first core of every group, then the second of every group, and so on, so
    no two threads share a group while `threads` <= groups. At threads == cores both affinities
    give the same set. Raises ValueError when threads is not in 1..cores.

    Example (a 4-core machine of 2 tiles, one thread per core):
        >>> cpus = tuple(LogicalCPU(id=i, core=i, cache_group=i // 2) for i in range(4))
        >>> t = Target(name="tiles", host_memory_bytes=1, logical_cpus=cpus, cpu=CPU(
        ...     model="m", peak_flops=1, memory_bandwidth=1, core_bandwidth=1,
        ...     cache_group_level=2, cache_group_bytes=1))
        >>> affinity_cpus(t, 2, "compact"), affinity_cpus(t, 2, "spread")
        ((0, 1), (0, 2))
    """
    if not 1 <= threads <= target.cores:
        raise ValueError(f"target {target.name!r}: threads must be in 1..{target.cores}, "
                         f"got {threads}")
    groups = target.cache_groups
    if affinity == "compact":
        order = [core for group in groups for core in group]
    elif affinity == "spread":
        depth = max(len(g) for g in groups)
        order = [g[i] for i in range(depth) for g in groups if i < len(g)]
    else:
        raise ValueError(f"affinity must be one of {list(AFFINITIES)}, got {affinity!r}")
    return tuple(sorted(target.core_cpus[core][0] for core in order[:threads]))
