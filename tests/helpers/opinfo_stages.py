"""PyTorch's OpInfo database through the whole pipeline (issue 86): each float32 OpInfo of
`op_db` exported, imported, planned for this host, built into its CPU executor and run, forward
and backward, against torch in float64. The harness of bench/opinfo_sweep.py --stages and
tests/codegen/test_opinfo_stages.py; tests/importers/opinfo_cases.py is the reference stage.

An OpInfo is classified by the last stage it reaches (STAGES):

    op_db       a float32 OpInfo of op_db: torch.export fails on each of its samples;
    exportable  torch.export exports a sample, but no sample imports and matches torch on the
                reference interpreter (its line is the reference stage's, opinfo_cases);
    imported    its first sample that does (the executor sample: one per OpInfo) is refused
                by planning (`prepare` and `plan` for this host, what `planner plan` does);
    planned     planned, but no executor is built: the CPU runtime lacks a kernel for an op or
                dtype (refused in one line) or the build fails (a crash);
    built       built, but the executor's run fails (a crash) or a value is off (`wrong`:
                silently wrong, the one outcome that must stay at none);
    matches     every output and gradient within the reference stage's tolerance.

The cheap way through (a build of the schedule per OpInfo would cost a compile each): the
OpInfos are taken in fixed groups of GROUP consecutive names of op_db; each group's executor
samples that plan and have kernels are merged into one graph (tests/codegen/merged_graph.py,
every name prefixed), planned, built into one package of the host's package cache, named by the
plan's digest (codegen.cached: a rerun of an unchanged group compiles nothing), and run once.
Where the merged package fails to plan, build or run, each of its OpInfos is built and run
alone, so that the failure is its own OpInfo's. A group's membership does not depend on
outcomes, so a change to one OpInfo rebuilds its group's package only. A sample whose import
has no ops (clone, contiguous: views and copies folded to their inputs) is planned in its
group's graph, or, where nothing beside it has ops, beside a one-Relu `carrier` part: `plan`
refuses a graph of no nodes, a limit of a whole model rather than of the op.

The complex64 sweep (`dtype="complex64"`): the OpInfos supporting complex64, their samples in
complex64, each complex tensor a parameter of its planes and each complex result given out as
its planes (opinfo_cases' module docstring): the executor runs real tensors only, and its
planes' gradients are held to the view_as_real of torch's complex128 ones.

Tolerance: the reference stage's (opinfo_cases.compare: 10 x torch's float32 noise plus 16
float32 ulps of the tensor's scale), of the executor's outputs and gradients against torch's
float64 values; a random op's (or `empty`'s) shapes only.
"""

from __future__ import annotations

import json
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from planner.importers.opinfo_stages_page import STAGES

GROUP = 8  # OpInfos a package: ~1 s to compile the schedule of 8 on the 2-core VM
TIMEOUT = 900.0  # seconds without a finished group before its worker is taken for hung


@dataclass(frozen=True)
class Staged:
    """What happened to one OpInfo: the last stage it reached, and `line`, why it went no
    further ('' at matches; `export`, `refused: ...`, `wrong: ...`, `crash: ...`), the index of
    its executor sample (-1: none) and the seconds its checks took."""

    name: str
    family: str
    stage: str
    line: str = ""
    sample: int = -1
    seconds: float = 0.0

    @property
    def expectation(self) -> tuple[str, str]:
        """(stage, line) as the expectations file holds them: a mismatch's numbers left out."""
        line = self.line.split(": error", 1)[0] if self.line.startswith("wrong:") else self.line
        return self.stage, line[:300]


# ---- the executor sample ----------------------------------------------------------------------

