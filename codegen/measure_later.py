"""Measuring off the critical path: a plan priced now by what this host kept, the rest measured
by a child process in the background, and a better plan swapped in between steps.

    priced = priced_now(graph, target, feeds)      # kept measurements + the model; no wait
    with watch() as w:                             # what a call plans, provisional or not
        ...plan, build, run...
    if w.provisional and done(w.provisional):      # its measurements are in: plan again
        ...

Why a child process: measuring builds and runs kernels for seconds to minutes (a new CNN's 83
signatures and its contention fit: ~22 s on the 2-core development VM), and the first step
should not wait for it (issue 83: the first process's first step at 21-30 s, eager's whole
script 4 s). A thread would hold the GIL through planning and share this process's OpenMP
teams; a child at the lowest priority (nice 19) takes the CPU the training leaves, keeps what
it measures in the host's store (planner.costs.host_costs: atomic writes, a lock between
writers) and, if the script ends first, finishes alone, so the next process plans from it.
Each job is one call's graphs (a piece's forward and backward together), one at a time.

What the children measured is also planned and built ahead (`Replan`: the graph, the plan's
options, the package's name prefix, from the door that asked): each child builds its job's
plans before it ends, so the running parent, planning its graphs again when it sees the job
end, makes the same plan from the same store and finds its package by name (the compile off
its steps); one last child, started at the script's end and waiting for the running one,
measures what is still queued and builds what is left. The next process does the same:
building nothing, the host keeps all a run asked for.

What a swap means for the bits (docs/training.md, Reproducibility): a run's bits follow its
plan; a run that swaps runs the provisional plan up to the step it names, the measured one
after. Once the host keeps a step's measurements, every later run plans from them from its
first step and swaps nothing. `PLANNER_MEASURE=first` (or costs="measured") measures before the
first step instead.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict

from planner.costs.records import CostTable
from planner.ir.graph import Graph
from planner.pipeline.options import PlanOptions

MEASURE_MODES = ("background", "first")


def measure_mode() -> str:
    """How the torch doors measure what the host lacks: "background" (default) or "first"
    ($PLANNER_MEASURE)."""
    from planner.errors import UserError

    mode = os.environ.get("PLANNER_MEASURE") or "background"
    if mode not in MEASURE_MODES:
        raise UserError(f"PLANNER_MEASURE={mode!r}: give one of {', '.join(MEASURE_MODES)}")
    return mode


class Replan(BaseModel):
    """What a door plans once the host holds its graph's measurements, so that the child
    plans and builds it ahead of the next process: `plan(graph, target, table, options,
    evaluation=evaluation)`, priced as the door prices it (priced_graphs with the same
    options), its package named `codegen.cached.package_name(plan, prefix)` in the cache's
    shared packages folder."""

    model_config = ConfigDict(frozen=True)
    graph: Graph
    options: PlanOptions = PlanOptions()
    evaluation: bool = True
    prefix: str


@dataclass
class _Job:
    """One background measurement: the groups of graphs (each a plan's priced graphs, with
    example feeds for its contention fit) a child process measures, and what it plans and
    builds from them after (`replans`)."""

    key: str
    groups: list[tuple[tuple[Any, ...], dict[str, np.ndarray]]]
    label: str
    target: Any
    replans: list[Replan] = field(default_factory=list)
    folder: Path | None = None
    process: subprocess.Popen | None = None


# What one plan leaves to measure: its priced graphs, example feeds, a label, the target, and
# the plan to make from them (None: the door's own folder, not the shared cache).
_Entry = tuple[tuple[Any, ...], dict[str, np.ndarray], str, Any, Replan | None]


@dataclass
class Watch:
    """What the plans made inside one `watch()` were priced by: `jobs`, the background jobs
    they wait on (empty: priced by all they asked); `provisional` while there are any."""

    pending: list[_Entry] = field(default_factory=list)
    jobs: set[str] = field(default_factory=set)

    @property
    def provisional(self) -> frozenset[str] | None:
        """The jobs whose end makes these plans worth making again (done()), or None."""
        return frozenset(self.jobs) if self.jobs else None


_LOCK = threading.RLock()
_QUEUE: list[_Job] = []
_RUNNING: list[_Job] = []
_ENDED: set[str] = set()  # job keys whose child exited (measured once per process)
_KNOWN: set[str] = set()  # job keys queued, running or ended
# What ended jobs planned (their target and replans): built ahead by the last child, at exit.
_PLANNED: list[tuple[Any, list[Replan]]] = []
_LOCAL = threading.local()


def priced_now(graphs: Sequence[Any], target: Any, feeds: Mapping[str, np.ndarray] | None,
               label: str, then: Replan | None = None) -> CostTable:
    """The table `graphs` (planner.pipeline.priced_graphs) are priced by now: what this host
    kept (planner.costs.host_costs.kept_pricing); what it lacks is measured in the background
    (queued with the current `watch`, started when it ends, or now outside one), and `then`
    planned and built after it."""
    from codegen.build import runtime_key
    from planner.costs.host_costs import kept_pricing

    pricing = kept_pricing(graphs, target, kernels=runtime_key())
    if pricing.unmeasured or pricing.fit:
        current = getattr(_LOCAL, "watch", None)
        entry = (tuple(graphs), dict(feeds or {}), label, target, then)
        if current is not None:
            current.pending.append(entry)
        else:
            _queue([entry])
    return pricing.table


@contextlib.contextmanager
def watch() -> Iterator[Watch]:
    """Collect what the plans made inside are priced by (Watch); their background
    measurements start as one job when it ends."""
    w = Watch()
    outer = getattr(_LOCAL, "watch", None)
    _LOCAL.watch = w
    try:
        yield w
    finally:
        _LOCAL.watch = outer
    if w.pending:
        key = _queue(w.pending)
        if key not in _ENDED:  # (ended: measured before in this process; nothing comes)
            w.jobs.add(key)


def current_watch() -> Watch | None:
    return getattr(_LOCAL, "watch", None)


def ranged_on(jobs: frozenset[str] | None) -> None:
    """A call run on a range plan priced while `jobs` measure (its `provisional`): the
    current watch waits on them too, and is planned again with the range."""
    current = getattr(_LOCAL, "watch", None)
    if jobs and current is not None:
        current.jobs |= jobs


def done(jobs: frozenset[str]) -> bool:
    """Whether every job of `jobs` has ended (polling the running one)."""
    with _LOCK:
        _advance()
        return jobs <= _ENDED


def _queue(entries: list[_Entry]) -> str:
    """Queue one job for `entries` where the same graphs are not queued, running or ended in
    this process; the job's key either way."""
    h = hashlib.sha256()
    for graphs, *_ in entries:
        for g in graphs:
            h.update(g.to_json().encode())
    key = h.hexdigest()
    with _LOCK:
        if key in _KNOWN:
            return key
        _KNOWN.add(key)
        label = " and ".join(dict.fromkeys(label for _, _, label, _, _ in entries))
        _QUEUE.append(_Job(key, [(g, f) for g, f, *_ in entries], label, entries[0][3],
                           [r for *_, r in entries if r is not None]))
        _advance()
    return key


