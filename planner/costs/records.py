"""CostTable records: measured op times on one target, keyed by op signature.

An entry holds, for one signature, CPU samples (seconds per run at a thread count and affinity),
GPU samples per convolution algorithm (seconds and workspace bytes) and per kernel launch
configuration (threads per block, blocks), and the op's GPU time alone where its kernel offers
the plan no choice (`gpu_seconds`: cuBLAS, pooling, norms). Entries are kept sorted by
signature key and samples by (affinity, threads), so the canonical JSON (one entry per line) is
byte-identical across save and load and diffs well. Dates live only in `provenance`.

    {
      "entries": [
        {"cpu":[{"affinity":"compact","repeats":3,"seconds":0.0021,"threads":1}, ...],
         "signature":{"attrs":{...},"dtypes":["float32","float32"],"op":"Conv2D",...}},
        ...
      ],
      "provenance": [{"date":"2025-01-01","source":"profile interval=4","target":"knl-7250",...}],
      "target": "knl-7250"
    }

Example:
    >>> sig = OpSignature(op="Relu", shapes=((8,),), dtypes=("float32",))
    >>> t = CostTable(target="host", entries=(CostEntry(signature=sig, cpu=(
    ...     CpuSample(threads=2, affinity="compact", seconds=1e-6),
    ...     CpuSample(threads=1, affinity="compact", seconds=2e-6))),))
    >>> [s.threads for s in t.entry(sig).cpu], CostTable.from_json(t.to_json()) == t
    ([1, 2], True)
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from functools import cached_property
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError, field_validator, model_validator

from planner.costs.signature import OpSignature
from planner.errors import UserError
from planner.ir.graph import Record, canonical_json
from planner.target.records import Affinity

Seconds = float
# What one run of one op may take, in seconds: a picosecond to an hour. Outside, the value was
# not measured (planner profile times nothing shorter than a launch, nothing for an hour), and
# a step priced with it is no longer a finite sum of its ops' times (1e300 s makes every
# start time equal, every buffer live at once): refused by name where a table is read.
SECONDS = {"ge": 1e-12, "le": 3600.0}
# A dimensionless co-running figure (kappa, sigma, team scale): a factor no run comes near a
# thousand of; an infinite one would price every co-running step as never ending.
FACTOR = {"ge": 0.0, "le": 1e3, "allow_inf_nan": False}
# The most threads a sample may name, and the most scratch bytes (a pebibyte, past any
# machine's memory): a sample beyond either was not measured.
MAX_THREADS = 1 << 16
MAX_SCRATCH = 1 << 50


class CpuSample(Record):
    """Median seconds of one run with `threads` threads placed with `affinity`."""

    threads: int = Field(ge=1, le=MAX_THREADS)
    affinity: Affinity
    seconds: Seconds = Field(**SECONDS)
    repeats: int = Field(default=1, ge=1)
    # Bytes of scratch the kernel asked for at this placement (layout temporaries and library
    # scratchpads: the executor's stats()), None where not measured. Plans size the op's
    # scratch area by it in place of the op's analytical bound (planner.memory.scratch).
    scratch_bytes: int | None = Field(default=None, ge=0, le=MAX_SCRATCH)


class ConvAlgoSample(Record):
    """A GPU convolution algorithm (cuDNN's name for it), its time and workspace."""

    algorithm: str = Field(min_length=1)
    seconds: Seconds = Field(**SECONDS)
    workspace_bytes: int = Field(ge=0)


class LaunchSample(Record):
    """A GPU kernel launch configuration and its time."""

    threads_per_block: int = Field(ge=1)
    blocks: int = Field(ge=1)
    seconds: Seconds = Field(**SECONDS)


class CostEntry(Record):
    """Everything measured for one signature."""

    signature: OpSignature
    cpu: tuple[CpuSample, ...] = ()
    gpu_algorithms: tuple[ConvAlgoSample, ...] = ()
    gpu_launches: tuple[LaunchSample, ...] = ()
    # Median seconds of the op alone on the GPU, run as its kernel chooses (no algorithm or
    # launch configuration for a plan to pick); None: not measured.
    gpu_seconds: Seconds | None = Field(default=None, **SECONDS)

    @field_validator("cpu")
    @classmethod
    def _cpu_sorted_unique(cls, v: tuple[CpuSample, ...]) -> tuple[CpuSample, ...]:
        return _sorted_unique(v, lambda s: (s.affinity, s.threads), "CPU sample")

    @field_validator("gpu_algorithms")
    @classmethod
    def _algos_sorted_unique(cls, v: tuple[ConvAlgoSample, ...]) -> tuple[ConvAlgoSample, ...]:
        return _sorted_unique(v, lambda s: s.algorithm, "GPU algorithm")

    @field_validator("gpu_launches")
    @classmethod
    def _launches_sorted_unique(cls, v: tuple[LaunchSample, ...]) -> tuple[LaunchSample, ...]:
        return _sorted_unique(v, lambda s: (s.threads_per_block, s.blocks), "launch configuration")

    @property
    def key(self) -> str:
        return self.signature.key

    def cpu_points(self, affinity: Affinity) -> list[tuple[int, Seconds]]:
        """(threads, seconds) of one affinity, ascending in threads."""
        return [(s.threads, s.seconds) for s in self.cpu if s.affinity == affinity]


def _sorted_unique(items: tuple[Any, ...], key: Callable[[Any], Any], what: str) -> tuple[Any, ...]:
    ordered = tuple(sorted(items, key=key))
    for a, b in zip(ordered, ordered[1:], strict=False):
        if key(a) == key(b):
            raise ValueError(f"{what} {key(a)} listed twice")
    return ordered


class Provenance(Record):
    """Who measured what, where and when."""

    target: str
    tool: str
    date: str
    source: str = ""


# The figures of the host's co-running a table carries beside its entries, fitted together
# from one co-running step (codegen.profiling.step_contention) and kept together.
HOST_FIGURES = ("contention", "corun_slowdown", "handoff_seconds", "team_scale")


class CostTable(Record):
    """Measured costs on one target. Look entries up with `entry(signature)`."""

    target: str = Field(min_length=1)
    entries: tuple[CostEntry, ...] = ()
    provenance: tuple[Provenance, ...] = ()
    # How strongly co-running ops slow each other by sharing memory bandwidth: the simulator's
    # kappa (planner.schedule.contention), fitted to a step measured with every lane
    # co-running. None: not measured, plans simulate without contention.
    contention: float | None = Field(default=None, **FACTOR)
    # How much slower any op runs while ops run on all the other cores, whatever it moves
    # (shared last-level cache, clocks, a VM's host hyper-threads, the lanes' hand-offs): the
    # simulator's sigma, fitted so that it prices the co-running step as it ran
    # (codegen.profiling.step_contention). None: not measured.
    corun_slowdown: float | None = Field(default=None, **FACTOR)
    # How long an op starts after its last wait ended on another lane (that lane's thread
    # sleeps and is woken): the simulator's hand-off, the median of a co-running step's
    # (codegen.profiling.step_contention). None: not measured, hand-offs priced at 0.
    handoff_seconds: float | None = Field(default=None, ge=0, le=SECONDS["le"],
                                          allow_inf_nan=False)
    # How much slower a step runs its ops on a team of all the cores than the entries' times
    # say, over the same for one thread (planner.costs.team_scale): the one-op harness
    # keeps a mid-size op's operands in the caches of every core it measures on, so its
    # multi-thread times can sit under (or over) a step's by a share its one-thread times do
    # not. A measured time on k threads is priced x (1 + (team_scale - 1)(k - 1) / (cores -
    # 1)) (`team_factor`). None: not measured, the times as they are.
    team_scale: float | None = Field(default=None, gt=0, le=FACTOR["le"],
                                     allow_inf_nan=False)

    def team_factor(self, threads: int, cores: int) -> float:
        """What a measured time on `threads` of `cores` is priced at, over the entry's
        (team_scale, linear in the thread count from 1 at one thread).

        >>> CostTable(target="host", team_scale=1.2).team_factor(2, 2)
        1.2
        >>> CostTable(target="host", team_scale=1.2).team_factor(3, 5)
        1.1
        >>> CostTable(target="host").team_factor(2, 2)
        1.0
        """
        if self.team_scale is None or cores <= 1 or threads <= 1:
            return 1.0
        return 1.0 + (self.team_scale - 1.0) * (threads - 1) / (cores - 1)

    def host_figures(self) -> dict[str, float | None]:
        """The host's co-running figures (HOST_FIGURES) by field name."""
        return {name: getattr(self, name) for name in HOST_FIGURES}

    def host_figures_over(self, base: CostTable) -> dict[str, float | None]:
        """This table's co-running figures, each one it lacks (None) taken from `base`'s."""
        under = base.host_figures()
        return {k: under[k] if v is None else v for k, v in self.host_figures().items()}

    @field_validator("entries")
    @classmethod
    def _entries_sorted_unique(cls, v: tuple[CostEntry, ...]) -> tuple[CostEntry, ...]:
        return _sorted_unique(v, lambda e: e.key, "signature")

    @field_validator("provenance")
    @classmethod
    def _provenance_sorted(cls, v: tuple[Provenance, ...]) -> tuple[Provenance, ...]:
        return tuple(sorted(set(v), key=lambda p: (p.date, p.target, p.tool, p.source)))

    @model_validator(mode="after")
    def _provenance_on_this_target(self) -> CostTable:
        for p in self.provenance:
            if p.target != self.target:
                raise ValueError(f"cost table for {self.target!r} has provenance from target "
                                 f"{p.target!r}")
        return self

    @cached_property
    def index(self) -> dict[str, CostEntry]:
        return {e.key: e for e in self.entries}

    def entry(self, signature: OpSignature) -> CostEntry | None:
        """The signature's entry; for one on blocked operands (OpSignature.layouts) that the
        table lacks, its plain twin's: the same kernel measured on plain operands, with the
        reorders in and out a plain step runs (a preset's table, a store kept before
        signatures carried layouts). `in` asks for the signature itself."""
        found = self.index.get(signature.key)
        if found is None and signature.layouts:
            found = self.index.get(signature.plain.key)
        return found

    def __contains__(self, signature: object) -> bool:
        return isinstance(signature, OpSignature) and signature.key in self.index

    def __len__(self) -> int:
        return len(self.entries)

    # ---- canonical JSON ------------------------------------------------------------------
    def to_json(self) -> str:
        """Canonical JSON: sorted keys, one entry per line."""
        return canonical_json(self.model_dump(mode="json", exclude_none=True))

    @classmethod
    def from_json(cls, text: str) -> CostTable:
        from planner.io.read import parse_json  # every command's reader

        return cls.model_validate(parse_json(text, "cost table"))


def merge(base: CostTable, update: CostTable) -> CostTable:
    """Both tables' entries; where both measured the same sample, `update`'s wins.

    Samples are the same when they share (threads, affinity), an algorithm name, or a launch
    configuration; `gpu_seconds` is update's when it has one. Raises ValueError when the tables
    are for different targets.
    """
    if base.target != update.target:
        raise ValueError(f"cannot merge cost tables of different targets: {base.target!r} and "
                         f"{update.target!r}")
    entries = dict(base.index)
    for key, new in update.index.items():
        old = entries.get(key)
        if old is None:
            entries[key] = new
            continue
        entries[key] = CostEntry(
            signature=new.signature,
            cpu=_union(old.cpu, new.cpu, lambda s: (s.affinity, s.threads)),
            gpu_algorithms=_union(old.gpu_algorithms, new.gpu_algorithms, lambda s: s.algorithm),
            gpu_launches=_union(old.gpu_launches, new.gpu_launches,
                                lambda s: (s.threads_per_block, s.blocks)),
            gpu_seconds=old.gpu_seconds if new.gpu_seconds is None else new.gpu_seconds)
    return CostTable(target=base.target, entries=tuple(entries.values()),
                     provenance=base.provenance + update.provenance,
                     **update.host_figures_over(base))


def _union(old: tuple[Any, ...], new: tuple[Any, ...],
           key: Callable[[Any], Hashable]) -> tuple[Any, ...]:
    merged = {key(s): s for s in old}
    merged.update({key(s): s for s in new})
    return tuple(merged.values())


def save_table(table: CostTable, path: str | Path) -> None:
    """Write the canonical JSON (the whole file replaced, atomically)."""
    from planner.io.write import atomic_write

    atomic_write(path, table.to_json())


def load_table(path: str | Path) -> CostTable:
    """Read a cost table; UserError naming the file and the bad field."""
    from planner.io.read import read_json

    data = read_json(path, "cost table")
    try:
        return CostTable.model_validate(data)
    except ValidationError as e:
        from planner.io.read import describe_validation_error

        raise UserError(f"{path}: not a valid cost table: {describe_validation_error(e)}") from None
