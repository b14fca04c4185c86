"""Measured costs kept per host: every kernel measured on this machine once, for every later plan.

A plan of the machine it runs on (`--target host`, `planner.torch.trainer`) is priced by
measured times by default. They are kept in the cache folder ($PLANNER_CACHE, default
~/.cache/planner) under `costs/<host>.json`, keyed by signature (op, input shapes and dtypes,
attrs: a convolution's kernel layout among them, and the operands' layouts where the step keeps
images blocked; the thread count and placement are the samples'), where <host>
is a digest of what the machine is (`host_key`: CPU model, ISA flags, logical CPUs, caches,
memory; not its measured peaks, which move with the load), the planner's version (its kernels)
and the store's (`STORE_VERSION`: a store of another is measured anew).
A plan asks for its graph's signatures (`profiled_signatures` of the graph as its step runs,
and of its evaluation: planner.pipeline.priced_graphs); only those the store lacks are
measured (by the `Measure` the caller passes in: codegen.profiling.measure_signatures, in
batches, with a progress line), and the store keeps them for the next plan. A kernel's time
does not depend on the graph it was measured in, so one graph's measurements price another's:
what differs from measuring the module's own step (`costs="in-step"`) is where an op's
operands were last touched (here: fed to the batch's step, not written by a producer on other
cores).

The load is kept with each signature: the other processes' share of the machine while it was
measured, read from the kernel's CPU counters over the measurement itself (`CpuClock`: every
CPU's busy time, the hypervisor's steal among it, less this process's and its builds' own, per
logical CPU and second). Not the 1-minute load average: it lags, and less an assumed one
runnable thread of ours it read 0.044 while others ran (1.09 with the measuring process
seconds old; 2.33 over five minutes). That store's two-thread GEMMs came out no faster than
one thread (a team waits for a descheduled thread: their steps ran 1.4-2.8 ms or 8-17 ms
beside neighbours), and the uniform plans it priced predicted 1.2-2x what they ran
(bench/results/2026-11-26-measured-costs-load.md). Where the counters are missing (not
Linux), the load average stands in (`load_now`).

A measurement taken on a busy machine (`BUSY`) is not the cached truth for long: when a later
plan finds the machine quiet (the other processes' share over a glance of GLANCE_SECONDS,
taken only when the plan has busy entries to decide on), it measures those signatures again,
and a quiet measurement replaces a busy one. Repeated measurements under the same conditions
keep the best (fastest) time of each sample: noise only ever slows a kernel.

The contention figures (the table's `contention` and `corun_slowdown`: how much co-running
ops slow each other; the lanes' hand-off; `team_scale`: how far the step's ops on all the
cores run from the store's times, over one thread's) are kept beside the signatures per step (by the
digest of its graph's computation, names left out: `step_key`), fitted by the caller's
`corun` from that step the first time it is priced (its own lanes co-running, handing data
across cores, as a step's do; a graph of signatures co-runs ops that share nothing and fits
too small a slowdown), with the load they were fitted under: fitted again, as a signature is
measured again, when a busy machine's fit meets a quiet machine. Per step, because they are
the step's: one host's figures, fitted from whichever model was planned first, priced
ResNet-50's step (width 0.25, 64 px, batch 32) at sigma 0.73 where its own step fits
0.1-0.25; its optimized plan then ran no co-run group and stepped 4.5% slower than under
figures fitted from its own step (26.44 against 25.30 ms: bench/RESULTS.md). A step that is
not fitted (a data-parallel one: its collectives need the process group) is priced by the
figures fitted last.

The store is read, measured and written back under its lock, so processes planning at once
take turns (one measures, the others read what it kept). A store that is not a valid one (cut
short, edited, hostile: read_store) is refused in one warning line, what it holds that is valid
on its own kept (store_salvage) and the rest measured again; a write that fails (a full disk,
a read-only cache) leaves the plan priced by the measurements all the same, with one line.

The plan is priced by the store's entries for its signatures only (and its step's contention
figures), so it depends on what was measured for it, not on what else the store holds.

Example (a store, a quiet measurement of one signature, then a busy one of the same):
    >>> from planner.costs.records import CostEntry, CpuSample
    >>> sig = OpSignature(op="Relu", shapes=((64,),), dtypes=("float32",))
    >>> def table(seconds):
    ...     return CostTable(target="host", entries=(CostEntry(signature=sig, cpu=(
    ...         CpuSample(threads=1, affinity="compact", seconds=seconds),)),))
    >>> kept = HostCosts(table=CostTable(target="host"))
    >>> [s.key for s in kept.to_measure([sig], load=0.0)] == [sig.key]
    True
    >>> kept = kept.keep(table(2e-6), load=0.0)
    >>> kept.to_measure([sig], load=0.0)
    []
    >>> kept.keep(table(1e-6), load=0.9).table.entries[0].cpu[0].seconds  # busy: not kept
    2e-06
    >>> kept.keep(table(1e-6), load=0.0).table.entries[0].cpu[0].seconds  # best of repeats
    1e-06
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated, Any, TextIO

from pydantic import Field, ValidationError, field_validator

from planner.costs.conv_layouts import profiled_signatures
from planner.costs.records import HOST_FIGURES, CostEntry, CostTable, CpuSample
from planner.costs.signature import OpSignature, unique_signatures
from planner.errors import UserError
from planner.io.write import atomic_write, cache_root, check_target, folder_lock_if_writable
from planner.ir.graph import Graph, canonical_json
from planner.ir.record import Record
from planner.ops.collective import COLLECTIVE_OPS
from planner.target.backends import channel_block, traits
from planner.target.load import (  # noqa: F401 (the store's names)
    BUSY,
    CpuClock,
    CpuTimes,
    cpu_times,
    load_now,
    others_share,
)
from planner.target.records import Target

# Which fit of the contention figures a store's are from: 1 fitted sigma to the co-running
# ops' stretches, each plan's executor in one process (co-running came out nearly free: kappa
# 0.02, sigma 0, and LSTM's two-lane plans ran 12-20% slower than priced); 2 fits sigma to the
# co-running step, each executor in a process of its own (codegen.profiling.step_contention);
# 3 adds the lanes' hand-off latency and fits sigma with it priced (sigma no longer carries it);
# 4 fits from each plan's main schedule (the one-lane step's executor tried its two-core
# variant from its 8th step on, and a co-running step was read as a one-lane one); 5 adds the
# step's team scale (its ops on all the cores against the store's times, over one thread's).
CORUN_FIT = 5


# A load as kept (load.py: the other processes' runnable threads per logical CPU): a finite
# share, never negative; past a million threads per CPU it was not measured. A store's NaN
# load would never compare busy, an infinite one never quiet: refused where the store is read.
MAX_LOAD = 1e6
Load = Annotated[float, Field(ge=0.0, le=MAX_LOAD, allow_inf_nan=False)]


def valid_load(value: Any) -> bool:
    """Whether `value` is a load a store may keep (Load)."""
    return (isinstance(value, int | float) and not isinstance(value, bool)
            and math.isfinite(value) and 0.0 <= value <= MAX_LOAD)


# (signatures, target, progress) -> a cost table of them measured on this machine.
Measure = Callable[[Sequence[OpSignature], Target, "TextIO | None"], CostTable]
# (a step's graph, target, its cost table, progress) -> the host's co-running figures
# (records.HOST_FIGURES by name) fitted from that step's co-running lanes, or None (one core).
Corun = Callable[[Graph, Target, CostTable, "TextIO | None"], "dict[str, float] | None"]


class HostCosts(Record):
    """The measured costs kept for one host: a cost table, and per signature key the load it
    was measured under (module docstring)."""

    table: CostTable
    loads: dict[str, Load] = Field(default_factory=dict)
    # Signatures measured that gave no time (a view's kernel does nothing): the model prices
    # them, and they are not measured again.
    timeless: tuple[str, ...] = ()
    # The load the table's contention figures (the ones fitted last, from a step's
    # co-running lanes: host_table's `corun`) were fitted under; None while none was.
    corun_load: Load | None = None
    # The fit (CORUN_FIT) that gave them.
    corun_fit: int = Field(default=0, ge=0)
    # Per step (`step_key`), the figures fitted from it.
    fits: dict[str, StepFit] = Field(default_factory=dict)

    def to_fit(self, step: str, load: float) -> bool:
        """Whether to fit the contention figures of step `step` now (at `load`): never
        fitted, fitted by another fit, or fitted on a busy machine while this one is quiet."""
        fit = self.fits.get(step)
        return fit is None or fit.fit != CORUN_FIT or load <= BUSY < fit.load

    def fitted(self, step: str, figures: dict[str, float] | None, load: float) -> HostCosts:
        """The store with the co-running figures `figures` (HOST_FIGURES by name; None: none
        to fit, one core) of step `step` fitted at `load`, which are also the ones fitted
        last."""
        fits = {**self.fits, step: StepFit(figures=figures or {}, load=load)}
        table = self.table.model_copy(update=dict(figures)) if figures else self.table
        return self.model_copy(update={"table": table, "corun_load": load,
                                       "corun_fit": CORUN_FIT, "fits": fits})

    def to_measure(self, signatures: Sequence[OpSignature], load: float) -> list[OpSignature]:
        """Of `signatures`, those to measure now: never measured, or measured on a busy
        machine while this one (at `load`) is quiet."""
        skip = set(self.timeless)
        return [s for s in signatures if s.key not in skip and (
            s not in self.table or (load <= BUSY and self.loads.get(s.key, 0.0) > BUSY))]

    def keep(self, measured: CostTable, load: float,
             asked: Sequence[OpSignature] = ()) -> HostCosts:
        """The store with `measured` (taken at `load`) kept: a new signature's entry as is; of a
        signature measured before, a quiet measurement replaces a busy one, a busy one never
        replaces a quiet one, and alike conditions keep each sample's best time. Of `asked`
        (what was measured), those `measured` has no time for are kept as timeless."""
        entries = dict(self.table.index)
        loads = dict(self.loads)
        timeless = set(self.timeless) | {s.key for s in asked
                                         if s.key not in measured.index and s.key not in entries}
        for key, new in measured.index.items():
            old, was = entries.get(key), loads.get(key, 0.0)
            if old is None or (was > BUSY >= load):
                entries[key], loads[key] = new, load
            elif (load > BUSY) == (was > BUSY):
                entries[key], loads[key] = _best(old, new), min(was, load)
        table = CostTable(target=self.table.target, entries=tuple(entries.values()),
                          provenance=self.table.provenance + measured.provenance,
                          **measured.host_figures_over(self.table))
        return self.model_copy(update={"table": table, "loads": loads,
                                       "timeless": tuple(sorted(timeless))})

    def for_signatures(self, signatures: Sequence[OpSignature],
                       step: str | None = None) -> CostTable:
        """The table of `signatures`' entries (what a plan of them is priced by), with step
        `step`'s contention figures (the ones fitted last where it has none)."""
        keys = {s.key for s in signatures}
        fit = self.fits.get(step) if step is not None else None
        figures = ({**dict.fromkeys(HOST_FIGURES), **fit.figures} if fit is not None
                   else self.table.host_figures())
        return CostTable(target=self.table.target,
                         entries=tuple(e for e in self.table.entries if e.key in keys),
                         **figures)


