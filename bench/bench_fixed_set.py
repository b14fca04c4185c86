"""The fixed performance set (issue 89): a named list of models, each trained by planner.torch's
trainer, by torch.compile(backend="planner"), and by PyTorch eager and Inductor at one thread
and at the host's cores, quiet and beside busy neighbours; one markdown table per condition
with each model's step times, ours against theirs, and the geometric means.

    python bench/bench_fixed_set.py [--neighbours 0,4] [--rounds 3] [--steps 10]
                                    [--models NAME,...] [--quick] [--costs measured|in-step]
                                    [--engines trainer,backend]

The set (SET, fixed so that runs compare): the nn.Module table (bench/cpu_modules.py's
MODULES), two of the CPU strategies table's models as nn.Module twins (bench/zoo_modules.py at
bench/bench_cpu_strategies.py's sizes) and two of the fresh models of issue 46
(tests/importers/fresh_models.py at bench sizes). `--quick`: QUICK, two small ones (the
test's run).

Engines (`engines()`): `trainer` is planner.torch.trainer's executor (adaptive: the main
schedule or its variant for the cores granted and measured free), `backend` the user's loop
with torch.compile(loss, backend="planner") (the way and the schedule chosen by measurement,
planner/torch/lane_choice.py), both priced by `--costs`; `eager Nt` and `inductor Nt` the
user's loop eagerly and under torch.compile (Inductor) with torch.set_num_threads(N). Each
engine of a model runs in a process of its own (bench/step_process.py: one libgomp per
process), built once (bench/bench_vs_compile.py's engine_step, also its first-step time) and
stepped in every round and condition. A round measures every condition (`--neighbours`: N
2-thread BLAS loops, or loaderW, bench/bench_neighbours.py's neighbours), in the other order
each round; under each, the engines in the other order each round, each warmed up under it
first (the trainer and the backend ADAPT_STEPS steps: their choice of schedule and way needs
steps to notice the neighbours), then `--steps` timed steps. Tables: medians over rounds of
each round's median; `best` is the fastest of the PyTorch engines (eager and Inductor at
their best thread count); ratios above 1 mean ours is faster; the 1-minute load average at
each measurement.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from bench_neighbours import ADAPT_STEPS, load  # noqa: E402
from bench_vs_compile import engine_parts  # noqa: E402
from step_process import StepProcess  # noqa: E402

# The nn.Module table, two strategies models, two fresh models: each a different kind of step
# (depthwise convolutions, residual convolutions, attention; transposed convolutions,
# embeddings and wide GEMMs; a mixture of experts, a GPT with label smoothing).
SET = ("mobilenet_v2", "resnet18", "transformer_encoder", "dcgan", "wide_deep", "moe", "gpt")
QUICK = ("transformer_encoder", "gpt")
OURS = ("trainer", "backend")


def engines(threads: tuple[int, ...]) -> tuple[str, ...]:
    """The engines' names: ours, then PyTorch's at each thread count."""
    return (*OURS, *(f"{kind} {t}t" for kind in ("eager", "inductor") for t in threads))


def engine_step(label: str, engine: str, folder: Path, costs: str):
    """`engine` of model `label` for a StepProcess (bench_vs_compile.engine_parts: `trainer`
    is its `ours`, `inductor` its `compile`); the trainer and the backend priced by `costs`
    alike (the backend's default would measure in a background child while the others are
    timed). Its report: the first step's seconds, then what ours ran (ran)."""
    kind, _, threads = engine.partition(" ")
    name = {"trainer": "ours", "inductor": "compile"}.get(kind, kind)
    step, first, _, trainer = engine_parts(label, name, folder, costs, False,
                                           int(threads.removesuffix("t")) if threads else None,
                                           costs)
    return step, lambda: f"{first:.3f} {ran(kind, trainer)}"


