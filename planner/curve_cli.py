"""`planner fit GRAPH --target T --pareto`: the step-time / memory-budget curve (planner.curve),
written as JSON and SVG, and `--measure N`: N of its plans built and run on this machine's CPUs,
measured step and measured arena beside the prediction.

    planner fit GRAPH --target T --pareto [--points 10] [-o curve.json] [--plot curve.svg]
                [--measure 4] [--steps 10] [--no-offload] [the memory decisions of `plan`]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
import warnings
from typing import Any

from planner.errors import UserError


def add_pareto_flags(f: Any) -> None:
    """The curve's flags on the `fit` parser (its --budget is then not needed)."""
    f.add_argument("--pareto", action="store_true",
                   help="the curve of predicted step time against memory budget, one plan per "
                        "point, from the smallest feasible budget to the unconstrained arena "
                        "(GRAPH may be any graph; --budget and --vary are not used)")
    f.add_argument("--points", type=int, default=10, help="--pareto: budgets (default 10)")
    f.add_argument("-o", "--output", metavar="FILE", help="--pareto: write the curve as JSON")
    f.add_argument("--plot", metavar="SVG", help="--pareto: draw the curve")
    f.add_argument("--measure", type=int, default=0, metavar="N",
                   help="--pareto: build and run N of the curve's plans (CPU target) and print "
                        "measured step and arena beside the prediction")
    f.add_argument("--no-offload", action="store_true",
                   help="--pareto: recompute only (on a CPU the host store is the process's "
                        "memory too: only recompute lowers its peak)")
    f.add_argument("--steps", type=int, default=10, help="--measure: timed steps per plan")
    f.add_argument("--force", action="store_true", help="overwrite existing different files")
    from planner.decisions_cli import add_decision_flags

    add_decision_flags(f)  # --pareto: every point keeps the user's decisions


def chosen(n: int, count: int) -> list[int]:
    """`count` indices of 0..n-1 evenly spread, both ends included.

    >>> chosen(10, 4), chosen(3, 4), chosen(5, 1)
    ([0, 3, 6, 9], [0, 1, 2], [4])
    """
    if count >= n:
        return list(range(n))
    if count == 1:
        return [n - 1]
    return sorted({round(k * (n - 1) / (count - 1)) for k in range(count)})


def run_pareto(args: argparse.Namespace) -> int:
    from planner.costs import load_table
    from planner.curve import budget_curve, curve_svg, format_curve
    from planner.decisions_cli import memory_decisions
    from planner.load import load_graph, write_text
    from planner.memory.options import MemoryOptions
    from planner.pipeline import PlanOptions
    from planner.target.presets import load_target

    if args.points < 2:
        raise UserError(f"--points: a curve needs at least 2 points, got {args.points}")
    if args.measure < 0 or args.steps < 1:
        raise UserError("--measure must be >= 0 and --steps >= 1")
    target = load_target(args.target)
    if args.measure and target.backend != "cpu":
        raise UserError(f"--measure runs the CPU executor; target {target.name!r} is "
                        f"{target.backend}")
    graph = load_graph(args.graph)
    if graph.kind != "training":
        from planner.graph.autodiff import Optimizer, make_training_graph

        graph = make_training_graph(graph, Optimizer(kind=args.train), precision=args.precision,
                                    cores=target.step_cores)
    table = load_table(args.costs) if args.costs else None
    options = PlanOptions(memory=MemoryOptions(offload=not args.no_offload,
                                               **memory_decisions(args)))
    result = budget_curve(graph, target, table, options, args.points)
    curve = result.curve
    if args.output:
        write_text(args.output, curve.to_json(), force=args.force)
    if args.plot:
        write_text(args.plot, curve_svg(curve), force=args.force)
    measured = {}
    if args.measure:
        shas = list(dict.fromkeys(curve.points[i].plan_sha256
                                  for i in chosen(len(curve.points), args.measure)))
        measured = dict(zip(shas, measure([result.plans[s] for s in shas], args.steps),
                            strict=True))
    if args.json:
        print(json.dumps({"curve": curve.model_dump(mode="json"), "measured": measured},
                         indent=2, sort_keys=True))
        return 0
    print(format_curve(curve))
    if measured:
        print(format_measured(curve, measured))
    for path in (args.output, args.plot):
        if path:
            print(f"wrote {path}")
    return 0


def measure(plans: list, steps: int) -> list[dict[str, float]]:
    """Build each plan's CPU executor in a temporary folder, warm it (3 steps), then run the
    executors in turn, one step each, `steps` times (a shared machine's load then falls on
    all alike): per plan the median step and its spread (min, max), and what the executor
    holds: its arena, host store, and scratch a kernel needed beyond its planned area."""
    from codegen.load import load
    from codegen.package import build_package
    from planner.graph.interpret import init_params, random_feeds

    with tempfile.TemporaryDirectory(prefix="curve-") as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        executors, feeds = [], []
        for k, plan in enumerate(plans):
            _, built = build_package(plan, f"{tmp}/executor{k}")
            ex = load(built.dir).Executor()
            ex.load_params(init_params(plan.graph, seed=0))
            feeds.append(random_feeds(plan.graph, seed=1))
            for _ in range(3):
                ex.step(feeds[k])
            executors.append(ex)
        times: list[list[float]] = [[] for _ in plans]
        for _ in range(steps):
            for k, ex in enumerate(executors):
                t0 = time.perf_counter()
                ex.step(feeds[k])
                times[k].append(time.perf_counter() - t0)
        held = [int(ex.stats()["held_bytes"]) for ex in executors]
    return [{"step_seconds": statistics.median(ts), "min_seconds": min(ts),
             "max_seconds": max(ts), "peak_bytes": h} for ts, h in zip(times, held, strict=True)]


def format_measured(curve, measured: dict[str, dict[str, float]]) -> str:
    from planner.memory.options import format_bytes

    lines = ["measured on this machine (median step of the timed steps, [min, max]; planned "
             "and held: arena + host store):",
             f"  {'budget':>11} {'planned':>11} {'held':>11} {'predicted ms':>12} "
             f"{'measured ms':>12}  spread"]
    for p in curve.points:
        m = measured.get(p.plan_sha256)
        if m is None:
            continue
        lines.append(f"  {format_bytes(p.budget_bytes):>11} "
                     f"{format_bytes(p.peak_bytes + p.host_bytes):>11} "
                     f"{format_bytes(m['peak_bytes']):>11} {p.step_seconds * 1e3:>12.3f} "
                     f"{m['step_seconds'] * 1e3:>12.3f}  [{m['min_seconds'] * 1e3:.3f}, "
                     f"{m['max_seconds'] * 1e3:.3f}]")
    return "\n".join(lines)