def pending() -> bool:
    """Whether a job runs or waits."""
    with _LOCK:
        _advance()
        return bool(_RUNNING or _QUEUE)


def wait(timeout: float | None = None) -> None:
    """Wait for every queued job to end (a test's, or a script that wants the measured
    plans before its next step)."""
    import time

    end = None if timeout is None else time.monotonic() + timeout
    while pending():
        if end is not None and time.monotonic() > end:
            raise TimeoutError("background measurement still running")
        time.sleep(0.05)


def _advance() -> None:
    """End the running job if its child exited; start the next queued one."""
    if _RUNNING:
        job = _RUNNING[0]
        code = job.process.poll() if job.process is not None else 0
        if code is None:
            return
        _RUNNING.pop()
        _ENDED.add(job.key)
        if job.replans:
            _PLANNED.append((job.target, job.replans))
        _ended(job, code)
    if _QUEUE:
        job = _QUEUE.pop(0)
        _start(job)
        _RUNNING.append(job)


def _start(job: _Job, after: int | None = None) -> None:
    """The job's child: its graphs, target, feeds and replans in a folder it removes when
    done; with `after`, a child started at this process's end, which first waits for that
    process (the running job's child; 0: none) to end."""
    job.folder = Path(tempfile.mkdtemp(prefix="planner-measure-"))
    for k, (graphs, feeds) in enumerate(job.groups):
        for i, g in enumerate(graphs):
            (job.folder / f"group{k}.graph{i}.json").write_text(g.to_json(), encoding="utf-8")
        np.savez(job.folder / f"group{k}.feeds.npz", **feeds)
    for k, replan in enumerate(job.replans):
        (job.folder / f"replan{k}.json").write_text(replan.model_dump_json(), encoding="utf-8")
    (job.folder / "target.json").write_text(job.target.to_json(), encoding="utf-8")
    if after is None:
        print(f"planner: measuring this host's kernels for {job.label} in the background (a "
              f"child at low priority); planned for now from what the host kept, the measured "
              f"plan comes in between steps", file=sys.stderr, flush=True)
    log = open(job.folder / "log.txt", "w")  # noqa: SIM115 - the child's, closed with it
    try:
        job.process = subprocess.Popen(
            [sys.executable, "-m", "codegen.measure_child", str(job.folder), str(os.getpid()),
             *([str(after)] if after is not None else [])],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            env={**os.environ, "PLANNER_MEASURE": "first"})
    finally:
        log.close()