def executor_sample(op: Any, name: str, family: str, dtype: str = "float32"
                    ) -> tuple[Staged | None, Any]:
    """The OpInfo's first sample (of opinfo_cases.SAMPLES) that imports and matches torch on the
    reference interpreter, as (None, (index, opinfo_cases.Run)); or (its Staged, None) when none
    does: at op_db when none exports, else at exportable with the first failing sample's line."""
    from tests.importers.opinfo_cases import SAMPLES, _first, _seeded, _Skip, check_sample

    failed = ""
    exported = False
    try:
        samples = list(_first(_seeded(op, "sample", dtype), SAMPLES))
    except Exception as e:  # the OpInfo's own sample generator fails on this torch
        return Staged(name, family, "op_db", f"export: sample inputs: {type(e).__name__}"), None
    for k, sample in enumerate(samples):
        runs: list = []
        try:
            status, detail = check_sample(op, sample, seed=k, runs=runs, random_runs=True,
                                          dtype=dtype)
        except _Skip:
            continue
        exported = True
        if status == "pass" and runs:
            return None, (k, runs[0])
        if not failed and status != "pass":
            failed = f"{status}: sample {k}: {detail}" if status in ("wrong", "crash") \
                else f"refused: {detail}"
    if not exported:
        return Staged(name, family, "op_db", "export"), None
    return Staged(name, family, "exportable", failed or "refused: no sample to compare"), None


# ---- plan, build, run -------------------------------------------------------------------------

def _one_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def _refused_or_crash(e: BaseException, planning: bool = False) -> str:
    """A planner error or a missing kernel (the one-line refusals the reference stage counts,
    and codegen's UnsupportedError) is refused, and in `planning` any ValueError (planning's
    refusals are ValueErrors, planner/errors.py: a graph of no nodes, one beyond the memory);
    anything else a crash, its type named (a failed compile of generated code, codegen's
    BuildError, is a bug)."""
    from codegen.errors import BuildError, UnsupportedError
    from tests.importers.opinfo_cases import _planner_errors

    refusals = (*_planner_errors(), UnsupportedError, *((ValueError,) if planning else ()))
    if isinstance(e, refusals) and not isinstance(e, BuildError):
        return f"refused: {_one_line(e)}"
    return f"crash: {type(e).__name__}: {_one_line(e)}"


def host_plan(graph: Any) -> Any:
    """`graph` through the front end's passes and planned for this host, as `planner plan
    --target host` plans a graph file (analytical costs: the same plan, and package digest, on
    every run)."""
    from planner.frontend.options import GraphOptions
    from planner.frontend.prepare import prepare
    from planner.pipeline import PlanOptions, plan
    from planner.target.detect import detect

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return plan(prepare(graph, GraphOptions()), detect(), options=PlanOptions())


def has_kernels(planned: Any) -> None:
    """UnsupportedError naming the ops and dtypes of the plan's graph the CPU runtime lacks."""
    from codegen import support
    from codegen.backends import RUNTIMES

    if planned.graph.nodes:  # a graph of no ops runs merged with the others
        support.check(planned.graph, RUNTIMES["cpu"])


def built(planned: Any) -> Any:
    """The plan's executor package from the host's package cache (built where missing)."""
    from codegen.cached import load_built, package_name

    return load_built(planned, None, package_name(planned, "opinfo_"))[0]


def mismatches(package: Any, parts: dict[str, Any]) -> dict[str, str]:
    """Run the package (of the merged graph of `parts`, prefix -> Run) once; the first value
    off of each part (prefix -> its line), by opinfo_cases.compare's rule."""
    from tests.importers.opinfo_cases import compare

    executor = package.Executor()
    executor.load_params({p + n: v for p, r in parts.items() for n, v in r.params.items()})
    # a cotangent no gradient reads (slogdet's sign) is no input of the built graph
    read = {t.name for t in _graph_of(package).by_role("input")}
    with np.errstate(all="ignore"):
        out = executor.forward({p + n: v for p, r in parts.items() for n, v in r.feeds.items()
                                if p + n in read})
    bad: dict[str, str] = {}
    for p, r in parts.items():
        for tensor, (t32, t64) in r.torch.items():
            mine = np.asarray(out[p + tensor])
            line = (compare(tensor, mine, t32, t64) if r.values else
                    f"{tensor}: shape {list(mine.shape)}, torch's {list(t64.shape)}"
                    if mine.shape != t64.shape else "")
            if line:
                bad[p] = line
                break
    return bad


