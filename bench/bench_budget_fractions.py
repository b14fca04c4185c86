"""ResNet-18 at CIFAR size (AdamW) under memory budgets at 100/90/80/70% of its unconstrained
arena: the plan's strategy, predicted step and measured step of the generated executor, built
and run on this host (issue 89: a budget should keep the co-running schedule and cost little).

    python bench/bench_budget_fractions.py [--batch 128] [--rounds 5] [--costs measured]

Offload only where it reaches a slower tier (as `planner fit` plans: on a CPU the host store
is the same memory), so a CPU plan meets its budget by recompute alone. A fraction below the
smallest budget the planner reaches is reported as infeasible, with that
smallest budget, which is then planned and measured as a row of its own. The runs take turns
step by step for `rounds` rounds (bench_memory_exec.measure: warm, one process each).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bench_memory_exec import measure  # noqa: E402

FRACTIONS = (1.0, 0.9, 0.8, 0.7)


def main() -> None:
    from codegen.build import build as build_package
    from codegen.render import render
    from planner.errors import InfeasibleBudget
    from planner.frontend.options import GraphOptions
    from planner.frontend.prepare import prepare
    from planner.graph.optimizer import Optimizer
    from planner.memory.options import MemoryOptions
    from planner.pipeline import PlanOptions, plan
    from planner.target.backends import traits
    from planner.target.detect import detect
    from planner.zoo import build

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--costs", choices=["analytical", "measured"], default="analytical",
                    help="what prices the plans: the model, or times measured on this host "
                         "(kept in the host's cache, as `planner plan --costs measured`)")
    args = ap.parse_args()
    print(f"load average before: {os.getloadavg()}")
    target = detect()
    graph = prepare(build("resnet", depth=18, image=32, batch=args.batch, classes=10),
                    GraphOptions(optimizer=Optimizer(kind="adamw")))

    table = None
    if args.costs == "measured":
        from planner.cli.main import executor_measurers
        from planner.cli.plan import priced_table

        table = priced_table("measured", graph, target, PlanOptions(), executor_measurers)

    def at(budget):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return plan(graph, target, table, options=PlanOptions(memory=MemoryOptions(
                budget_bytes=budget, offload=traits(target).slower_tier)))

    free = at(None)
    arena = free.summary.memory.arena_bytes
    work = Path(tempfile.mkdtemp(prefix="bench-budget-fractions-"))
    rows, configs = [], []
    for f in FRACTIONS:
        budget = None if f == 1.0 else int(arena * f)
        try:
            p = free if budget is None else at(budget)
        except InfeasibleBudget as e:
            print(f"{f:.0%}: infeasible ({budget} bytes); smallest {e.smallest_bytes} bytes")
            f, budget = e.smallest_bytes / arena, e.smallest_bytes
            if any(r[1] == budget for r in rows):
                continue
            p = at(budget)
        label = f"{f:.1%}"
        pkg = build_package(render(p, work / f"r{len(rows)}")).dir
        rows.append((label, budget, p))
        configs.append((label, {"kind": "ours", "package": str(pkg)}))
    got = measure(configs, args.rounds)
    print(f"{'budget':>7} {'MiB':>8} {'arena MiB':>9} {'strategy':>9} {'recomputes':>10} "
          f"{'predicted ms':>12} {'x free':>6} {'measured ms':>11} {'x free':>6}  switch")
    base_p, base_m = free.summary.step_seconds, got[rows[0][0]]["median"]
    for label, budget, p in rows:
        s, m = p.summary, got[label]["median"]
        rc = sum(1 for o in p.memory.ops if o.kind == "recompute")
        print(f"{label:>7} {(budget or arena) / 2**20:8.1f} {s.memory.arena_bytes / 2**20:9.1f} "
              f"{s.strategy:>9} {rc:10d} {s.step_seconds * 1e3:12.3f} "
              f"{s.step_seconds / base_p:6.3f} {m * 1e3:11.3f} {m / base_m:6.3f}  "
              f"{s.strategy_switch or '-'}")
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