def ran(kind: str, trainer) -> str:
    """Which schedule the trainer's executor runs and why; for the backend, the way its calls
    run (lanes or PyTorch's team: planner/torch/lane_choice.py) and the schedules of its
    executors; "" for PyTorch."""
    if trainer is not None:
        s = trainer.executor.stats()["schedule"]
        return f"{s['running']}: {s['reason']}"
    if kind != "backend":
        return ""
    from planner.torch import executors
    from planner.torch.lane_choice import ChosenWay

    held = [*executors._EXECUTORS.values(),
            *(e for p in list(executors._POOLS.values()) for e in p.idle())]
    schedules = sorted({(e.ex if isinstance(e, ChosenWay) else e).stats()["schedule"]["running"]
                        for e in held})
    way = executors.STEP_WAY.choice
    return f"{way.running} ({way.reason}); schedules {', '.join(schedules)}"


def timed(run: StepProcess, engine: str, steps: int, batches) -> float:
    """The median of `steps` steps of `run`, after its warm-up under the current neighbours."""
    times = []
    for k in range((ADAPT_STEPS if engine in OURS else 1) + steps):
        if batches is not None:
            next(batches)  # a DataLoader neighbour: the loop's next batch, not timed
        seconds = run.step()
        if k >= (ADAPT_STEPS if engine in OURS else 1):
            times.append(seconds)
    return statistics.median(times)


def measure(label: str, folder: Path, names: tuple[str, ...], conditions: list[str],
            rounds: int, steps: int, costs: str) -> dict:
    """One model's medians: {condition: {engine: seconds}}, loads {condition: [load]} and
    each engine's first step (building or compiling included)."""
    folder.mkdir(parents=True, exist_ok=True)
    runs: dict[str, StepProcess] = {}
    times = {(c, e): [] for c in conditions for e in names}
    loads: dict[str, list[float]] = {c: [] for c in conditions}
    try:
        for e in names:  # one after another: the trainer's plan and costs serve the rest
            runs[e] = StepProcess(engine_step, label, e, folder, costs, what=f"{label} {e}")
        firsts = {e: float(runs[e].report().split()[0]) for e in names}
        what_ran = {}
        for r in range(rounds):
            for c in conditions if r % 2 == 0 else conditions[::-1]:
                procs, batches = load(c)
                try:
                    time.sleep(0.5 if c != "0" else 0.0)
                    for e in names if r % 2 == 0 else names[::-1]:
                        times[c, e].append(timed(runs[e], e, steps, batches))
                    loads[c].append(os.getloadavg()[0])
                    for e in OURS:  # the last round's
                        if e in runs:
                            what_ran[c, e] = runs[e].report().split(" ", 1)[1]
                finally:
                    for p in procs:
                        p.kill()
                        p.join()
                    del batches
                print(f"{label}: round {r + 1}/{rounds}, neighbours {c} done, load "
                      f"{loads[c][-1]:.2f}", file=sys.stderr, flush=True)
    finally:
        for run in runs.values():
            run.close()
    return {"medians": {c: {e: statistics.median(times[c, e]) for e in names}
                        for c in conditions},
            "loads": loads, "firsts": firsts, "ran": what_ran}


def geomean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def ratio_columns(names: tuple[str, ...], threads: tuple[int, ...]) -> list[tuple[str, str]]:
    """(theirs, ours) per ratio column: eager and Inductor at the host's cores (PyTorch's
    default thread count) and the best PyTorch engine, each over the trainer and the backend."""
    default = max(threads)
    theirs = [f"eager {default}t", f"inductor {default}t", "best"]
    return [(t, o) for o in OURS if o in names for t in theirs
            if (t == "best" and any(e not in OURS for e in names)) or t in names]


