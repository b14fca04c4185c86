"""The profiling driver: seed 002's hill climbing over thread counts, for every op signature.

Per signature and affinity: run with 1 thread, then 1 + x, 1 + 2x, ... (x is the interval),
stopping after the first count whose time rises, or at the last core (the last step is clipped
to it, so the full machine is always tried unless the time rose before). Each point is the median
of `repeats` runs.

"Rises" means: exceeds the fastest time so far by more than `tolerance` (5% by default). The
seed's rule is tolerance 0, but then measurement noise on the flat stretch around the optimum
stops the climb early, and everything past that point is extrapolated: with 2% noise, seed-style
climbing at interval 2 scores about 80% accuracy, with a 5% tolerance about 97%
(tests/costs/test_accuracy.py and bench/RESULTS.md hold the numbers).

Signatures are measured once however many nodes share them, a (threads, CPU set) already
measured for the other affinity is reused (one thread, or all cores, is the same placement
either way), and signatures the starting table already has are skipped, so an interrupted run
resumes where it stopped.

The kernels come from elsewhere: the driver calls `time_op(signature, threads, cpus)`, which
must run the op once on exactly those logical CPUs and return its seconds.

Example (a fake kernel whose time is 1/k + k/50 seconds):
    >>> from planner.target import preset
    >>> sig = OpSignature(op="Relu", shapes=((8,),), dtypes=("float32",))
    >>> run = profile([sig, sig], preset("xeon-8180"), lambda s, k, cpus: 1 / k + k / 50,
    ...               ProfileOptions(interval=4, affinities=("compact",)), progress=None,
    ...               date="2025-01-01")
    >>> [s.threads for s in run.table.entries[0].cpu], run.complete, run.measured
    ([1, 5, 9, 13], True, 1)
"""

from __future__ import annotations

import datetime
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TextIO

from pydantic import Field

from planner import __version__
from planner.costs.records import CostEntry, CostTable, CpuSample, Provenance, merge
from planner.costs.signature import OpSignature, unique_signatures
from planner.ir.graph import Record
from planner.target.records import AFFINITIES, Affinity, CpuId, Target, affinity_cpus

# time_op(signature, threads, cpus) -> seconds of one run on exactly those logical CPUs.
TimeOp = Callable[[OpSignature, int, tuple[CpuId, ...]], float]


@dataclass(frozen=True)
class Measurers:
    """What runs kernels for `planner profile`: code generation's executors, which this
    package does not import (planner/cli/main.py wires codegen.profiling in).

    kernel_timer(target, work_dir, options, steps, signatures=) -> a TimeOp measuring each
        signature alone (`signatures`: those it will be asked for, to build them together)
    in_step(graph, target, work_dir, options, steps=, table=, progress=) -> the table with
        every op measured inside the real step (codegen.profiling.profile_in_step)
    gpu(target, work_dir, steps=, max_workspace_bytes=, progress=) -> the measure of
        planner.costs.gpu_profile on this machine's GPU, with its bytes_of(signature) for the
        driver's batches (codegen.gpu_profiling.GpuProfiler)
    signatures(signatures, target, progress) -> a table of those signatures measured on this
        host, what planner.costs.host_costs keeps (codegen.profiling.measure_signatures)
    step_corun(graph, target, table, progress) -> this host's co-running figures fitted from
        the step's co-running lanes, kept beside them (codegen.profiling.step_contention)
    kernels() -> the digest of the kernel library these run (codegen.build.runtime_key): the
        host's store keeps one set of times per library
    """

    kernel_timer: Callable[..., TimeOp]
    in_step: Callable[..., CostTable]
    gpu: Callable[..., Callable] | None = None
    signatures: Callable[..., CostTable] | None = None
    step_corun: Callable[..., dict[str, float] | None] | None = None
    kernels: Callable[[], str] | None = None


class ProfileOptions(Record):
    """How to measure. max_threads=None means every core of the target."""

    interval: int = Field(default=4, ge=1)
    repeats: int = Field(default=3, ge=1)
    # The climb stops once a time exceeds the fastest so far by more than this fraction.
    tolerance: float = Field(default=0.05, ge=0)
    affinities: tuple[Affinity, ...] = AFFINITIES
    max_threads: int | None = Field(default=None, ge=1)


def hill_climb(measure: Callable[[int], float], max_threads: int, interval: int,
               tolerance: float = 0.0) -> list[tuple[int, float]]:
    """(threads, seconds) at 1, 1 + interval, ... until a time exceeds the fastest so far by
    more than `tolerance` (a fraction), or max_threads is done.

    Example:
        >>> hill_climb(lambda k: abs(k - 6) + 1.0, max_threads=20, interval=4)
        [(1, 6.0), (5, 2.0), (9, 4.0)]
        >>> hill_climb(lambda k: abs(k - 6) + 1.0, max_threads=20, interval=4, tolerance=1.5)
        [(1, 6.0), (5, 2.0), (9, 4.0), (13, 8.0)]
    """
    if max_threads < 1 or interval < 1 or tolerance < 0:
        raise ValueError(f"need max_threads, interval >= 1 and tolerance >= 0, got "
                         f"{max_threads}, {interval}, {tolerance}")
    points: list[tuple[int, float]] = []
    fastest = float("inf")
    threads = 1
    while True:
        seconds = measure(threads)
        points.append((threads, seconds))
        if seconds > fastest * (1 + tolerance) or threads >= max_threads:
            return points
        fastest = min(fastest, seconds)
        threads = min(threads + interval, max_threads)


