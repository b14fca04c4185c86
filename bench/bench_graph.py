"""Graph-building speed: `planner graph` on large zoo models, against the issue targets.

    python bench/bench_graph.py

Each case is timed in-process (median of 3 runs, after one warm-up) and also as a whole
`planner graph` command, interpreter start included. Prints a table; ratio = time / target.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from collections.abc import Callable

from planner.frontend.load import load_graph
from planner.graph.summary import summarize


def timed(fn: Callable[[], object], repeats: int = 3) -> float:
    fn()
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def command_time(args: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "planner.cli", *args], check=True,
                   stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def training_graph(spec: str, optimizer: str):
    from planner.frontend.options import GraphOptions
    from planner.frontend.prepare import prepare
    from planner.graph.optimizer import Optimizer

    return prepare(load_graph(spec), GraphOptions(optimizer=Optimizer(kind=optimizer)))


def main() -> None:
    resnet1001 = "zoo:resnet?depth=1001&batch=16"
    inception = "zoo:inception_v3?batch=16"
    rows = [
        ("graph resnet-1001 b16 (in-process)", timed(lambda: summarize(load_graph(resnet1001))),
         2.0),
        ("planner graph resnet-1001 b16 (command)", command_time(["graph", resnet1001]), 2.0),
        ("training graph inception_v3 b16 (in-process)",
         timed(lambda: training_graph(inception, "sgd")), 1.0),
    ]
    n_ops = len(training_graph(inception, "sgd").nodes)
    print(f"{'case':<48} {'time s':>8} {'target s':>9} {'ratio':>6}")
    for name, seconds, target in rows:
        print(f"{name:<48} {seconds:>8.3f} {target:>9.1f} {seconds / target:>6.2f}")
    print(f"(inception_v3 b16 training graph: {n_ops} ops)")


if __name__ == "__main__":
    main()
