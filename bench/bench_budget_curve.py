"""The step-time / memory-budget curve (`planner fit --pareto`), predicted and measured on this
machine's CPUs: for each model, the curve's points, then 4 of its plans (the smallest budget,
the unconstrained arena and two between) built and run.

    python bench/bench_budget_curve.py [--models lenet,resnet18,lstm,gpt] [--points 8]
                                       [--rounds 15] [--offload]
    python bench/bench_budget_curve.py --torch [--models gpt,lstm] [--rounds 5]

Recompute only by default: on a CPU the host store of an offloaded copy is the process's
memory too, so only recompute lowers what the process holds (`--offload` plans with both, and
the planned and held columns then count the host store).

The four executors of a model are built first, loaded into this process and warmed (3 steps),
then take turns step by step for `rounds` rounds (the machine is shared: alternating steps
see the same load). Printed per point: predicted step, median measured step with its spread
(the 25th and 75th percentiles), planned bytes (arena + host store) and what the executor
holds (stats()["held_bytes"]: arena, host store, scratch a kernel needed beyond its planned
area); and two checks: measured step monotone within spread (each point's 25th percentile at
or below the next smaller budget's 75th), held <= planned. The load average before and after.

`--torch`: beside PyTorch eager, plain and with torch.utils.checkpoint over every transformer
layer / LSTM layer, at bench/bench_memory_exec.py's sizes (its translator and child processes):
every run, ours at the 4 budgets and torch's two, in a process of its own, taking turns step by
step; "peak" is the process's resident memory above what it held after its imports (the same
measure on both sides); then, for checkpoint, our fastest run whose peak is at or below its.

The target is this host, detected once (`--target host` measures it anew each time, and its
costs, hence its plans, vary a little); the cost model is the analytical one.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# Small sizes: a 2-core machine shared with other work.
MODELS = {
    "lenet": ("lenet", {"batch": 32}),
    "resnet18": ("resnet", {"depth": 18, "batch": 4, "image": 64, "width": 0.5,
                            "classes": 10}),
    "lstm": ("lstm", {"batch": 16, "seq": 32, "hidden": 128, "layers": 2, "vocab": 500}),
    "gpt": ("gpt", {"batch": 4, "seq": 64, "dim": 64, "heads": 4, "layers": 2,
                    "vocab": 500}),
}


def quartiles(xs: list[float]) -> tuple[float, float, float]:
    q = statistics.quantiles(xs, n=4, method="inclusive")
    return q[0], statistics.median(xs), q[2]


def run_model(key: str, target, points: int, rounds: int, offload: bool) -> None:
    from codegen.load import load
    from codegen.package import build_package
    from planner.cli.curve import chosen
    from planner.curve import budget_curve, format_curve
    from planner.graph.autodiff import Optimizer, make_training_graph
    from planner.graph.interpret import init_params, random_feeds
    from planner.memory.options import MemoryOptions, format_bytes
    from planner.pipeline import PlanOptions
    from planner.zoo import build

    name, kwargs = MODELS[key]
    graph = make_training_graph(build(name, **kwargs), Optimizer(kind="sgd"),
                                cores=target.step_cores)
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = budget_curve(graph, target, None,
                              PlanOptions(memory=MemoryOptions(offload=offload)), points)
    curve = result.curve
    print(f"== {key}: {len(graph.nodes)} nodes, curve planned in "
          f"{time.perf_counter() - t0:.1f} s")
    print(format_curve(curve))
    picks = [curve.points[i] for i in chosen(len(curve.points), 4)]
    feeds = random_feeds(graph, seed=1)
    params = init_params(graph, seed=0)
    with tempfile.TemporaryDirectory(prefix="bench-curve-") as tmp:
        executors = []
        for k, p in enumerate(picks):
            _, built = build_package(result.plans[p.plan_sha256], f"{tmp}/{key}{k}")
            ex = load(built.dir).Executor()
            ex.load_params(params)
            for _ in range(3):
                ex.step(feeds)
            executors.append(ex)
        times: list[list[float]] = [[] for _ in picks]
        for _ in range(rounds):
            for k, ex in enumerate(executors):
                t = time.perf_counter()
                ex.step(feeds)
                times[k].append(time.perf_counter() - t)
        stats = [ex.stats() for ex in executors]
        held = [int(st["held_bytes"]) for st in stats]
        # Kernels that asked for more scratch than their planned area (a block of their own).
        unplanned: dict[str, int] = {}
        for row in stats[-1]["ops"]:
            if not row["scratch_planned"]:
                unplanned[row["op"]] = unplanned.get(row["op"], 0) + int(row["scratch_bytes"])
    print(f"  {'budget':>11} {'planned':>11} {'held':>11} {'pred ms':>8} {'meas ms':>8} "
          f"{'[p25, p75]':>17}  held<=planned")
    rows = []
    for p, ts, h in zip(picks, times, held, strict=True):
        lo, mid, hi = quartiles(ts)
        planned = p.peak_bytes + p.host_bytes
        rows.append((lo, mid, hi))
        print(f"  {format_bytes(p.budget_bytes):>11} {format_bytes(planned):>11} "
              f"{format_bytes(h):>11} {p.step_seconds * 1e3:>8.3f} {mid * 1e3:>8.3f} "
              f"[{lo * 1e3:>7.3f}, {hi * 1e3:>7.3f}]  {'yes' if h <= planned else 'NO'}")
    # Larger budgets come later: each point no slower than the one before, within spread.
    monotone = all(rows[k + 1][0] <= rows[k][2] for k in range(len(rows) - 1))
    print(f"  measured step monotone within spread: {'yes' if monotone else 'no'}")
    if unplanned:
        print("  scratch beyond the plan's areas (unconstrained plan), by op type: " + ", ".join(
            f"{op} {format_bytes(n)}" for op, n in sorted(unplanned.items())))


def run_torch(key: str, target, points: int, rounds: int) -> None:
    """Our curve's 4 plans beside torch plain and checkpoint, each in a child process."""
    from bench.bench_memory_exec import LR, at_equal_peak, measure, torch_lacks
    from bench.bench_memory_exec import MODELS as TORCH_MODELS
    from codegen.package import build_package
    from planner.cli.curve import chosen
    from planner.curve import budget_curve
    from planner.graph.autodiff import Optimizer, make_training_graph
    from planner.memory.options import MemoryOptions
    from planner.pipeline import PlanOptions
    from planner.zoo import build

    if key not in TORCH_MODELS or torch_lacks(key):
        print(f"== {key}: no torch translation at bench_memory_exec's sizes")
        return
    name, kwargs = TORCH_MODELS[key]
    graph = make_training_graph(build(name, **kwargs), Optimizer(kind="sgd", lr=LR),
                                cores=target.step_cores)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = budget_curve(graph, target, None,
                              PlanOptions(memory=MemoryOptions(offload=False)), points)
    picks = [result.curve.points[i] for i in chosen(len(result.curve.points), 4)]
    with tempfile.TemporaryDirectory(prefix="bench-curve-torch-") as tmp:
        configs, planned = [], {}
        for k, p in enumerate(picks):
            _, built = build_package(result.plans[p.plan_sha256], f"{tmp}/{key}{k}")
            label = f"ours {p.budget_bytes / 2**20:.2f} MiB"
            configs.append((label, {"kind": "ours", "package": str(built.dir)}))
            planned[label] = p
        configs += [(f"torch {mode}", {"kind": "torch", "mode": mode, "model": key,
                                       "threads": os.cpu_count() or 1})
                    for mode in ("plain", "checkpoint")]
        results = measure(configs, rounds)
    print(f"== {key} ({kwargs}), {rounds} rounds:")
    print(f"  {'run':<22} {'planned MiB':>11} {'pred ms':>8} {'meas ms':>8} {'peak MiB':>9} "
          f"{'held MiB':>9}")
    for label, r in results.items():
        p = planned.get(label)
        print(f"  {label:<22} "
              + (f"{(p.peak_bytes + p.host_bytes) / 2**20:>11.2f} {p.step_seconds * 1e3:>8.2f}"
                 if p else f"{'':>11} {'':>8}")
              + f" {r['median'] * 1e3:>8.1f} {r['peak'] / 2**20:>9.1f} "
              + (f"{r['held'] / 2**20:>9.2f}" if r["held"] else ""))
    ours = {k: v for k, v in results.items() if k in planned}
    theirs = results["torch checkpoint"]
    mine = at_equal_peak(ours, theirs["peak"])
    print(f"  at torch checkpoint's peak ({theirs['peak'] / 2**20:.1f} MiB, "
          f"{theirs['median'] * 1e3:.1f} ms): " + (
              "no budget of ours reaches it" if mine is None else
              f"ours {mine[0].removeprefix('ours ')}: peak {mine[1]['peak'] / 2**20:.1f} MiB, "
              f"{mine[1]['median'] * 1e3:.1f} ms, torch/ours "
              f"{theirs['median'] / mine[1]['median']:.2f}"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--points", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--offload", action="store_true")
    ap.add_argument("--torch", action="store_true",
                    help="beside torch plain and checkpoint (bench_memory_exec's sizes)")
    args = ap.parse_args()
    from planner.target.presets import load_target

    target = load_target("host")
    print(f"target host: {len(target.logical_cpus)} logical CPUs; load average before "
          f"{os.getloadavg()[0]:.2f}")
    for key in args.models.split(","):
        if key not in MODELS:
            raise SystemExit(f"unknown model {key!r}; known: {', '.join(MODELS)}")
        if args.torch:
            run_torch(key, target, args.points, args.rounds)
        else:
            run_model(key, target, args.points, args.rounds, args.offload)
    print(f"load average after {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