class StepFit(Record):
    """One step's contention figures (HOST_FIGURES by name; none on one core), the load they
    were fitted under and the fit (CORUN_FIT) that gave them."""

    figures: dict[str, float] = Field(default_factory=dict)
    load: Load
    fit: int = Field(default=CORUN_FIT, ge=0)

    @field_validator("figures")
    @classmethod
    def _host_figures(cls, v: dict[str, float]) -> dict[str, float]:
        # The table's own bounds (records.CostTable): a kept fit prices plans as one would.
        unknown = sorted(set(v) - set(HOST_FIGURES))
        if unknown:
            raise ValueError(f"{unknown[0]!r} is not a contention figure")
        CostTable(target="host", **v)
        return v


def step_key(graph: Graph) -> str:
    """The digest a step's contention figures are kept by: its graph's computation (ops,
    attributes, tensors and edges) without its names, so that another module of the same
    layers is the same step (its names are the module's attribute paths)."""
    index = {t.name: k for k, t in enumerate(graph.tensors)}

    def ref(name: str | None) -> int | None:
        return None if name is None else index[name]

    data = {"kind": graph.kind, "math": graph.math, "loss": ref(graph.loss),
            "outputs": [index[t] for t in graph.outputs],
            "tensors": [{**t.model_dump(mode="json", exclude={"name"}), "updates": ref(t.updates)}
                        for t in graph.tensors],
            "nodes": [{"op": n.op, "attrs": n.attrs, "inputs": [index[t] for t in n.inputs],
                       "outputs": [index[t] for t in n.outputs]} for n in graph.nodes]}
    return hashlib.sha256(canonical_json(data).encode()).hexdigest()[:32]


