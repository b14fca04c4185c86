"""Scheduling benchmark: predicted step times of every strategy against the lower bound, and
planning time, on knl-7250 with the analytical cost model (training graphs, SGD).

    python bench/bench_schedule.py [--quick]     (--quick skips ResNet-1001)

Columns: uniform (68 threads, one op at a time), best uniform grid (intra x inter), paper
(seed 002 Strategies 1-4), optimized; DESIGN.md's bound max(critical path, area); the plan's
lower bound (the largest of that, the allotment bound and the cut bound, planner.schedule.bound);
optimized over each; planning seconds of optimized. Times are simulated milliseconds per step.
"""

from __future__ import annotations

import sys
import time
import warnings

from planner.costs import CostModel
from planner.graph.autodiff import Optimizer, make_training_graph
from planner.pipeline import PlanOptions, plan
from planner.schedule import ScheduleOptions
from planner.target import preset
from planner.zoo import build

MODELS = [("resnet-50", "resnet", dict(depth=50, batch=64)),
          ("inception_v3", "inception_v3", dict(batch=16)),
          ("dcgan", "dcgan", dict(batch=64)),
          ("lstm", "lstm", dict(batch=20)),
          ("gpt", "gpt", dict(batch=16, seq=128, dim=256, heads=8, layers=4)),
          ("bert", "bert", dict(batch=16, seq=128, dim=256, heads=8, layers=4))]


def main() -> None:
    warnings.simplefilter("ignore")
    model = CostModel(preset("knl-7250"))
    print(f"{'model':<14}{'ops':>7}{'uniform':>10}{'grid':>10}{'paper':>10}{'optimized':>11}"
          f"{'cp|area':>10}{'bound':>10}{'/cp|area':>10}{'/bound':>8}{'plan s':>8}")
    for label, name, params in MODELS:
        g = make_training_graph(build(name, **params), Optimizer(kind="sgd"))
        row = []
        for opts in (ScheduleOptions(strategy="uniform"),
                     ScheduleOptions(strategy="uniform", grid=True),
                     ScheduleOptions(strategy="paper")):
            row.append(plan(g, model.target, model.table, PlanOptions(schedule=opts))
                       .summary.step_seconds * 1e3)
        t0 = time.perf_counter()
        p = plan(g, model.target, model.table)
        seconds = time.perf_counter() - t0
        s = p.summary
        design = max(s.critical_path_seconds, s.area_bound_seconds)
        print(f"{label:<14}{len(g.nodes):>7}" + "".join(f"{v:>10.2f}" for v in row)
              + f"{s.step_seconds * 1e3:>11.2f}{design * 1e3:>10.2f}"
              f"{s.lower_bound_seconds * 1e3:>10.2f}{s.step_seconds / design:>10.3f}"
              f"{s.ratio:>8.3f}{seconds:>8.1f}")
    if "--quick" not in sys.argv:
        g = make_training_graph(build("resnet", depth=1001, batch=2, image=32),
                                Optimizer(kind="sgd"))
        t0 = time.perf_counter()
        p = plan(g, model.target, model.table)
        print(f"resnet-1001 training ({len(g.nodes)} ops): optimized planned in "
              f"{time.perf_counter() - t0:.1f} s; ratio {p.summary.ratio:.3f}")


if __name__ == "__main__":
    main()