def _graph_of(package: Any) -> Any:
    from planner.ir.graph import Graph

    return Graph.model_validate(json.loads(package.plan)["graph"])


# ---- a group ----------------------------------------------------------------------------------

def stage_group(names: Sequence[str], stop: str = "matches", ops: dict[str, Any] | None = None,
                mark: Callable[[str, str], None] = lambda name, stage: None,
                dtype: str = "float32") -> list[Staged]:
    """Every stage up to `stop` (planned, built or matches) of the OpInfos `names` of the
    `dtype` sweep, their executor samples merged into one package (module docstring).
    `mark(name, stage)` is called as an OpInfo reaches imported and built: where a signal
    kills the process, the sweep knows the last stage reached."""
    from tests.importers.opinfo_cases import by_name, family_of

    ops = ops if ops is not None else by_name(dtype)
    done: dict[str, Staged] = {}
    plans: dict[str, tuple[Any, Any]] = {}  # name -> (Run, plan) of those planned
    timed: dict[str, float] = {}
    for name in names:
        start = time.perf_counter()
        family = family_of(name, type(ops[name]).__name__)
        early, chosen = executor_sample(ops[name], name, family, dtype)
        if early is None:
            k, run = chosen
            mark(name, "imported")
            early = _planned(name, family, k, run, stop, plans)
        if early is not None:
            done[name] = early
        timed[name] = time.perf_counter() - start
    if plans:
        done |= _executor_stages(plans, names, ops, stop, mark)
    return [Staged(**{**asdict(done[n]), "seconds": round(timed[n] + done[n].seconds, 2)})
            for n in names]


def _planned(name: str, family: str, k: int, run: Any, stop: str,
             plans: dict[str, tuple[Any, Any]]) -> Staged | None:
    """The sample planned and its kernels found (recorded in `plans`), or where it stopped. A
    graph of no ops (a view, a copy: the import folds it to its input) has nothing to plan
    alone: it rides in its group's package, planned there (or beside `carrier`)."""
    from tests.codegen.merged_graph import merge

    if not run.graph.nodes:
        plans[name] = (k, run, None)
        return None
    try:
        # as one part of a merged graph: an inference graph the executor's forward() runs
        # (the import's forward-and-backward graph is no training step: it updates nothing)
        planned = host_plan(merge("opinfo", {"": run.graph}))
    except Exception as e:
        return Staged(name, family, "imported", _refused_or_crash(e, planning=True), k)
    try:
        has_kernels(planned)
    except Exception as e:
        return Staged(name, family, "planned", _refused_or_crash(e), k)
    plans[name] = (k, run, planned)
    return None


def _executor_stages(plans: dict[str, tuple], names: Sequence[str], ops: dict[str, Any],
                     stop: str, mark: Callable[[str, str], None]) -> dict[str, Staged]:
    """Planned, built and run merged (up to `stop`); where the merged graph fails to, each
    alone."""
    from tests.codegen.merged_graph import merge
    from tests.importers.opinfo_cases import family_of

    fam = {n: family_of(n, type(ops[n]).__name__) for n in plans}
    if len(plans) > 1:
        start = time.perf_counter()
        prefixes = {f"o{names.index(n)}/": n for n in plans}
        try:
            graph = merge("opinfo_group", {p: plans[n][1].graph for p, n in prefixes.items()})
            planned = host_plan(graph)
            package = None if stop == "planned" else built(planned)
            for n in prefixes.values() if package is not None else ():
                mark(n, "built")
            bad = {} if stop in ("planned", "built") else mismatches(
                package, {p: plans[n][1] for p, n in prefixes.items()})
        except Exception:  # whose it is: each alone
            pass
        else:
            share = (time.perf_counter() - start) / len(plans)
            return {n: _reached(n, fam[n], plans[n][0], bad.get(p, ""), stop, share)
                    for p, n in prefixes.items()}
    return {n: _alone(n, fam[n], k, run, planned, stop, mark)
            for n, (k, run, planned) in plans.items()}