def _best(old: CostEntry, new: CostEntry) -> CostEntry:
    """Per (affinity, threads): the faster sample (its scratch figure the larger seen)."""
    samples = {(s.affinity, s.threads): s for s in old.cpu}
    for s in new.cpu:
        k = (s.affinity, s.threads)
        was = samples.get(k)
        if was is None:
            samples[k] = s
            continue
        fast = min(was, s, key=lambda x: x.seconds)
        scratch = [x.scratch_bytes for x in (was, s) if x.scratch_bytes is not None]
        samples[k] = CpuSample(threads=s.threads, affinity=s.affinity, seconds=fast.seconds,
                               repeats=was.repeats + s.repeats,
                               scratch_bytes=max(scratch) if scratch else None)
    return old.model_copy(update={"cpu": tuple(samples.values())})


# What a kept entry means: 2 since its load is the measurement's own (CpuClock); stores of
# version 1 recorded the lagging load average, busy measurements among them as quiet ones, so
# they are left behind (another file) and their signatures measured again.
STORE_VERSION = 2


def host_key(target: Target, kernels: str = "") -> str:
    """Digest of what the kept times depend on: what the machine is (Target.identity: CPU
    model, ISA flags, logical CPUs, caches, memory, cgroup quota), the planner's version, the
    store's (STORE_VERSION) and the kernel library that measures them (`kernels`:
    codegen.build.runtime_key, the runtime's sources, flags and compiler). A kernel changed is
    timed anew: kept times of the old one priced mobilenet_v2's depthwise weight gradients at
    their im2col GEMMs' 1.4 ms after a direct kernel ran them in 0.16 (issue 60). Not the
    host's measured peaks and bandwidths: they move with the load and are measured again when
    the machine is quiet, and a key that hashed them left the store behind each time."""
    from planner import __version__

    data = target.identity()
    kept_by = {"kernels": kernels} if kernels else {}
    return hashlib.sha256(canonical_json({"target": data, "planner": __version__,
                                          "store": STORE_VERSION, **kept_by})
                          .encode()).hexdigest()[:32]


