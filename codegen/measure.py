"""Build plans' CPU executors and time their steps side by side: what `planner fit --pareto
--measure N` prints beside the predictions (planner/cli/curve.py; planner/cli/main.py passes
this in).
"""

from __future__ import annotations

import statistics
import tempfile
import time
import warnings


def measure_plans(plans: list, steps: int) -> list[dict[str, float]]:
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
