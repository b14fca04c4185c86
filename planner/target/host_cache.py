"""What host detection measures, measured once per machine and kept: the same command on the
same machine gives the same Target, so the same plan, byte for byte.

Measuring (planner.target.measure: stream bandwidth on one and all cores, a GEMM on one and
all cores, ~2-3 s) gives a slightly different number every run, and the planner's decisions
(thread counts, co-running, the allocator) follow those numbers: two plans a minute apart
differed. So the numbers are measured once and written to the cache folder ($PLANNER_CACHE,
default ~/.cache/planner) under `hosts/<machine>.json`, where <machine> is a digest of what
identifies the machine to the planner: the CPU model and ISA flags, the logical CPUs'
topology (cores, packages, cache groups, NUMA nodes) and the CPUs this process may run on (a
process pinned to fewer CPUs is another machine); the target keeps it (CPU.machine) as its
identity, which keys what is kept per host (the cost store: planner.costs.host_costs.host_key),
so measuring the figures again never leaves those behind. `planner target detect` measures
again and replaces the entry; every other command (`--target host`) reads it, measuring only
when there is none (or it cannot be read).

A figure measured under load is never kept as truth (the cost store's rule,
planner.costs.host_costs): each figure (a bandwidth, a GEMM rate) records the load while it was
measured (`loads`: planner.target.load.CpuClock.load, the other processes' runnable threads per
logical CPU, from their CPU time and from the wait for a CPU this process's own CPU time shows)
and when (`dates`), and `keep` decides, figure by figure, what is kept: a quiet figure (load <=
BUSY) replaces a busy one (any kept one where `planner target detect` measures again on
purpose); a busy one replaces only a busy one it beats (other processes only ever slow a
measurement down) and never a quiet one. An entry with a busy figure (or from before loads
were recorded) is measured again by the first detection that finds the machine quiet, at
most once in REMEASURE_SECONDS (`checked`), and then only its busy figures can change: a
figure that reads busy on a quiet machine (a bfloat16 GEMM whose own threads are counted)
once cost every process's start a measurement (5 s on the 2-core VM) and, its quiet figures
measured again with their noise, moved the host's digest and so every plan's package name
from one process to the next. `planner target detect` at load 8 once recorded a float32 peak
of 54 GFLOP/s on a host whose ResNet-50 step ran at 202 (issue 60); at load 12, 114 against
300 without neighbours, labelled "at load 0.90": the others' CPU share, which cannot pass the
CPUs there are (issue 89).

The values kept are rounded to two significant figures (12.3 GB/s -> 12 GB/s, 146 GFLOP/s ->
150 GFLOP/s): run-to-run noise is a few percent, and a plan made from a re-measured entry
changes only where the machine really did. The clock (cpu MHz of /proc/cpuinfo, which
frequency scaling moves) is kept with them.

Example:
    >>> two_figures(12_345_678_901.0), two_figures(146e9), two_figures(0.0)
    (12000000000.0, 150000000000.0, 0.0)
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import json
import stat
from collections.abc import Callable
from pathlib import Path

from pydantic import Field, ValidationError

from planner.errors import UserError
from planner.io.write import atomic_write, cache_root, folder_lock_if_writable
from planner.ir.graph import canonical_json
from planner.ir.record import Record
from planner.target.load import BUSY
from planner.target.records import LogicalCPU


class HostMeasurement(Record):
    """The numbers detection measures on a machine (module docstring), rounded, and when."""

    core_bandwidth: float
    memory_bandwidth: float
    gemm_flops_all_cores: float
    gemm_flops_one_core: float
    mhz: float
    date: str
    # The other processes' share of the machine while it was measured (runnable threads per
    # logical CPU); None: not recorded (an entry from before loads were), taken as busy.
    load: float | None = None
    # What ran the GEMMs: "torch" (torch.matmul: oneDNN/MKL, tuned kernels) or "numpy" (the
    # BLAS numpy links, where torch is not installed).
    gemm: str = "numpy"
    # bfloat16 GEMM FLOP/s on all cores, where the ISA computes bfloat16 natively
    # (avx512_bf16, amx_bf16) and torch is there to run it; 0: not measured.
    gemm_bf16_flops: float = 0.0
    # Each rate's own load and date (RATES' names); a rate missing here has the entry's
    # `load` and `date` (an entry from before figures had their own).
    loads: dict[str, float] = {}
    dates: dict[str, str] = {}
    # When a busy entry was last measured again because the machine looked quiet (ISO date;
    # None: never): a figure that reads busy on a quiet machine (its own threads counted) is
    # then not measured again at every process's start (REMEASURE_SECONDS).
    checked: str | None = Field(default=None, exclude_if=lambda v: v is None)

    def rounded(self) -> HostMeasurement:
        return self.model_copy(update={k: two_figures(v) for k, v in self.__dict__.items()
                                       if isinstance(v, float) and k != "load"})

    def load_of(self, figure: str) -> float | None:
        return self.loads.get(figure, self.load)

    def date_of(self, figure: str) -> str:
        return self.dates.get(figure, self.date)

    def busy_figure(self, figure: str) -> bool:
        """Whether `figure` was measured busy (or at an unrecorded load); a rate of 0 was
        not measured (no native bfloat16, no way to limit BLAS's threads) and is not busy."""
        load = self.load_of(figure)
        return getattr(self, figure) != 0 and (load is None or load > BUSY)

    @property
    def busy(self) -> bool:
        """Whether any figure was measured busy: the entry is measured again when quiet."""
        if self.loads:
            return any(self.busy_figure(f) for f in RATES)
        return self.load is None or self.load > BUSY


# Rates kept: the larger of two busy measurements.
RATES = ("core_bandwidth", "memory_bandwidth", "gemm_flops_all_cores", "gemm_flops_one_core",
         "gemm_bf16_flops")


def keep(kept: HostMeasurement | None, new: HostMeasurement, refresh: bool = True
         ) -> HostMeasurement:
    """What is kept of `kept` once `new` is measured (module docstring), figure by figure: a
    quiet figure replaces a busy one (and, with `refresh`, `planner target detect`'s, a quiet
    one too: measured again on purpose), a busy one never replaces a quiet one, and of two busy
    ones the larger is kept, with its load and date. `kept` itself where no figure changed.
    Without `refresh` (a busy entry measured again because the machine looks quiet) a quiet
    figure stays as it is: the host's figures, and so its plans, do not move from one
    process to the next with a quiet measurement's noise.
    GEMM rates of another library (torch, numpy) are not compared: `new` replaces a busy
    `kept` whole, and never a quiet one.

    >>> quiet = HostMeasurement(core_bandwidth=2e10, memory_bandwidth=2e10, mhz=2400.0,
    ...     gemm_flops_all_cores=1.5e11, gemm_flops_one_core=8e10, date="d", load=0.0)
    >>> busy = quiet.model_copy(update={"gemm_flops_all_cores": 5.4e10, "load": 3.5})
    >>> keep(quiet, busy).gemm_flops_all_cores, keep(busy, quiet).gemm_flops_all_cores
    (150000000000.0, 150000000000.0)
    >>> keep(busy, busy.model_copy(update={"gemm_flops_all_cores": 6e10})).gemm_flops_all_cores
    60000000000.0
    """
    if kept is None:
        return new
    if new.gemm != kept.gemm:
        return new if kept.busy or not new.busy else kept
    taken = [f for f in RATES if _replaces(kept, new, f, refresh)]
    if not taken:
        return kept
    if all(f in taken or getattr(kept, f) == 0 for f in RATES):
        return new
    source = {f: new if f in taken else kept for f in RATES if getattr(new if f in taken
                                                                      else kept, f)}
    loads = {f: m.load_of(f) for f, m in source.items()}
    dates = {f: m.date_of(f) for f, m in source.items()}
    known = {f: v for f, v in loads.items() if v is not None}
    return new.model_copy(update={
        **{f: getattr(kept, f) for f in RATES if f not in taken},
        "loads": known, "dates": dates, "date": max(dates.values()),
        "load": max(known.values()) if len(known) == len(loads) else None})


def _replaces(kept: HostMeasurement, new: HostMeasurement, figure: str,
              refresh: bool = True) -> bool:
    """Whether `new`'s `figure` replaces `kept`'s: quiet (over a busy or unmeasured one, or
    any with `refresh`), or busy and faster than a busy (or unmeasured) one; an unmeasured one
    (0) never does, nor the same figure read twice."""
    value, was = getattr(new, figure), getattr(kept, figure)
    if value == 0 or (value, new.load_of(figure), new.date_of(figure)) == (
            was, kept.load_of(figure), kept.date_of(figure)):
        return False
    open_to = was == 0 or kept.busy_figure(figure)
    if not new.busy_figure(figure):
        return refresh or open_to
    return open_to and value > was


# How long a busy entry measured again when quiet is left as it is before the next try.
REMEASURE_SECONDS = 3600.0


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _due(kept: HostMeasurement) -> bool:
    """Whether a busy entry may be measured again: never tried when quiet, or not for
    REMEASURE_SECONDS (an unreadable date: due)."""
    if kept.checked is None:
        return True
    try:
        then = datetime.datetime.strptime(kept.checked, "%Y-%m-%dT%H:%M:%SZ").replace(
            tzinfo=datetime.UTC)
    except ValueError:
        return True
    return (datetime.datetime.now(datetime.UTC) - then).total_seconds() > REMEASURE_SECONDS


def two_figures(x: float) -> float:
    """`x` rounded to two significant figures."""
    return float(f"{x:.2g}")


def machine_key(model: str, flags: frozenset[str], logical_cpus: tuple[LogicalCPU, ...],
                cache_group_level: int, cache_group_bytes: int,
                cpu_quota: float | None = None) -> str:
    """Digest of what identifies the machine (module docstring); the logical CPUs are those
    this process may run on. A cgroup CPU quota throttles what is measured, so it is keyed;
    without one the key is what it was before quotas were read (kept entries stay valid)."""
    data = {"model": model, "flags": sorted(flags),
            "logical_cpus": [c.model_dump(mode="json") for c in logical_cpus],
            "cache_group": [cache_group_level, cache_group_bytes]}
    if cpu_quota is not None:
        data["cpu_quota"] = cpu_quota
    return hashlib.sha256(canonical_json(data).encode()).hexdigest()[:32]


def entry_path(key: str) -> Path:
    return cache_root() / "hosts" / f"{key}.json"


def kept_measurement(key: str, measure: Callable[[], HostMeasurement],
                     refresh: bool = False, quiet: Callable[[], bool] = lambda: False
                     ) -> HostMeasurement:
    """The machine's kept measurement; measured when there is none, it cannot be read, with
    `refresh`, or when it was measured busy and `quiet()` says the machine is quiet now; what
    is kept of the old and the new is `keep`'s (rounded). Processes detecting at once take
    turns: one measures, the others read what it kept."""
    path = entry_path(key)
    # A read-only cache (no lock file can be made) still reads what it holds: the host's
    # digest stays the kept one; only a host it lacks is measured anew each run.
    with folder_lock_if_writable(path):
        try:
            kept = _read(path)
        except UserError:
            if not refresh:
                raise
            kept = None  # measuring again replaces an entry that is not one
        if kept is not None and not refresh and not (kept.busy and _due(kept) and quiet()):
            return kept
        measured = keep(kept, measure().rounded(), refresh or kept is None)
        if kept is not None and not refresh:
            measured = measured.model_copy(update={"checked": _now()})
        if measured is not kept:
            with contextlib.suppress(OSError):  # a read-only cache: this run's numbers
                atomic_write(path, measured.model_dump_json(indent=2) + "\n")
        return measured


# What a kept value may be (bytes/s, FLOP/s, MHz): wider than any machine measures, narrow
# enough that every time the planner derives from them stays a finite number of seconds. A
# value outside (1e-300 GB/s, a string, true) was not measured: refused by name, not planned
# with. gemm_flops_one_core and mhz are 0 where they could not be measured.
PLAUSIBLE = {"core_bandwidth": (1e6, 1e14), "memory_bandwidth": (1e6, 1e14),
             "gemm_flops_all_cores": (1e6, 1e17), "gemm_flops_one_core": (1e6, 1e17),
             "gemm_bf16_flops": (1e6, 1e17), "mhz": (1.0, 1e5)}
MAX_LOAD = 1e6  # runnable threads per logical CPU: no machine queues more
UNMEASURED_ZERO = ("gemm_flops_one_core", "gemm_bf16_flops", "mhz")


def _read(path: Path) -> HostMeasurement | None:
    """The entry at `path`; None where there is none or its text is not JSON (measured
    again); UserError naming the file and field for anything else (a FIFO or another special
    file is never opened)."""
    try:
        st = path.lstat()
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode):
        raise _refused(path, "is not a regular file")
    try:
        data = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    try:
        kept = HostMeasurement.model_validate(data, strict=True)
    except ValidationError as e:
        first = e.errors()[0]
        field = ".".join(map(str, first["loc"])) or "the entry"
        raise _refused(path, f"{field}: {first['msg'].lower()} (got "
                             f"{json.dumps(first.get('input'))[:40]})") from None
    for field, (low, high) in PLAUSIBLE.items():
        value = getattr(kept, field)
        if not (low <= value <= high or (value == 0 and field in UNMEASURED_ZERO)):
            raise _refused(path, f"{field} {value!r} is not a plausible measurement (between "
                                 f"{low:g} and {high:g})")
    for field in ("loads", "dates"):
        if unknown := sorted(set(getattr(kept, field)) - set(RATES)):
            raise _refused(path, f"{field}.{unknown[0][:40]!r} is not a measured figure (one of "
                                 f"{', '.join(RATES)})")
    for figure, load in kept.loads.items():
        if not 0 <= load <= MAX_LOAD:
            raise _refused(path, f"loads.{figure} {load!r} is not a load (between 0 and "
                                 f"{MAX_LOAD:g})")
    return kept.rounded()


def _refused(path: Path, why: str) -> UserError:
    return UserError(f"host measurement {path}: {why}; run `planner target detect` to measure "
                     f"this machine again")