def store_path(target: Target, kernels: str = "") -> Path:
    return cache_root() / "costs" / f"{host_key(target, kernels)}.json"


# The largest store read: a few thousand signatures are a few MB; a file past this was not
# written by a plan, and reading it would hold it all in memory.
MAX_STORE_BYTES = 256 * 2**20


def read_store(target: Target, kernels: str = "", progress: TextIO | None = None) -> HostCosts:
    """The host's kept costs (of the kernel library `kernels`: host_key); an empty store
    when there are none. A file that is not a valid store (cut short, edited, another
    target's, NaN or negative times) is refused in one warning line on `progress` (default:
    stderr) naming it, and what it holds that is valid on its own is kept (store_salvage):
    the rest is measured again and the store written back whole."""
    kept, problem = _read_store(store_path(target, kernels), target.name)
    if problem:
        _warn(progress, f"planner: warning: {store_path(target, kernels)}: {problem}")
    return kept


def _read_store(path: Path, target: str) -> tuple[HostCosts, str]:
    """The store at `path` and, where it is not a valid one, what was wrong and what was kept
    (one line); a missing store is an empty one, nothing wrong."""
    from planner.costs.store_salvage import json_prefix, salvage
    from planner.io.read import check_utf8, describe_validation_error

    empty = HostCosts(table=CostTable(target=target))
    try:
        if not path.is_file():
            return empty, ""
        with path.open("rb") as f:
            data = f.read(MAX_STORE_BYTES + 1)
    except OSError as e:
        return empty, f"cannot read the cost store ({e.strerror or e}); measuring anew"
    if len(data) > MAX_STORE_BYTES:
        return empty, (f"cost store larger than {MAX_STORE_BYTES // 2**20} MiB: not one a plan "
                       "wrote; measured anew and replaced")
    why = ""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:  # read on with the bad bytes replaced: the rest is kept
        why = f"not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start})"
        text = data.decode("utf-8", errors="replace")
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError as e:
        why = why or f"not valid JSON (line {e.lineno} column {e.colno}: {e.msg})"
        parsed = json_prefix(text)
    except RecursionError:
        why, parsed = why or "JSON nested too deeply", None
    if not why:
        try:
            check_utf8(parsed, "store")
            whole = HostCosts.model_validate(parsed)
            if whole.table.target == target:
                return whole, ""
            why = f"holds the costs of target {whole.table.target!r}, not {target!r}"
        except ValidationError as e:
            why = describe_validation_error(e)
        except UserError as e:
            why = str(e).removeprefix("store: ")
    salvaged, listed = salvage(parsed, target, (HostCosts, StepFit, valid_load))
    return salvaged, (f"not a valid cost store ({_printable(why)}); kept {len(salvaged.table)} "
                      f"of its {listed} measurement(s), the rest measured again")