def _alone(name: str, family: str, k: int, run: Any, planned: Any, stop: str,
           mark: Callable[[str, str], None]) -> Staged:
    from tests.codegen.merged_graph import merge

    start = time.perf_counter()
    parts = {"": run}
    if planned is None:  # a graph of no ops, alone: planned beside the carrier
        parts["carrier/"] = carrier()
        try:
            planned = host_plan(merge("opinfo", {p: r.graph for p, r in parts.items()}))
        except Exception as e:
            return Staged(name, family, "imported", _refused_or_crash(e, planning=True), k)
    if stop == "planned":
        return Staged(name, family, "planned", "", k)
    try:
        package = built(planned)
    except Exception as e:
        return Staged(name, family, "planned", _refused_or_crash(e), k)
    mark(name, "built")
    try:
        bad = {} if stop == "built" else mismatches(package, parts)
    except Exception as e:
        return Staged(name, family, "built", f"crash: run: {type(e).__name__}: {_one_line(e)}",
                      k, time.perf_counter() - start)
    return _reached(name, family, k, bad.get("", ""), stop, time.perf_counter() - start)


def carrier() -> Any:
    """A part of one Relu and its exact values (opinfo_cases.Run): what a graph of no ops is
    planned and built beside when no other part of its group has ops (`plan` refuses a graph
    of no nodes: a limit of a whole model, not of the op)."""
    from planner.ir.graph import Graph, Node, Tensor
    from tests.importers.opinfo_cases import Run

    x = np.linspace(-1.0, 1.0, 6, dtype=np.float32).reshape(2, 3)
    y = np.maximum(x, 0)
    graph = Graph(name="carrier", kind="inference",
                  tensors=(Tensor(name="x", shape=(2, 3), role="input"),
                           Tensor(name="y", shape=(2, 3))),
                  nodes=(Node(name="relu", op="Relu", inputs=("x",), outputs=("y",)),),
                  outputs=("y",))
    return Run(graph, {}, {"x": x}, {"y": (y, y.astype(np.float64))})


def _reached(name: str, family: str, k: int, bad: str, stop: str, seconds: float) -> Staged:
    if stop in ("planned", "built"):
        return Staged(name, family, stop, "", k, seconds)
    if bad:
        return Staged(name, family, "built", f"wrong: sample {k}: {bad}", k, seconds)
    return Staged(name, family, "matches", "", k, seconds)


# ---- the sweep --------------------------------------------------------------------------------

def groups(names: Sequence[str], size: int = GROUP, dtype: str = "float32") -> list[list[str]]:
    """`names` in op_db's fixed groups: consecutive runs of `size` of all OpInfos of the `dtype`
    sweep by name, each cut to the names asked for (so that a group's package is the same
    whichever subset is swept)."""
    from tests.importers.opinfo_cases import by_name

    every = sorted(by_name(dtype))
    wanted = set(names)
    cut = [[n for n in every[k:k + size] if n in wanted] for k in range(0, len(every), size)]
    return [g for g in cut if g]


