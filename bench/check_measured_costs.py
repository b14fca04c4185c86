"""Do the host's measured costs predict the plans they price? (issue 51)

    PYTHONPATH=. python bench/check_measured_costs.py --models lstm,wide_deep [--steps 40]

Per model of bench_cpu_strategies.py: its signatures measured afresh as a plan of this host
measures what its store lacks (codegen.profiling.measure_signatures, called directly: the
host's store is neither read nor written), the uniform, grid and optimized plans priced by them,
and each plan's executor stepped in turns, `--steps` times. Printed per plan: the predicted
step, the fastest and the median measured step, and the sum of each op's fastest time in the
step (stats()); with the other processes' share of the machine over the measurement and over
the runs (planner.costs.host_costs.CpuClock), the load every figure was taken under.

Why the ops' fastest times: on a busy machine a whole step rarely runs undisturbed, an op of
a few hundred microseconds often does; the uniform plans run one op at a time, so the sum of
their ops' fastest times is their step's time on a quiet machine, which the prediction is to
match (the co-running plans' ops overlap: read those by the step's own time, when quiet).
The contention figures are the host store's of 2026-11-26 (`--kappa`, `--sigma`): a fit of
them under load would move the optimized plans' predictions by the load.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from codegen.profiling import measure_signatures, warmed_executor  # noqa: E402
from planner.costs.conv_layouts import profiled_signatures  # noqa: E402
from planner.costs.host_costs import CpuClock  # noqa: E402
from planner.frontend.options import GraphOptions  # noqa: E402
from planner.frontend.prepare import prepare  # noqa: E402
from planner.graph.interpret import init_params, random_feeds  # noqa: E402
from planner.pipeline import PlanOptions, plan, priced_graphs  # noqa: E402
from planner.schedule import ScheduleOptions  # noqa: E402
from planner.target.backends import channel_block  # noqa: E402
from planner.target.detect import detect  # noqa: E402
from planner.zoo import build as zoo  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_cpu_strategies import MODELS, SGD, zoo_name  # noqa: E402

VARIANTS = {"uniform": dict(strategy="uniform"),
            "grid 1x1": dict(strategy="uniform", intra=1, inter=1),
            "grid 1x2": dict(strategy="uniform", intra=1, inter=2),
            "optimized": dict(strategy="optimized")}


def check(label: str, steps: int, kappa: float, sigma: float) -> list[str]:
    graph = prepare(zoo(zoo_name(label), **MODELS[label]), GraphOptions(optimizer=SGD))
    target = detect()
    blocked = bool(channel_block(target))
    signatures = [s for g in priced_graphs(graph, target) for s in profiled_signatures(g, blocked)]
    clock, t0 = CpuClock(), time.perf_counter()
    table = measure_signatures(signatures, target)
    lines = [f"{label}: {len(table.entries)} signatures measured in "
             f"{time.perf_counter() - t0:.1f} s, others' share {clock.share()}"]
    table = table.model_copy(update={"contention": kappa, "corun_slowdown": sigma})
    feeds, state = random_feeds(graph, seed=1), init_params(graph, seed=0)
    predicted, executors = {}, {}
    with tempfile.TemporaryDirectory() as work, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, options in VARIANTS.items():
            p = plan(graph, target, table, PlanOptions(schedule=ScheduleOptions(**options)))
            predicted[name] = p.summary.step_seconds
            executors[name] = warmed_executor(p, Path(work) / name.replace(" ", "_"), state,
                                              feeds)
        walls: dict[str, list[float]] = {n: [] for n in executors}
        ops: dict[str, dict[str, list[float]]] = {n: {} for n in executors}
        clock = CpuClock()
        for _ in range(steps):
            for name, ex in executors.items():
                ex.reset_stats()
                t = time.perf_counter()
                ex.step(feeds)
                walls[name].append(time.perf_counter() - t)
                for row in ex.stats()["ops"]:
                    ops[name].setdefault(row["name"], []).append(row["seconds"])
        lines.append(f"  runs: {steps} steps each, in turns; others' share {clock.share()}")
    lines.append(f"  {'plan':<11}{'pred ms':>9}{'min ms':>9}{'median ms':>11}"
                 f"{'ops min ms':>12}{'pred/min':>10}{'pred/ops':>10}")
    for name in executors:
        fastest = sum(min(v) for v in ops[name].values())
        lines.append(f"  {name:<11}{predicted[name] * 1e3:9.2f}{min(walls[name]) * 1e3:9.2f}"
                     f"{statistics.median(walls[name]) * 1e3:11.2f}{fastest * 1e3:12.2f}"
                     f"{predicted[name] / min(walls[name]):10.3f}"
                     f"{predicted[name] / fastest:10.3f}")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="lstm,wide_deep")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--kappa", type=float, default=0.044001)
    ap.add_argument("--sigma", type=float, default=0.071874)
    args = ap.parse_args()
    for label in args.models.split(","):
        if label not in MODELS:
            sys.exit(f"--models: {label!r} is none of {', '.join(MODELS)}")
        print("\n".join(check(label, args.steps, args.kappa, args.sigma)), flush=True)


if __name__ == "__main__":
    main()