def _printable(text: str, most: int = 160) -> str:
    """`text` (which may quote the file's own keys) as one line of printable characters."""
    line = "".join(c if c.isprintable() else "?" for c in text)
    return line if len(line) <= most else line[:most] + "..."


def _warn(progress: TextIO | None, line: str) -> None:
    print(line, file=progress if progress is not None else sys.stderr, flush=True)


class HostPricing(Record):
    """What `host_table` did: the plan's table, and which of its signatures were measured now,
    which were kept from before."""

    table: CostTable
    measured: tuple[str, ...] = ()
    kept: tuple[str, ...] = ()


def host_table(graphs: Sequence[Graph], target: Target, measure: Measure,
               progress: TextIO | None = None, load: float | None = None,
               corun: Corun | None = None, kernels: str = "") -> HostPricing:
    """The cost table a plan of `graphs` (the step's graph and its evaluation graph:
    planner.pipeline.priced_graphs) on this host is priced by: their signatures' kept
    measurements, those not kept (or kept from a busy machine, when it is quiet now) measured
    by `measure` first and kept. With `corun`, the step's (graphs[0]) contention figures are
    fitted from its co-running lanes the first time it is priced (or again when a busy
    machine's fit meets a quiet one) and kept for every later plan of it. `load`: the load
    to decide and keep by (a test's); None: whether to measure again by `load_now`, each
    measurement kept with the other processes' share over it (CpuClock). `kernels`: the
    digest of the kernel library `measure` runs (host_key), whose store is read and kept."""
    if target.name != "host" or not traits(target).timed_on_host:
        from planner.errors import UserError

        raise UserError(f"measured costs: target {target.name!r} is not this machine's CPUs "
                        f"('host'); give a cost table measured there, or 'analytical'")
    blocked = bool(channel_block(target))
    wanted = unique_signatures([s for g in graphs for s in profiled_signatures(g, blocked)])
    path = store_path(target, kernels)
    # A store path that is not a file (a folder in its place) would take the measurements
    # and then refuse them: refused before anything is measured.
    check_target(path)
    # Two plans on one host take turns; a read-only cache is read unlocked (its lock file
    # cannot be made), and plans from what it holds.
    unkept = ""
    with folder_lock_if_writable(path.parent / path.stem) as writable:
        store, problem = _read_store(path, target.name)
        if problem:  # said before the measuring it causes
            _warn(progress, f"planner: warning: {path}: {problem}")
        step = step_key(graphs[0])
        now = load if load is not None else _load_to_decide(store, wanted, step)
        missing = store.to_measure(wanted, now)
        # Fitted from a one-process step: a data-parallel step's collectives need its
        # process group (it is priced by the figures fitted last).
        fit = corun is not None and store.to_fit(step, now) and not any(
            n.op in COLLECTIVE_OPS for n in graphs[0].nodes)
        if missing:
            clock = CpuClock()
            measured = measure(missing, target, progress)
            store = store.keep(measured, _during(clock, load, now), missing)
        if fit:
            clock = CpuClock()
            figures = corun(graphs[0], target, store.for_signatures(wanted, step), progress)
            store = store.fitted(step, figures, _during(clock, load, now))
        if missing or fit or problem:  # a damaged store is written back whole
            unkept = _keep_store(path, store)
    if unkept:
        _warn(progress, f"planner: warning: {unkept}; the measurements price this plan but "
                        "are not kept")
    elif not writable:
        _warn(progress, f"planner: note: {path.parent} cannot be written: this plan is priced "
                        f"by the measurements kept there, and nothing new is kept")
    fresh = {s.key for s in missing}
    table = store.for_signatures(wanted, step)
    _keep_table(table, progress, said=unkept or not writable)
    return HostPricing(table=table,
                       measured=tuple(sorted(fresh)),
                       kept=tuple(sorted(s.key for s in wanted if s.key not in fresh)))