def _ended(job: _Job, code: int) -> None:
    if code != 0 and job.folder is not None:
        try:
            tail = (job.folder / "log.txt").read_text(errors="replace").strip().splitlines()
        except OSError:
            tail = []
        last = tail[-1][:200] if tail else f"exit status {code}"
        print(f"planner: warning: measuring {job.label} in the background failed ({last}); "
              f"its plans stay priced by what the host kept and the model", file=sys.stderr,
              flush=True)
    if job.folder is not None:
        shutil.rmtree(job.folder, ignore_errors=True)


@atexit.register
def _at_exit() -> None:
    """A job still running finishes alone (it keeps what it measures for the next process);
    the queued ones, and the plans of every job (ended, running, queued) to build ahead, go to
    one child of their own, after it."""
    with _LOCK:
        _advance()
        going = [j for j in _RUNNING if j.process is not None]
        rests = _merged(_QUEUE + [_Job("", [], "", target, replans)
                                  for target, replans in _PLANNED])
        if rests:  # the last child plans the running job's graphs again too: what it measures
            # (a busy entry measured again quiet) can move the prices they read
            rests[-1].replans = [r for j in going for r in j.replans] + rests[-1].replans
        for rest in rests:
            _start(rest, going[-1].process.pid if going else 0)
            going.append(rest)
        _QUEUE.clear()
        _PLANNED.clear()
        if going:
            measured = [j.label for j in going if j.groups]
            doing = [f"measuring {' and '.join(measured)}"] * bool(measured) + [
                "building the measured plans"] * any(j.replans for j in going)
            print(f"planner: {' and '.join(doing)} goes on in the background (pid "
                  f"{', '.join(str(j.process.pid) for j in going)}, low priority, one after "
                  f"the other) and is kept for the next run", file=sys.stderr, flush=True)


def _merged(jobs: list[_Job]) -> list[_Job]:
    """`jobs` as one job per target (a child measures for one target)."""
    by_target: dict[str, list[_Job]] = {}
    for job in jobs:
        by_target.setdefault(job.target.to_json(), []).append(job)
    return [_Job(",".join(j.key for j in same if j.key), [g for j in same for g in j.groups],
                 " and ".join(dict.fromkeys(j.label for j in same if j.groups)), same[0].target,
                 [r for j in same for r in j.replans]) for same in by_target.values()]
