"""`planner fit GRAPH --target T --pareto`: the step-time / memory-budget curve (planner.curve),
written as JSON and drawn (planner.report.plots), and `--measure N`: N of its plans built and run on
this machine's CPUs, measured step and measured arena beside the prediction.

    planner fit GRAPH --target T --pareto [--points 10] [-o curve.json] [--plot curve.png]
                [--measure 4] [--steps 10] [--no-offload] [the memory decisions of `plan`]
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from planner.errors import UserError


def add_pareto_flags(f: Any, measure_plans: Any = None) -> None:
    """The curve's flags on the `fit` parser (its --budget is then not needed); `measure_plans`
    (plans, steps) -> measurements is what `--measure` runs them with: codegen.measure, which
    planner/cli/main.py passes in (command modules never import codegen themselves)."""
    f.set_defaults(measure_plans=measure_plans)
    f.add_argument("--pareto", action="store_true",
                   help="the curve of predicted step time against memory budget, one plan per "
                        "point, from the smallest feasible budget to the unconstrained arena "
                        "(GRAPH may be any graph; --budget and --vary are not used)")
    f.add_argument("--points", type=int, default=10,
                   help="--pareto: budgets, 2 to 200 (default 10)")
    f.add_argument("-o", "--output", metavar="FILE", help="--pareto: write the curve as JSON")
    f.add_argument("--plot", metavar="FILE",
                   help="--pareto: draw the curve (.svg or .png; needs matplotlib: "
                        "pip install 'planner[plot]')")
    f.add_argument("--measure", type=int, default=0, metavar="N",
                   help="--pareto: build and run N of the curve's plans (CPU target) and print "
                        "measured step and arena beside the prediction")
    f.add_argument("--no-offload", action="store_true",
                   help="--pareto: recompute only (the default on a CPU target: its host "
                        "store is the process's memory too, so only recompute lowers its "
                        "peak)")
    f.add_argument("--steps", type=int, default=10, help="--measure: timed steps per plan")
    f.add_argument("--force", action="store_true", help="overwrite existing different files")
    from planner.cli.decisions import add_decision_flags

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
    from planner.cli.decisions import memory_decisions
    from planner.cli.graph_flags import graph_options
    from planner.cli.plan import priced_table
    from planner.curve import MAX_POINTS, budget_curve, enough_memory, format_curve
    from planner.frontend.prepare import prepare
    from planner.io.write import write_text
    from planner.memory.options import MemoryOptions
    from planner.pipeline import PlanOptions
    from planner.report.plots import curve_plot, plot_format
    from planner.target.backends import traits
    from planner.target.presets import load_target

    fmt = plot_format(args.plot) if args.plot else ""
    if not 2 <= args.points <= MAX_POINTS:
        raise UserError(f"--points {args.points}: a curve has 2 to {MAX_POINTS} points")
    if args.measure < 0 or args.steps < 1:
        raise UserError("--measure must be >= 0 and --steps >= 1")
    target = load_target(args.target)
    if args.measure and not traits(target).timed_on_host:
        raise UserError(f"--measure runs the CPU executor; target {target.name!r} is "
                        f"{target.backend}")
    graph = prepare(args.graph, graph_options(args))
    # Offload only to a slower tier: a CPU's host store is the RAM the budget frees.
    options = PlanOptions(memory=MemoryOptions(
        offload=not args.no_offload and traits(target).slower_tier, **memory_decisions(args)))
    table = priced_table(args.costs, graph, target, options, args.measurers)
    result = budget_curve(graph, target, table, options, args.points)
    curve = result.curve
    if args.output:
        write_text(args.output, curve.to_json(), force=args.force)
    measured = {}
    if args.measure:
        shas = list(dict.fromkeys(curve.points[i].plan_sha256
                                  for i in chosen(len(curve.points), args.measure)))
        measured = dict(zip(shas, args.measure_plans([result.plans[s] for s in shas], args.steps),
                            strict=True))
    if args.plot:
        write_text(args.plot, curve_plot(curve, fmt, measured, enough_memory(curve).plan_sha256),
                   force=args.force)
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