class KeptPricing(Record):
    """What `kept_pricing` found: the table a plan is priced by now (the host's kept
    measurements; the analytical model for the rest), the signatures the store lacks and
    whether the step's contention figures were never fitted: what measuring later
    (codegen/measure_later.py) would add."""

    table: CostTable
    unmeasured: tuple[str, ...] = ()
    fit: bool = False


def kept_pricing(graphs: Sequence[Graph], target: Target, kernels: str = "") -> KeptPricing:
    """The cost table a plan of `graphs` (as `host_table`'s) is priced by from what this host
    kept, measuring nothing and taking no lock (the store is replaced whole by each writer:
    a read sees one version), with what `host_table` would measure or fit now. A damaged or
    unreadable store prices nothing (the model then prices every op); `host_table` says
    why when it measures."""
    blocked = bool(channel_block(target))
    wanted = unique_signatures([s for g in graphs for s in profiled_signatures(g, blocked)])
    store, _ = _read_store(store_path(target, kernels), target.name)
    step = step_key(graphs[0])
    # What the store lacks, not what it holds from a busy machine: measured beside the run
    # that asks (a child of a training process), a busy entry would come out busy again, and
    # each run would plan anew from it (a quiet `planner plan --costs measured` refreshes it).
    fit = store.to_fit(step, BUSY + 1.0) and not any(n.op in COLLECTIVE_OPS
                                                    for n in graphs[0].nodes)
    return KeptPricing(table=store.for_signatures(wanted, step),
                       unmeasured=tuple(s.key for s in store.to_measure(wanted, BUSY + 1.0)),
                       fit=fit and target.cores > 1)


