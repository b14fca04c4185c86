"""Paired steps: two built executors of one graph, each warm in its own process, take turns
step by step; the ratio of each pair's step times, whose median compares them.

    python bench/paired_steps.py PACKAGE_A PACKAGE_B [--pairs 40]

A and B are generated packages (`planner build PLAN -o DIR`) of the same graph: two plans, or
one plan built against two runtimes (build it once, change the runtime's sources, build it
into another folder: each package keeps the runtime it was built with). Why pairs: on a
shared machine a model's step moves by 10% from one second to the next, far more than most
changes; two steps taken back to back see the same machine, so their ratio does not (rounds of
several steps each, alternated, still moved the medians of two runtimes by 10% either way).
Each process loads its package (one runtime per process), warms up for 3 steps and then steps
when told; the order within a pair alternates.

Printed: each side's median step, the median and quartiles of the A/B ratios, the load average.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = """
import json, sys, time
sys.path.insert(0, sys.argv[2])
from codegen.load import load
from planner.graph import Graph
from planner.graph.interpret import init_params, random_feeds
module = load(sys.argv[1])
graph = Graph.model_validate(json.loads(module.plan)["graph"])
ex = module.Executor()
if graph.kind == "training":
    ex.load_params(init_params(graph, seed=0))
feeds = random_feeds(graph, seed=1)
run = ex.step if graph.kind == "training" else ex.forward
for _ in range(3):
    run(feeds)
print(graph.name, flush=True)
for _ in sys.stdin:
    t0 = time.perf_counter()
    run(feeds)
    print(time.perf_counter() - t0, flush=True)
"""


def paired(a: Path, b: Path, pairs: int) -> dict[str, list[float]]:
    """Step times of A and B, `pairs` of each, taken in turns."""
    procs = {k: subprocess.Popen([sys.executable, "-c", CHILD, str(d), str(ROOT)],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
             for k, d in (("A", a), ("B", b))}
    try:
        names = {k: p.stdout.readline().strip() for k, p in procs.items()}
        if not names["A"] or names["A"] != names["B"]:
            raise SystemExit(f"not two executors of one graph: {names}")
        times: dict[str, list[float]] = {"A": [], "B": []}
        for k in range(pairs):
            for side in ("AB" if k % 2 == 0 else "BA"):
                procs[side].stdin.write("step\n")
                procs[side].stdin.flush()
                times[side].append(float(procs[side].stdout.readline()))
        return times
    finally:
        for p in procs.values():
            p.stdin.close()
            p.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("a", type=Path)
    parser.add_argument("b", type=Path)
    parser.add_argument("--pairs", type=int, default=40)
    args = parser.parse_args()
    times = paired(args.a, args.b, max(args.pairs, 4))
    ratios = [x / y for x, y in zip(times["A"], times["B"], strict=True)]
    q1, _, q3 = statistics.quantiles(ratios, n=4)
    print(f"A {args.a.name}: median step {statistics.median(times['A']) * 1e3:.2f} ms; "
          f"B {args.b.name}: {statistics.median(times['B']) * 1e3:.2f} ms; A/B per pair: "
          f"median {statistics.median(ratios):.3f}, quartiles {q1:.3f}-{q3:.3f} "
          f"({len(ratios)} pairs); load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
