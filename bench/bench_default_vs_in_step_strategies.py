"""The strategies table's models planned by the default costs against an in-step profile (issue
60's "default = measured best": within 5%, on an empty store and a mature one).

    PYTHONPATH=. python bench/bench_default_vs_in_step_strategies.py [--models resnet-50,lstm]
                                                                     [--rounds 6] [--steps 15]
    PLANNER_CACHE=$(mktemp -d) PYTHONPATH=. python bench/bench_default_vs_in_step_strategies.py

Per model of bench_cpu_strategies.py (SGD): the optimized plan priced by the host's kept
measurements (`--costs measured`: codegen.profiling.host_measured, what a plan of this host is
priced by when nobody names a table; the store in $PLANNER_CACHE, so an empty folder is a
first plan's store) and by its in-step profile (kept in bench/.costs/ per runtime), each built.
Printed per model: per op type, the default's seconds over the in-step profile's at one and
two threads, summed over the step's nodes; each table's contention figures; each plan's co-run
groups, one-thread ops and predicted step; the ops whose thread count or group the two plans
choose apart, with both tables' times (`decisions_apart`); and the two executors' steps, whole
runs in turns (bench/paired_steps.py `alone`: `--rounds` runs of `--steps` steps each, the main
schedule), the median of each side's run medians and their ratio, with the load average.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import tempfile
import warnings
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from bench_cpu_strategies import MODELS, SGD, profiled_costs, zoo_name  # noqa: E402
from paired_steps import alone  # noqa: E402

from codegen.build import build  # noqa: E402
from codegen.render import render  # noqa: E402
from planner.costs.signature import graph_signatures  # noqa: E402
from planner.frontend.options import GraphOptions  # noqa: E402
from planner.frontend.prepare import prepare  # noqa: E402
from planner.pipeline import PlanOptions, plan, step_graph  # noqa: E402
from planner.schedule import ScheduleOptions  # noqa: E402
from planner.target.detect import detect  # noqa: E402
from planner.zoo import build as zoo  # noqa: E402

COSTS = ("measured", "in-step")


def by_op_type(step, tables) -> list[str]:
    """Per op type of `step`: the tables' seconds at 1 and 2 compact threads, summed over its
    nodes (nodes either table lacks left out), the first table's over the second's."""
    sums: dict[str, list[float]] = defaultdict(lambda: [0.0] * 4)
    for node, sig in zip(step.nodes, graph_signatures(step).values(), strict=True):
        points = [dict(e.cpu_points("compact")) if (e := t.entry(sig)) else {} for t in tables]
        if not all(1 in p and 2 in p for p in points):
            continue
        row = sums[node.op]
        for k, threads in enumerate((1, 2)):
            row[2 * k] += points[0][threads]
            row[2 * k + 1] += points[1][threads]
    return [f"  {op:26s} 1 thread {a * 1e3:8.3f} / {b * 1e3:8.3f} ms ({a / b:4.2f})   "
            f"2 threads {c * 1e3:8.3f} / {d * 1e3:8.3f} ms ({c / d:4.2f})"
            for op, (a, b, c, d) in sorted(sums.items(), key=lambda kv: -kv[1][1])]


def decisions_apart(plans, step, tables, most: int = 12) -> list[str]:
    """The ops whose thread count or co-run group differ between the two plans, with each
    table's times at one and two threads (us): where the default's choices part from the
    in-step plan's, and which table's times made them. The `most` of them whose choices the
    in-step times price furthest apart first."""
    sigs = graph_signatures(step)
    ops = [{o.name: o for o in p.ops} for p in plans]

    def at(table, name: str, threads: int) -> float:
        entry = table.entry(sigs[name]) if name in sigs else None
        return dict(entry.cpu_points("compact")).get(threads, math.nan) if entry else math.nan

    rows = []
    for name, a in ops[0].items():
        b = ops[1].get(name)
        if b is None or (a.threads, bool(a.group)) == (b.threads, bool(b.group)):
            continue
        gap = abs(at(tables[1], name, a.threads) - at(tables[1], name, b.threads))
        times = "  ".join(f"{at(t, name, k) * 1e6:7.1f}" for t in tables for k in (1, 2))
        rows.append((0.0 if math.isnan(gap) else -gap, name,
                     f"  {name[:40]:40s} {a.op[:20]:20s} t{a.threads}{'G' if a.group else ' '}"
                     f"  t{b.threads}{'G' if b.group else ' '}  {times}"))
    if not rows:
        return ["  the plans' thread counts and co-run groups agree on every op"]
    head = (f"  {'op (where the plans differ)':40s} {'type':20s} default in-step  store t1"
            "       t2  in-step t1      t2 (us; G: in a co-run group)")
    return [head, *(line for _, _, line in sorted(rows)[:most])]


def compare(label: str, work: Path, rounds: int, steps: int) -> None:
    graph = prepare(zoo(zoo_name(label), **MODELS[label]), GraphOptions(optimizer=SGD))
    target = detect()
    tables = {c: profiled_costs(label, graph, target, c) for c in COSTS}
    print(f"{label}: default / in-step, per op type:")
    print("\n".join(by_op_type(step_graph(graph, target), list(tables.values()))))
    packages, plans = {}, []
    for costs, table in tables.items():
        figures = ", ".join(f"{k} {v}" for k, v in table.host_figures().items())
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            p = plan(graph, target, table, PlanOptions(schedule=ScheduleOptions(
                strategy="optimized")))
        packages[costs] = build(render(p, work / label / costs)).dir
        plans.append(p)
        print(f"  {costs:8s} plan: {len({o.group for o in p.ops if o.group})} co-run groups, "
              f"{sum(o.threads == 1 for o in p.ops)} of {len(p.ops)} ops on one thread, "
              f"predicted {p.summary.step_seconds * 1e3:.2f} ms; {figures}")
    print("\n".join(decisions_apart(plans, plans[0].graph, list(tables.values()))))
    runs = alone(packages["measured"], packages["in-step"], rounds, steps, "main")
    a, b = (statistics.median(runs[k]) for k in "AB")
    print(f"  measured steps: default {a * 1e3:.2f} ms, in-step {b * 1e3:.2f} ms, default / "
          f"in-step {a / b:.3f} (runs: {' '.join(f'{t * 1e3:.2f}' for t in runs['A'])} | "
          f"{' '.join(f'{t * 1e3:.2f}' for t in runs['B'])}); load average "
          f"{os.getloadavg()[0]:.2f}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--steps", type=int, default=15)
    args = ap.parse_args()
    os.environ.pop("PLANNER_COSTS", None)
    from planner.io.write import cache_root

    kept = any((cache_root() / "costs").glob("*.json"))
    print(f"load average before {os.getloadavg()[0]:.2f}; the host's store "
          f"{'holds measurements' if kept else 'is empty'}", flush=True)
    with tempfile.TemporaryDirectory(prefix="default-vs-in-step-") as work:
        for label in args.models.split(","):
            compare(label, Path(work), args.rounds, args.steps)


if __name__ == "__main__":
    main()