def staged_sweep(names: Sequence[str] | None = None, jobs: int = 1, stop: str = "matches",
                 progress: Callable[[Staged], None] | None = None,
                 dtype: str = "float32") -> list[Staged]:
    """stage_group of every OpInfo of the `dtype` sweep (or those named), a group at a time, on
    `jobs` worker processes (`python -m tests.helpers.opinfo_stages STOP DTYPE`: a group a line
    in, a Staged a line out). A worker that dies (a signal inside the executor) or goes
    TIMEOUT seconds without an answer has its unanswered group split into single OpInfos,
    tried again each in a new worker; a lone OpInfo that does so is a crash at the last stage
    the worker marked it at (stage_group's `mark`: exportable, imported or built).
    `progress(staged)` as each finishes."""
    from tests.importers.opinfo_cases import by_name, family_of, in_threads

    ops = by_name(dtype)
    names = sorted(ops) if names is None else sorted(names)
    families = {n: family_of(n, type(ops[n]).__name__) for n in names}
    work = groups(names, dtype=dtype)
    shards = [work[k::max(jobs, 1)] for k in range(max(jobs, 1))]
    done = in_threads(shards, lambda shard, record: _run_shard(shard, families, record,
                                                               [stop, dtype]), progress)
    return [done[n] for n in names]


def _run_shard(pending: list[list[str]], families: dict[str, str],
               record: Callable[[Staged], None], args: list[str]) -> None:
    import subprocess
    import threading

    root = Path(__file__).resolve().parents[2]
    while pending:
        proc = subprocess.Popen([sys.executable, "-m", "tests.helpers.opinfo_stages", *args],
                                cwd=root, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, text=True)
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write("".join(" ".join(g) + "\n" for g in pending))
        proc.stdin.close()
        timer = threading.Timer(TIMEOUT, proc.kill)
        timer.start()
        reached: dict[str, str] = {}  # the worker's marks: the last stage each reached
        for line in proc.stdout:
            if line.startswith("~ "):
                _, name, stage = line.split()
                reached[name] = stage
            if not line.startswith("{"):
                continue
            s = Staged(**json.loads(line))
            pending[0].remove(s.name)
            if not pending[0]:
                pending.pop(0)
                timer.cancel()
                timer = threading.Timer(TIMEOUT, proc.kill)
                timer.start()
            record(s)
        timer.cancel()
        code = proc.wait()
        if pending and len(pending[0]) > 1:  # whose it was: each alone
            pending[:1] = [[n] for n in pending[0]]
        elif pending:
            name = pending.pop(0)[0]
            why = f"the process died ({code})" if code != -9 else f"no answer in {TIMEOUT:.0f} s"
            record(Staged(name, families[name], reached.get(name, "exportable"),
                          f"crash: {why}"))


def _worker() -> None:
    """The worker: the last stage and the dtype as its arguments, a group of OpInfo names a
    line on stdin, one Staged as JSON a line on stdout (a group's at once, when it is done),
    and before them its marks, `~ NAME STAGE` lines (stage_group's `mark`)."""
    from tests.importers.opinfo_cases import DTYPES, by_name

    stop = sys.argv[1] if len(sys.argv) > 1 else "matches"
    dtype = sys.argv[2] if len(sys.argv) > 2 else "float32"
    if stop not in STAGES[3:] or dtype not in DTYPES:
        raise SystemExit(f"stage {stop!r} is not one of {', '.join(STAGES[3:])}, or dtype "
                         f"{dtype!r} not one of {', '.join(DTYPES)}")
    out, sys.stdout = sys.stdout, sys.stderr  # what torch prints does not mix with the answers
    ops = by_name(dtype)

    def mark(name: str, stage: str) -> None:
        out.write(f"~ {name} {stage}\n")
        out.flush()

    for line in sys.stdin:
        if line.split():
            for s in stage_group(line.split(), stop, ops, mark, dtype):
                out.write(json.dumps(asdict(s)) + "\n")
            out.flush()


# ---- the expectations file ------------------------------------------------------------------

def expectations_json(rows: dict[str, tuple[str, str, str]]) -> str:
    """The expectations file: OpInfo name -> [family, stage, line], by name, a row a line."""
    lines = [f"{json.dumps(n)}: {json.dumps(list(rows[n]))}" for n in sorted(rows)]
    return "{\n" + ",\n".join(lines) + "\n}\n"


if __name__ == "__main__":
    _worker()
