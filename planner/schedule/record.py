"""The Schedule record: what either scheduler decides, before memory planning.

Both schedulers return one: `cpu_schedule` (planner.schedule.cpu) places every op on logical
CPUs with a thread count, `stream_schedule` (planner.schedule.streams) on a GPU stream. An op
has `cpus` *or* a `stream`, never both, and the record says which backend it is for:

    Schedule(backend="cpu", strategy="optimized",
             ops=(ScheduledOp(name="conv1", op="Conv2D", cpus=(0, 1), threads=2, start=0.0,
                              end=3e-3, ...), ...),
             edges=(Edge(before="conv1", after="relu1"), ...),      # what the executor enforces
             bound=Bound(seconds=..., critical_path=..., ...))

Times are predicted seconds from the step's start (half-open intervals). `edges` hold every
ordering the executor enforces (data and in-place dependencies, and "the previous op on one of
my CPUs" or "on my stream"): memory planning relies on them, never on predicted times.

Example:
    >>> op = ScheduledOp(name="a", op="Relu", cpus=(0, 2), threads=2, start=0.0, end=1e-6)
    >>> op.cores_text, op.where
    ('0,2', 'cpus 0,2')
    >>> ScheduledOp(name="b", op="Relu", stream="compute", start=0.0, end=1e-6).where
    'stream compute'
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import Field, model_validator

from planner.ir.record import Backend, CpuId, Record, Seconds, Stream
from planner.ops.collective import COLLECTIVE_OPS
from planner.target.backends import BACKEND_TRAITS
from planner.target.records import Affinity


class Edge(Record):
    """`before` ends before `after` starts; the executor enforces it."""

    before: str
    after: str


class ScheduledOp(Record):
    """One op's placement: on logical CPUs (CPU backend) or on a stream (GPU)."""

    name: str = Field(min_length=1)
    op: str = Field(min_length=1)
    # CPU: the logical CPUs its threads run on, one per thread (sibling hyper-threads when
    # `smt`). GPU: () and the stream it is issued to.
    cpus: tuple[CpuId, ...] = ()
    stream: Stream = ""
    threads: int = Field(default=1, ge=1)
    # GPU: threads per block of the op's generated kernel, the fastest launch configuration
    # the cost table measured (planner.schedule.launches); 0: the kernel's default. Left out
    # of the plan's JSON when 0, so plans without a measured launch read as before.
    block: int = Field(default=0, ge=0, exclude_if=lambda v: v == 0)
    affinity: Affinity = "compact"
    # Runs on hyper-thread siblings of cores that another concurrent op also uses (Strategy 4).
    smt: bool = False
    # Ops of one group run as one parallel loop over the group's CPUs ("" = on its own).
    group: str = ""
    # The graph's data and in-place dependencies, by name: for people. No ordering comes from
    # them: the executor orders ops by lanes and happens-before edges only (planner.plan).
    deps: tuple[str, ...] = ()
    # An all-gather of sharded parameters (ZeRO-3): how many compute ops ahead of its first
    # reader it is issued (planner.schedule.parallel.issue_point); 0 elsewhere.
    prefetch: int = Field(default=0, ge=0, exclude_if=lambda v: v == 0)
    start: Seconds = Field(ge=0)
    end: Seconds = Field(ge=0)

    @model_validator(mode="after")
    def _one_place(self) -> ScheduledOp:
        if bool(self.cpus) == bool(self.stream):
            raise ValueError(f"op {self.name!r}: give either cpus (CPU) or stream (GPU), "
                             f"not {'both' if self.cpus else 'neither'}")
        # The CUDA kernels' rule (kernel.h block_threads): whole warps, at most 1024.
        if self.block and (self.cpus or self.block % 32 or self.block > 1024):
            raise ValueError(f"op {self.name!r}: block={self.block}: threads per block are "
                             f"for GPU ops, a multiple of 32 in [32, 1024]")
        return self

    @property
    def cores_text(self) -> str:
        """CPU ids as ranges: `0-3,8`."""
        return cpu_ranges(self.cpus)

    @property
    def where(self) -> str:
        """Where it runs, for people: `cpus 0-3` or `stream compute`."""
        return f"cpus {self.cores_text}" if self.cpus else f"stream {self.stream}"


class Bound(Record):
    """Lower bounds on the step time (seconds); `seconds` is the largest, a proven bound.
    CPU schedules: planner.schedule.bound's four terms. Stream schedules: every compute op at
    its fastest algorithm, one after another (one compute stream); on several compute
    streams, the longest path at those times and the SM-seconds (occupancy x time) over the
    whole GPU."""

    seconds: Seconds
    critical_path: Seconds
    area: Seconds
    allotment: Seconds = 0.0
    cut: Seconds = 0.0


class Schedule(Record):
    """Ops in execution order with their places and predicted times (module docstring)."""

    backend: Backend
    strategy: str
    ops: tuple[ScheduledOp, ...]
    edges: tuple[Edge, ...] = ()
    bound: Bound
    # Busy core-seconds / (cores x step) of the physical cores (GPU: the share of the step
    # some compute stream runs a kernel).
    utilization: float = 0.0
    # Seed 002 Fig. 4: ops running, averaged over the start and finish events.
    mean_corun: float = 0.0
    # Signatures the cost table lacked, priced by the analytical model.
    analytical_signatures: int = 0

    @model_validator(mode="after")
    def _placed_for_backend(self) -> Schedule:
        field = BACKEND_TRAITS[self.backend].placed_by
        for op in self.ops:
            # A CPU plan's collectives run on the communication lane (planner.schedule.parallel).
            if not getattr(op, field) and not (op.op in COLLECTIVE_OPS and op.stream == "comm"):
                raise ValueError(f"{self.backend} schedule: op {op.name!r} has no {field}")
        return self

    @property
    def step_seconds(self) -> Seconds:
        return max((op.end for op in self.ops), default=0.0)


def lane_numbers(ops: Sequence[ScheduledOp]) -> list[int]:
    """Each op's lane, for ops in execution order: the executor thread (CPU) or stream (GPU)
    that runs it, numbered densely in order of first use. A CPU op's lane is its first logical
    CPU's (two ops sharing a CPU never run at the same time, so a lane's ops follow each other
    as planned); a GPU op's is its stream's.

    >>> ops = [ScheduledOp(name=n, op="Relu", cpus=c, threads=len(c), start=0, end=1)
    ...        for n, c in [("a", (2, 3)), ("b", (0,)), ("c", (2,))]]
    >>> lane_numbers(ops)
    [0, 1, 0]
    """
    keys = [min(op.cpus) if op.cpus else op.stream for op in ops]
    dense = {k: i for i, k in enumerate(dict.fromkeys(keys))}
    return [dense[k] for k in keys]


def cpu_ranges(cpus: tuple[int, ...]) -> str:
    """`(0, 1, 2, 5)` -> `'0-2,5'`."""
    parts: list[str] = []
    run: list[int] = []
    for c in sorted(cpus):
        if run and c == run[-1] + 1:
            run.append(c)
            continue
        if run:
            parts.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [c]
    if run:
        parts.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(parts)