@dataclass(frozen=True)
class ProfileRun:
    """The table (the starting table's entries plus those measured now), and what happened.

    complete is False when the run was interrupted (Ctrl-C): the table then holds every
    signature finished before it; the one in progress is dropped, to be measured again.
    """

    table: CostTable
    complete: bool
    measured: int
    skipped: int
    calls: int
    failures: tuple[tuple[str, str], ...] = ()


DEFAULT_OPTIONS = ProfileOptions()


def profile(signatures: Sequence[OpSignature], target: Target, time_op: TimeOp,
            options: ProfileOptions = DEFAULT_OPTIONS, table: CostTable | None = None,
            progress: TextIO | None = sys.stderr,
            checkpoint: Callable[[CostTable], None] | None = None,
            date: str | None = None) -> ProfileRun:
    """Measure every distinct signature not yet in `table` on `target` by hill climbing.

    progress: where the progress bar goes (None: silent). checkpoint: called with the table
    after each signature, e.g. to save it, so even a killed run leaves its work behind.
    A time_op that raises for a signature is recorded in `failures` and the run goes on.
    """
    if target.cpu is None:
        raise ValueError(f"target {target.name!r} has no CPU to profile on")
    max_threads = min(options.max_threads or target.cores, target.cores)
    table = CostTable(target=target.name) if table is None else table
    if table.target != target.name:
        raise ValueError(f"cost table is for {table.target!r}, not target {target.name!r}")
    todo = [s for s in unique_signatures(signatures) if s not in table]
    skipped = len(unique_signatures(signatures)) - len(todo)
    stamp = date or datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    provenance = Provenance(target=target.name, tool=f"planner {__version__}", date=stamp,
                            source=f"hill climbing interval={options.interval} "
                                   f"repeats={options.repeats} tolerance={options.tolerance}")
    bar = Progress(progress, len(todo))
    measured, calls, failures = 0, 0, []
    complete = True
    try:
        for sig in todo:
            bar.show(measured + len(failures), sig.key)
            try:
                samples, n = _measure_signature(sig, target, time_op, options, max_threads)
            except Exception as e:  # noqa: BLE001 - one broken kernel must not lose the rest
                failures.append((sig.key, f"{type(e).__name__}: {e}"))
                continue
            calls += n
            update = CostTable(target=target.name, provenance=(provenance,),
                               entries=(CostEntry(signature=sig, cpu=samples),))
            table = merge(table, update)
            measured += 1
            if checkpoint is not None:
                checkpoint(table)
    except KeyboardInterrupt:
        complete = False
    bar.done(measured, len(failures), complete)
    return ProfileRun(table=table, complete=complete, measured=measured, skipped=skipped,
                      calls=calls, failures=tuple(failures))


def _measure_signature(sig: OpSignature, target: Target, time_op: TimeOp,
                       options: ProfileOptions,
                       max_threads: int) -> tuple[tuple[CpuSample, ...], int]:
    """Hill-climb each affinity; returns the samples and the number of time_op calls."""
    seen: dict[tuple[CpuId, ...], float] = {}
    calls = 0

    def run(threads: int, affinity: Affinity) -> float:
        nonlocal calls
        cpus = affinity_cpus(target, threads, affinity)
        if cpus not in seen:
            seen[cpus] = statistics.median(time_op(sig, threads, cpus)
                                           for _ in range(options.repeats))
            calls += options.repeats
        return seen[cpus]

    samples = []
    for affinity in options.affinities:
        curve = hill_climb(lambda k, a=affinity: run(k, a), max_threads, options.interval,
                           options.tolerance)
        samples += [CpuSample(threads=k, affinity=affinity, seconds=t, repeats=options.repeats)
                    for k, t in curve]
    return tuple(samples), calls


class Progress:
    """A one-line bar on a terminal, a line per signature elsewhere (logs stay readable)."""

    def __init__(self, stream: TextIO | None, total: int) -> None:
        self.stream, self.total = stream, total
        self.tty = bool(stream is not None and getattr(stream, "isatty", lambda: False)())

    def show(self, done: int, key: str) -> None:
        if self.stream is None:
            return
        filled = 30 * done // max(self.total, 1)
        line = f"[{'#' * filled}{'.' * (30 - filled)}] {done}/{self.total} {key}"
        if self.tty:
            # Our own terminal control goes around planner.cli's escaping of control characters.
            getattr(self.stream, "raw", self.stream).write("\r\033[K")
            self.stream.write(line[:200])
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def done(self, measured: int, failed: int, complete: bool) -> None:
        if self.stream is None:
            return
        end = "" if complete else "interrupted: partial table kept; "
        self.stream.write(("\n" if self.tty else "") + f"{end}{measured} signature(s) measured"
                          + (f", {failed} failed" if failed else "") + "\n")
        self.stream.flush()
