"""Where one plan's CPU time goes, in process (issue 51, item 2): the optimized strategy's
search and the lower bound of one step graph, and the whole `pipeline.plan` + `to_json`, each
the least CPU time of several repetitions (a loaded machine only adds time). The planner is
this checkout's; run the script of another checkout for its figures (before/after).

    python bench/bench_plan_phases.py [--graph 'zoo:inception_v3?batch=16'] [--target knl-7250]
                                      [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

# This checkout's planner, whatever else is installed.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def least(repeats: int, run) -> float:
    """The least CPU seconds of `repeats` calls of `run`."""
    best = float("inf")
    for _ in range(repeats):
        start = time.process_time()
        run()
        best = min(best, time.process_time() - start)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--graph", default="zoo:inception_v3?batch=16")
    ap.add_argument("--target", default="knl-7250")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    from planner.collection import collector_off
    from planner.costs import CostModel
    from planner.frontend.options import GraphOptions
    from planner.frontend.prepare import prepare
    from planner.graph.deps import predecessors
    from planner.graph.optimizer import Optimizer
    from planner.pipeline import plan, step_graph
    from planner.schedule import cpu
    from planner.schedule.bound import capacity, lower_bound
    from planner.schedule.costs import op_costs
    from planner.schedule.options import ScheduleOptions
    from planner.target.presets import load_target

    target = load_target(args.target)
    with collector_off():
        graph = prepare(args.graph, GraphOptions(optimizer=Optimizer(kind="sgd")))
        step = step_graph(graph, target)
        costs, preds = op_costs(step, CostModel(target)), predecessors(step)
        options = ScheduleOptions()
        room = capacity(target.cores, target.smt_width, options.smt_slowdown)
        bound = lower_bound(costs, preds, room)
        times = {
            "search": least(args.repeats, lambda: cpu.schedule(
                step, target, costs, preds, options, {}, bound.durations)),
            "bound": least(args.repeats, lambda: lower_bound(costs, preds, room)),
            "plan + JSON": least(args.repeats, lambda: plan(graph, target).to_json()),
        }
    print(f"{args.graph} --train sgd on {args.target}, least CPU seconds of {args.repeats}; "
          f"1-minute load average {os.getloadavg()[0]:.1f}")
    print("  ".join(f"{k} {v:.3f}" for k, v in times.items()))


if __name__ == "__main__":
    main()