def _keep_store(path: Path, store: HostCosts) -> str:
    """`store` written to `path`; what went wrong, or "": a full disk, a read-only cache, and
    this plan is still priced by what was measured."""
    try:
        atomic_write(path, canonical_json(store.model_dump(mode="json", exclude_none=True)))
    except OSError as e:
        return str(e)
    return ""


def _keep_table(table: CostTable, progress: TextIO | None, said: bool) -> None:
    """The plan's table kept for `planner explain`, or a warning (unless the cache was `said`
    to be unwritable already): a read-only cache plans all the same (explain lacks the
    table)."""
    try:
        keep_priced(table)
    except OSError as e:
        if not said:
            _warn(progress, f"planner: warning: {e}; `planner explain` will not find this "
                            "plan's cost table")


def priced_path(sha256: str) -> Path:
    """Where the table a plan was priced by is kept, by its digest (the plan's
    provenance.costs_sha256): the store's entries change as kernels are measured again, so
    `planner explain` reads the table the plan recorded, not the store as it is now."""
    return cache_root() / "costs" / "priced" / f"{sha256}.json"


def keep_priced(table: CostTable) -> None:
    """Keep `table` by its digest (priced_path), once: what prices a host plan."""
    text = table.to_json()
    path = priced_path(hashlib.sha256(text.encode()).hexdigest())
    if not path.is_file():
        atomic_write(path, text)


def read_priced(sha256: str) -> CostTable | None:
    """The table of digest `sha256` kept by keep_priced, if this host holds it intact."""
    if not (len(sha256) == 64 and all(c in "0123456789abcdef" for c in sha256)):
        return None  # a digest from a plan file names no other path
    try:
        text = priced_path(sha256).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    if hashlib.sha256(text.encode()).hexdigest() != sha256:
        return None
    with contextlib.suppress(ValueError, ValidationError, UserError):
        return CostTable.from_json(text)
    return None


# How long `_load_to_decide` watches the machine: long enough for the kernel's counters (clock
# ticks of 1-10 ms) to tell a neighbour's share, short beside the measurement it may spare.
GLANCE_SECONDS = 0.2


def _load_to_decide(store: HostCosts, wanted: Sequence[OpSignature], step: str) -> float:
    """The load by which to decide whether to measure busy entries (or a busy fit) again: the
    other processes' share over a short glance (CpuClock), only where the store holds such
    entries for `wanted` or such a fit of `step` (a plan with nothing to decide does not
    wait); the load average where the counters are missing."""
    fit = store.fits.get(step)
    busy = (fit is not None and fit.load > BUSY) or any(
        store.loads.get(s.key, 0.0) > BUSY for s in wanted if s in store.table)
    if not busy:
        return load_now()
    clock = CpuClock()
    time.sleep(GLANCE_SECONDS)
    share = clock.share()
    return load_now() if share is None else share


def _during(clock: CpuClock, given: float | None, now: float) -> float:
    """The load a measurement is kept with: the caller's when it gave one (a test), else the
    other processes' share over the measurement (`clock`), else the load average's `now`."""
    if given is not None:
        return given
    share = clock.share()
    return now if share is None else share


COST_SOURCES = ("measured", "analytical")


def default_costs(target: Target) -> str:
    """What prices a plan when nobody says: measured times on the machine the plan runs on
    (the detected host's CPUs), the analytical model on any other target (a preset: not this
    machine), or everywhere when $PLANNER_COSTS is "analytical" (a test suite that does not
    care about costs says so once)."""
    from planner.errors import UserError

    env = os.environ.get("PLANNER_COSTS")
    if env and env not in COST_SOURCES:
        raise UserError(f"PLANNER_COSTS={env!r}: give one of {', '.join(COST_SOURCES)}")
    here = target.name == "host" and traits(target).timed_on_host
    return "measured" if here and env != "analytical" else "analytical"
