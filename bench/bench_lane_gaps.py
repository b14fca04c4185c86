"""Where a co-running step's time goes beyond its ops: the waits between ops on the lanes.

    python bench/bench_lane_gaps.py [--models lstm,resnet-50,...] [--steps 7]
                                    [--strategy optimized]

Per model (bench_cpu_strategies.py's graphs and in-step cost tables, profiled once and kept in
bench/.costs/): the plan of `--strategy` is built and run; each step's measured timeline
(stats() start and end per op) gives how long every op started after it could
(codegen.profiling.waits_between_ops): after its own lane's previous op, or after a hand-off
from another lane, whose thread has to be woken. The plan's simulator starts an op the moment
it can, so these waits are what the prediction leaves out. Printed: medians over the steps of
the step time, the waits' count, median and sum, and the lanes' re-pinnings per step.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_cpu_strategies import (  # noqa: E402
    MODELS,
    SGD,
    each_model,
    profiled_costs,
    zoo_name,
)

from codegen.profiling import waits_between_ops, warmed_executor  # noqa: E402
from planner.frontend.options import GraphOptions  # noqa: E402
from planner.frontend.prepare import prepare  # noqa: E402
from planner.graph.interpret import init_params, random_feeds  # noqa: E402
from planner.pipeline import PlanOptions, plan  # noqa: E402
from planner.schedule import ScheduleOptions  # noqa: E402
from planner.target.detect import detect  # noqa: E402
from planner.zoo import build as zoo  # noqa: E402


def bench_model(label: str, target, steps: int, strategy: str) -> dict:
    graph = prepare(zoo(zoo_name(label), **MODELS[label]), GraphOptions(optimizer=SGD))
    table = profiled_costs(label, graph, target)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        p = plan(graph, target, table, PlanOptions(schedule=ScheduleOptions(strategy=strategy)))
    feeds = random_feeds(graph, seed=1)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        ex = warmed_executor(p, Path(tmp), init_params(graph, seed=0), feeds)
        pinned = ex.stats()["pinnings"]
        for _ in range(steps):
            ex.step(feeds)
            stats = ex.stats()
            same, cross = waits_between_ops(p, stats)
            rows.append((max(o["end"] for o in stats["ops"]), same, cross))
        pinnings = (ex.stats()["pinnings"] - pinned) / steps

    def med(f):
        return statistics.median(f(r) for r in rows)

    return {"model": label, "lanes": len({min(o.cpus) for o in p.ops}),
            "predicted_ms": p.summary.step_seconds * 1e3,
            "measured_ms": med(lambda r: r[0]) * 1e3,
            "same_n": med(lambda r: len(r[1])), "same_ms": med(lambda r: sum(r[1])) * 1e3,
            "cross_n": med(lambda r: len(r[2])),
            "cross_median_us": med(lambda r: statistics.median(r[2]) if r[2] else 0.0) * 1e6,
            "cross_ms": med(lambda r: sum(r[2])) * 1e3, "pinnings": pinnings}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--steps", type=int, default=7)
    parser.add_argument("--strategy", default="optimized",
                        choices=["uniform", "paper", "optimized"])
    args = parser.parse_args()
    target = detect()
    rows, load = each_model(args.models, lambda label: bench_model(label, target, args.steps,
                                                                   args.strategy))
    print(f"host {target.name}: {target.cores} cores; {args.strategy} plans; medians of "
          f"{args.steps} steps; load average before {load[0]}, after {load[1]}")
    print(f"{'model':<14}{'lanes':>6}{'pred ms':>9}{'meas ms':>9}{'same-lane':>18}"
          f"{'hand-offs':>26}{'pins/step':>10}")
    print(f"{'':<14}{'':>6}{'':>9}{'':>9}{'n':>8}{'sum ms':>10}{'n':>7}{'median us':>10}"
          f"{'sum ms':>9}{'':>10}")
    for r in rows:
        print(f"{r['model']:<14}{r['lanes']:>6}{r['predicted_ms']:>9.2f}{r['measured_ms']:>9.2f}"
              f"{r['same_n']:>8.0f}{r['same_ms']:>10.2f}{r['cross_n']:>7.0f}"
              f"{r['cross_median_us']:>10.1f}{r['cross_ms']:>9.2f}{r['pinnings']:>10.1f}")


if __name__ == "__main__":
    main()