def table(rows: dict[str, dict[str, float]], loads: dict[str, float],
          names: tuple[str, ...], threads: tuple[int, ...]) -> str:
    """The markdown table of one condition: per model each engine's ms, the ratios (theirs /
    ours: above 1, ours is faster), its load; then the ratios' geometric means."""
    cols = ratio_columns(names, threads)
    pytorch = [e for e in names if e not in OURS]
    head = ["model", *(f"{e} ms" for e in names), *(f"{t}/{o}" for t, o in cols), "load"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    ratios: dict[tuple[str, str], list[float]] = {c: [] for c in cols}
    for label, ms in rows.items():
        best = min((ms[e] for e in pytorch), default=math.nan)  # (--engines: none of them)
        cells = [label, *(f"{ms[e] * 1e3:.1f}" for e in names)]
        for t, o in cols:
            r = (best if t == "best" else ms[t]) / ms[o]
            ratios[t, o].append(r)
            cells.append(f"{r:.2f}")
        lines.append("| " + " | ".join([*cells, f"{loads[label]:.2f}"]) + " |")
    lines.append("| " + " | ".join(["geomean", *("" for _ in names),
                                    *(f"{geomean(ratios[c]):.2f}" for c in cols), ""]) + " |")
    return "\n".join(lines)


def report(results: dict[str, dict], conditions: list[str], names: tuple[str, ...],
           threads: tuple[int, ...], args) -> str:
    """Every condition's table, the heading saying what ran, and the first steps."""
    out = [f"{os.cpu_count()} logical CPUs; medians of {args.rounds} rounds of {args.steps} "
           f"steps (ours after {ADAPT_STEPS} steps' warm-up under each condition), each engine "
           f"in a process of its own; trainer and backend priced by {args.costs} costs"]
    for c in conditions:
        what = "quiet" if c == "0" else (f"beside {c} busy neighbours (2-thread numpy "
                                         f"matmul loops)" if c.isdigit() else c)
        out += ["", f"### {what}", "",
                table({m: r["medians"][c] for m, r in results.items()},
                      {m: statistics.median(r["loads"][c]) for m, r in results.items()},
                      names, threads), "", "what ours ran (the last round):", ""]
        out += [f"- {m} {e}: {r['ran'][c, e]}" for m, r in results.items() for e in OURS
                if e in names]
    out += ["", "first step, s (building or compiling included):", "",
            "| model | " + " | ".join(names) + " |", "|" + " --- |" * (len(names) + 1)]
    out += ["| " + " | ".join([m, *(f"{r['firsts'][e]:.1f}" for e in names)]) + " |"
            for m, r in results.items()]
    return "\n".join(out)


def arguments() -> argparse.Namespace:
    from cpu_modules import FRESH, MODULES, STRATEGIES

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=",".join(SET))
    ap.add_argument("--quick", action="store_true", help=f"the models {', '.join(QUICK)}")
    ap.add_argument("--neighbours", default="0,4",
                    help="the conditions: N BLAS-loop neighbours (0: quiet) or loaderW")
    ap.add_argument("--threads", default=f"1,{os.cpu_count() or 1}",
                    help="PyTorch's thread counts (eager and Inductor each)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--engines", help="only these engines, comma-separated (default: all; "
                    "e.g. trainer,backend: an A/B of ours without PyTorch's compiles)")
    ap.add_argument("--costs", choices=("measured", "in-step"), default="measured",
                    help="what the trainer's and the backend's plans are priced with")
    args = ap.parse_args()
    args.models = list(QUICK) if args.quick else args.models.split(",")
    known = (*MODULES, *STRATEGIES, *FRESH)
    for label in args.models:
        if label not in known:
            sys.exit(f"--models: unknown model {label!r} (one of {', '.join(known)})")
    for n in args.neighbours.split(","):
        if not (n.isdigit() or (n.startswith("loader") and n[6:].isdigit())):
            sys.exit(f"--neighbours: {n!r} is neither a count nor loaderW")
    if not all(t.isdigit() and int(t) > 0 for t in args.threads.split(",")):
        sys.exit(f"--threads: {args.threads!r} is not a list of thread counts")
    known_engines = engines(tuple(sorted({int(t) for t in args.threads.split(",")})))
    for e in (args.engines or "").split(",") if args.engines else ():
        if e not in known_engines:
            sys.exit(f"--engines: unknown engine {e!r} (one of {', '.join(known_engines)})")
    return args


def main() -> None:
    args = arguments()
    threads = tuple(sorted({int(t) for t in args.threads.split(",")}))
    names, conditions = engines(threads), args.neighbours.split(",")
    if args.engines:
        names = tuple(e for e in names if e in args.engines.split(","))
    results = {}
    with tempfile.TemporaryDirectory(prefix="bench-fixed-set-") as work:
        for label in args.models:
            print(f"{label}: building its engines", file=sys.stderr, flush=True)
            results[label] = measure(label, Path(work) / label.replace("-", "_"), names,
                                     conditions, args.rounds, args.steps, args.costs)
    print(report(results, conditions, names, threads, args))


if __name__ == "__main__":
    main()
