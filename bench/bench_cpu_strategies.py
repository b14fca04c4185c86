"""CPU strategies measured (issue 13): the plans' step times on this machine's cores, against
PyTorch eager and torch.compile on the same cores.

    python bench/bench_cpu_strategies.py [--models lstm,dcgan,...] [--steps 5] [--rounds 3]
                                         [--costs in-step|kernels|measured] [--no-compile]
                                         [--json]

Per model (zoo training graphs, SGD, sizes that run in minutes on a small machine):

1. Profile: `planner profile --in-step` of the training graph on this host (every op timed
   inside the step, one uniform plan per thread count; `--costs kernels`: each signature's
   kernel alone, hill climbing over thread counts); cached in bench/.costs/ per model, host,
   method and CPU runtime (its build key: changed kernels are profiled anew); `--costs
   measured`: what a plan of this host is priced by when nobody names a table (each signature
   measured once per host and kept in $PLANNER_CACHE: codegen.profiling.host_measured).
2. Plan with the profiled costs: uniform (every op on all cores, one at a time), every uniform
   grid configuration (intra x inter; the best measured one is reported), paper, optimized,
   and optimized without co-run groups (`no co-run groups`).
3. Build each plan's executor; measure steps in alternating rounds (every variant once per
   round, `steps` steps each), report the median over rounds of each round's median. Every
   contender (each executor, PyTorch eager, torch.compile) runs in a process of its own
   (step_process.py: in one process they shared a libgomp that woke sleeping workers at every
   parallel region).
4. PyTorch: the same model written as an nn.Module (bench/zoo_modules.py: what a user runs;
   its parameter count checked against the zoo graph's), one torch.optim.SGD step eager and
   under torch.compile (inductor), torch.set_num_threads = the host's cores. inception_v3 at
   a width multiplier has no nn.Module twin: its eager column is the graph translated node by
   node (tests/torch_translator.py), and torch.compile is left out (on the
   translation it recompiles the per-op helpers for every shape: not what a user runs).
5. Feedback: the optimized plan's measured op times (medians of 3 steps' stats()) fold into
   the cost table (planner.costs.feedback) and the graph is planned again: `re-planned`.
6. The guard: `kept` is the fastest of optimized, re-planned and uniform as measured, never
   a plan slower than uniform.

Printed per model: measured ms, predicted ms (the plan's simulated step) and their ratio,
and each variant's speed-up over uniform; the load average before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from step_process import StepProcess  # noqa: E402
from torch_baseline import torch_trainer  # noqa: E402
from zoo_modules import TWINS, module_trainer, zoo_twin_params  # noqa: E402

from codegen.profiling import median_stats, warmed_executor  # noqa: E402
from planner.costs import CostTable, load_table  # noqa: E402
from planner.frontend.options import GraphOptions  # noqa: E402
from planner.frontend.prepare import prepare  # noqa: E402
from planner.graph.interpret import init_params, random_feeds  # noqa: E402
from planner.graph.optimizer import Optimizer  # noqa: E402
from planner.pipeline import PlanOptions, plan, step_graph  # noqa: E402
from planner.schedule import ScheduleOptions  # noqa: E402
from planner.schedule.uniform import grid_pairs  # noqa: E402
from planner.target.detect import detect  # noqa: E402
from planner.zoo import build as zoo  # noqa: E402

MODELS = {
    "lstm": dict(batch=32, seq=20, hidden=256, layers=2, vocab=2000),
    "dcgan": dict(batch=32),
    "inception_v3": dict(batch=32, image=107, width=0.25, classes=100),
    "resnet-50": dict(depth=50, batch=32, image=64, width=0.25, classes=100),
    "wide_deep": dict(batch=64),
}
# --tiny: the same models at sizes a 2-core machine profiles, plans, builds and steps in about
# a minute each (the device call's dry run, bench/device/call_cpu.sh --dry-run).
TINY = {
    "lstm": dict(batch=4, seq=4, hidden=32, layers=1, vocab=64),
    "dcgan": dict(batch=4, image=8, nz=16, width=0.125),
    "inception_v3": dict(batch=2, image=75, width=0.125, classes=10),
    "resnet-50": dict(depth=50, batch=2, image=32, width=0.125, classes=10),
    "wide_deep": dict(batch=8),
}
SGD = Optimizer(kind="sgd", lr=0.01)
HERE = Path(__file__).resolve().parent


def zoo_name(label: str) -> str:
    return "resnet" if label.startswith("resnet") else label


def profiled_costs(label: str, graph, target, method: str = "in-step") -> CostTable:
    """The cost table of `graph` on this host, profiled once per runtime and kept in
    bench/.costs/ (a table measured against other kernels would price today's wrongly)."""
    from codegen.build import runtime_key
    from codegen.profiling import KernelTimer, profile_in_step
    from planner.costs.conv_layouts import profiled_signatures
    from planner.costs.profile import ProfileOptions, profile
    from planner.target.backends import channel_block

    if method == "measured":
        from codegen.profiling import host_measured

        return host_measured(graph, target, progress=sys.stderr)
    folder = HERE / ".costs"
    folder.mkdir(exist_ok=True)
    suffix = "" if method == "kernels" else f".{method}"
    path = folder / f"{label}.{target.cores}cores.{runtime_key()[:12]}{suffix}.json"
    table = load_table(path) if path.exists() else CostTable(target=target.name)
    options = ProfileOptions(interval=max(1, target.cores // 8), repeats=1)
    blocked = bool(channel_block(target))
    if method == "in-step":
        # A table kept from another version of the graph (another rewrite) lacks some of its
        # signatures (the convolutions' channels-last ones among them): profiled anew. What
        # the profile measures is the step's graph (rewritten for the cores: planner.step.
        # for_cores), the one to check against: the graph itself made the LSTM's profile anew
        # on every run, and its plans moved with each.
        step = step_graph(graph, target)
        if not path.exists() or any(s not in table for s in profiled_signatures(step, blocked)):
            with tempfile.TemporaryDirectory(prefix="planner-profile-") as work:
                table = profile_in_step(graph, target, work, options, steps=5,
                                        progress=sys.stderr)
            path.write_text(table.to_json())
        return table
    with tempfile.TemporaryDirectory(prefix="planner-profile-") as work:
        run = profile(profiled_signatures(graph, blocked), target,
                      KernelTimer(target, work, options, steps=3), options, table=table,
                      checkpoint=lambda t: path.write_text(t.to_json()))
    path.write_text(run.table.to_json())
    return run.table


def variants(graph, target, table) -> dict[str, object]:
    """The plans to measure, by name."""
    def planned(**options):
        return plan(graph, target, table, PlanOptions(schedule=ScheduleOptions(**options)))

    out = {"uniform": planned(strategy="uniform")}
    for intra, inter in grid_pairs(target.cores):
        if (intra, inter) != (target.cores, 1):
            out[f"grid {intra}x{inter}"] = planned(strategy="uniform", intra=intra, inter=inter)
    out["paper"] = planned(strategy="paper")
    out["optimized"] = planned(strategy="optimized")
    # The same search without co-run groups: what they buy, measured in the same rounds.
    out["no co-run groups"] = planned(strategy="optimized", corun_groups=False)
    return out


def executor_step(p, folder: Path, graph):
    """`p`'s executor (built under `folder`), warmed up: its step (in a StepProcess)."""
    feeds = random_feeds(graph, seed=1)
    ex = warmed_executor(p, folder, init_params(graph, seed=0), feeds)
    return lambda: ex.step(feeds)


def built(p, folder: Path) -> None:
    """`p` rendered and built under `folder` here (progress in this process), so that the
    engine's process only loads it."""
    from codegen.build import build
    from codegen.render import render

    build(render(p, folder))


def replanned(p, folder: Path, graph, target, table):
    """The plan made again with `p`'s measured op times folded into `table`."""
    from planner.costs.feedback import fold_stats

    feeds = random_feeds(graph, seed=1)
    ex = warmed_executor(p, folder, init_params(graph, seed=0), feeds)
    folded = fold_stats(table, p, median_stats(ex, feeds, 3))
    return plan(graph, target, folded, PlanOptions(schedule=ScheduleOptions(
        strategy="optimized")))


def measure(runners: dict[str, StepProcess], steps: int, rounds: int) -> dict[str, float]:
    """Median over alternating rounds of each round's median step seconds."""
    per_round: dict[str, list[float]] = {k: [] for k in runners}
    for _ in range(rounds):
        for name, run in runners.items():
            per_round[name].append(statistics.median(run.step() for _ in range(steps)))
    return {k: statistics.median(v) for k, v in per_round.items()}


def bench_model(label: str, target, steps: int, rounds: int, compiled: bool,
                costs: str = "in-step", size: dict | None = None) -> dict:
    size = size or MODELS[label]
    forward = zoo(zoo_name(label), **size)
    graph = prepare(forward, GraphOptions(optimizer=SGD))
    t0 = time.perf_counter()
    # A tiny model's in-step table is kept apart from the full size's (bench/.costs/ by label).
    table = profiled_costs(label if size == MODELS[label] else f"{label}.tiny", graph, target,
                           costs)
    profile_s = time.perf_counter() - t0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plans = variants(graph, target, table)
    runners: dict[str, object] = {}
    with tempfile.TemporaryDirectory() as tmp:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            plans["re-planned"] = replanned(plans["optimized"], Path(tmp) / "feedback", graph,
                                            target, table)
        # Each contender in a process of its own (step_process.py: one libgomp per process).
        for name, p in plans.items():
            folder = Path(tmp) / name.replace(" ", "_")
            built(p, folder)
            runners[name] = StepProcess(executor_step, p, folder, graph, what=name)
        failed = {}
        if label in TWINS:
            theirs, ours = zoo_twin_params(label, size)
            if theirs != ours:
                raise SystemExit(f"{label}: the nn.Module twin has {theirs} parameters, the "
                                 f"zoo graph {ours}")
            runners["torch eager"] = StepProcess(module_trainer, label, size, SGD.lr,
                                                 target.cores, what="torch eager")
        else:
            runners["torch eager"] = StepProcess(torch_trainer, forward, SGD.lr, target.cores,
                                                 what="torch eager")
            failed["torch.compile"] = "no nn.Module twin (eager: the node-by-node translation)"
        if compiled and label in TWINS:
            try:
                runners["torch.compile"] = StepProcess(module_trainer, label, size,
                                                       SGD.lr, target.cores, True,
                                                       what="torch.compile")
            except SystemExit as e:  # a compiler bug must not lose the table
                failed["torch.compile"] = str(e)[:120]
        try:
            measured = measure(runners, steps, rounds)
        finally:
            for run in runners.values():
                run.close()
    grid = {k: v for k, v in measured.items() if k.startswith("grid") or k == "uniform"}
    best_grid = min(grid, key=grid.get)
    kept = min(("optimized", "re-planned", "uniform"), key=measured.get)
    return {
        "model": label, "ops": len(graph.nodes), "params": size, "costs": costs,
        "profile_seconds": round(profile_s, 1), "signatures": len(table.entries),
        "kappa": table.contention, "sigma": table.corun_slowdown, "team": table.team_scale,
        "measured_ms": {k: v * 1e3 for k, v in measured.items()},
        "predicted_ms": {k: p.summary.step_seconds * 1e3 for k, p in plans.items()},
        "best_grid": best_grid, "kept": kept, "failed": failed,
        # What no schedule of these kernels beats: the optimized plan's lower bound from the
        # same profile (the critical path at each op's fastest, the cores' share of the work).
        "bound_ms": plans["optimized"].summary.lower_bound_seconds * 1e3,
    }


def report(rows: list[dict], target, load: tuple[str, str]) -> str:
    lines = [f"host {target.name}: {target.cores} cores, {len(target.logical_cpus)} logical "
             f"CPUs ({target.cpu.model if target.cpu else '?'}); load average before "
             f"{load[0]}, after {load[1]}"]
    for r in rows:
        m, p = r["measured_ms"], r["predicted_ms"]
        base = m["uniform"]
        lines.append(f"\n{r['model']} ({r['ops']} ops, {r['signatures']} signatures profiled "
                     f"({r['costs']}) in {r['profile_seconds']} s; contention kappa "
                     f"{r['kappa']}, sigma {r['sigma']}, team scale {r.get('team')}); "
                     f"best grid: {r['best_grid']}; kept: {r['kept']}")
        lines.append(f"  {'variant':<16}{'measured ms':>12}{'predicted ms':>14}"
                     f"{'pred/meas':>11}{'uniform/x':>11}")
        for name, ms in m.items():
            pred = p.get(name)
            pred_text = f"{pred:>14.2f}{pred / ms:>11.3f}" if pred else f"{'':>14}{'':>11}"
            lines.append(f"  {name:<16}{ms:>12.2f}{pred_text}{base / ms:>11.3f}")
        for name, why in r["failed"].items():
            lines.append(f"  {name:<16} failed: {why}")
        if "bound_ms" in r:
            lines.append(f"  {'lower bound':<16}{r['bound_ms']:>12.2f}{'':>25}"
                         f"{base / r['bound_ms']:>11.3f}   (any schedule of these kernels; "
                         f"eager/bound {m['torch eager'] / r['bound_ms']:.3f})")
    return "\n".join(lines)


def _figure(x) -> str:
    return "-" if x is None else f"{x:.4g}"


def fits_table(rows: list[dict], target) -> str:
    """The contention and team-scale figures each model's plans were priced by (the host's
    fits of `target.cores` cores), and the optimized plan's prediction against its measured
    step beside the best uniform grid's: a markdown table for the bench's results."""
    lines = [f"Fits on {target.cores} cores ({target.cpu.model if target.cpu else '?'}):", "",
             "| model | costs | kappa | sigma | team scale | optimized predicted ms | "
             "measured ms | pred/meas | best grid (ms) | optimized vs best grid | paper ms | "
             "eager ms | torch.compile ms |",
             "|" + " --- |" * 13]
    for r in rows:
        m, p = r["measured_ms"], r["predicted_ms"]
        best = r["best_grid"]
        lines.append(f"| {r['model']} | {r['costs']} | {_figure(r['kappa'])} | "
                     f"{_figure(r['sigma'])} | {_figure(r.get('team'))} | "
                     f"{p['optimized']:.2f} | {m['optimized']:.2f} | "
                     f"{p['optimized'] / m['optimized']:.3f} | {best} ({m[best]:.2f}) | "
                     f"{m[best] / m['optimized']:.3f}x | {_figure(m.get('paper'))} | "
                     f"{_figure(m.get('torch eager'))} | {_figure(m.get('torch.compile'))} |")
    return "\n".join(lines)


def each_model(names: str, run) -> tuple[list[dict], tuple[str, str]]:
    """run(label) for each of the comma-separated model names, with progress on stderr; the
    rows and the load averages before and after."""
    before = os.getloadavg()
    rows = []
    for label in names.split(","):
        if label not in MODELS:
            raise SystemExit(f"unknown model {label!r}; known: {', '.join(MODELS)}")
        rows.append(run(label))
        print(f"done: {label}", file=sys.stderr, flush=True)
    after = os.getloadavg()
    return rows, (" ".join(f"{x:.2f}" for x in before), " ".join(f"{x:.2f}" for x in after))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--costs", choices=["in-step", "kernels", "measured"],
                        default="in-step",
                        help="how ops are profiled: inside the step (default), each "
                             "signature's kernel alone, or as the planner's default prices a "
                             "plan of this host (measured per signature, kept per host)")
    parser.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    parser.add_argument("--tiny", action="store_true",
                        help="the models at tiny sizes (a dry run of the device call)")
    parser.add_argument("--out", type=Path, default=None,
                        help="append each model's row to this file as a JSON line when done")
    parser.add_argument("--fits", type=Path, default=None,
                        help="write the fits and predicted-vs-measured table (markdown) here")
    parser.add_argument("--fits-from", type=Path, default=None,
                        help="with --fits: the table of the rows --out wrote (one process per "
                             "model), measuring nothing")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    target = detect()
    if args.fits_from and args.fits:
        rows = [json.loads(line) for line in args.fits_from.read_text().splitlines() if line]
        args.fits.write_text(fits_table(rows, target) + "\n")
        print(args.fits.read_text(), end="")
        return

    def run(label: str) -> dict:
        row = bench_model(label, target, args.steps, args.rounds, not args.no_compile,
                          args.costs, (TINY if args.tiny else MODELS)[label])
        if args.out:  # written as each model finishes: a call cut short keeps the models done
            with open(args.out, "a") as f:
                f.write(json.dumps({"host": target.name, "cores": target.cores, **row},
                                   sort_keys=True) + "\n")
        return row

    rows, load = each_model(args.models, run)
    if args.fits:
        args.fits.write_text(fits_table(rows, target) + "\n")
    if args.json:
        print(json.dumps({"host": target.name, "cores": target.cores, "load": load,
                          "models": rows}, indent=2, sort_keys=True))
    else:
        print(report(rows, target, load))


if __name__ == "__main__":
    main()
