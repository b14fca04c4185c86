"""Paired steps: two built executors of one graph, each warm in its own process, take turns
step by step; the ratio of each pair's step times, whose median compares them.

    python bench/paired_steps.py PACKAGE_A PACKAGE_B [--pairs 40]
    python bench/paired_steps.py PACKAGE_A PACKAGE_B --rounds 5 --steps 20 --schedule main

A and B are generated packages (`planner build PLAN -o DIR`) of the same graph: two plans, or
one plan built against two runtimes (build it once, change the runtime's sources, build it
into another folder: each package keeps the runtime it was built with). Why pairs: on a
shared machine a model's step moves by 10% from one second to the next, far more than most
changes; two steps taken back to back see the same machine, so their ratio does not (rounds of
several steps each, alternated, still moved the medians of two runtimes by 10% either way).
Each process loads its package (one runtime per process), warms up for 3 steps and then steps
when told; the order within a pair alternates.

Printed: each side's median step, the median and quartiles of the A/B ratios, the load average.

With `--rounds N` the two take turns by whole runs instead, one process at a time (ABBA...):
each loads its package, warms up, times `--steps` steps and ends; printed are each side's
runs' medians and the median of them. Where two processes stepping in turns disturb each
other (two 2-thread teams on a 2-core VM: pairs' quartiles 0.76-1.21), runs alone are the
steadier comparison. `--schedule NAME` pins one of the executor's schedules (`set_variant`:
`main`), so the adaptive rule's own trial does not fall in the timed steps.
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
if len(sys.argv) > 3:
    ex.set_variant(sys.argv[3])
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


def child(package: Path, schedule: str | None) -> list[str]:
    return [sys.executable, "-c", CHILD, str(package), str(ROOT), *([schedule] if schedule else [])]


def alone(a: Path, b: Path, rounds: int, steps: int, schedule: str | None
          ) -> dict[str, list[float]]:
    """Each run's median step of A and B, `rounds` runs of each, one process at a time."""
    medians: dict[str, list[float]] = {"A": [], "B": []}
    for k in range(rounds):
        for side in ("AB" if k % 2 == 0 else "BA"):
            out = subprocess.run(child(a if side == "A" else b, schedule), input="step\n" * steps,
                                 capture_output=True, text=True, check=True).stdout.splitlines()
            medians[side].append(statistics.median(float(t) for t in out[1:]))  # [0]: its name
    return medians


def paired(a: Path, b: Path, pairs: int, schedule: str | None = None) -> dict[str, list[float]]:
    """Step times of A and B, `pairs` of each, taken in turns."""
    procs = {k: subprocess.Popen(child(d, schedule),
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
    parser.add_argument("--rounds", type=int, default=0,
                        help="alternate whole runs, one process at a time, instead of pairs")
    parser.add_argument("--steps", type=int, default=20, help="timed steps of a run (--rounds)")
    parser.add_argument("--schedule", default=None, help="pin this schedule (set_variant)")
    args = parser.parse_args()
    if args.rounds:
        runs = alone(args.a, args.b, args.rounds, args.steps, args.schedule)
        for side, path in (("A", args.a), ("B", args.b)):
            print(f"{side} {path.name}: runs' medians "
                  f"{' '.join(f'{t * 1e3:.2f}' for t in runs[side])} ms; median "
                  f"{statistics.median(runs[side]) * 1e3:.2f}")
        ratio = statistics.median(runs["A"]) / statistics.median(runs["B"])
        print(f"A/B of the medians {ratio:.3f}; load average {os.getloadavg()[0]:.2f}")
        return
    times = paired(args.a, args.b, max(args.pairs, 4), args.schedule)
    ratios = [x / y for x, y in zip(times["A"], times["B"], strict=True)]
    q1, _, q3 = statistics.quantiles(ratios, n=4)
    print(f"A {args.a.name}: median step {statistics.median(times['A']) * 1e3:.2f} ms; "
          f"B {args.b.name}: {statistics.median(times['B']) * 1e3:.2f} ms; A/B per pair: "
          f"median {statistics.median(ratios):.3f}, quartiles {q1:.3f}-{q3:.3f} "
          f"({len(ratios)} pairs); load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
