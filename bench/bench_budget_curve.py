"""The step-time / memory-budget curve (`planner fit --pareto`), predicted and measured on this
machine's CPUs: for each model, the curve's points, then 4 of its plans (the smallest budget,
the unconstrained arena and two between) built and run.

    python bench/bench_budget_curve.py [--models lenet,resnet18,lstm,gpt] [--points 8]
                                       [--rounds 15] [--offload] [--size MODEL:K=V,...]
    python bench/bench_budget_curve.py --torch [--models resnet50,inception_v3,gpt_big,lstm_big]
                                       [--rounds 11] [--torch-budgets 0.5,0.1]

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

`--torch` (the issue's acceptance: the big four at sizes where a step takes 0.1-1 s on this
2-core host): the curve, then every run in a child process of its own (bench/bench_memory_exec.py's
translator and children), taking turns step by step, alternating the order each round: ours at
the 4 budgets, PyTorch eager plain, with torch.utils.checkpoint over every residual block /
transformer layer / LSTM layer / Inception mixed block, and torch.compile's activation-memory
budget (torch._functorch.config.activation_memory_budget, backend aot_eager_decomp_partition:
the min-cut partitioner that reads the budget, aten ops run eagerly, no generated kernels) at
each --torch-budgets value. "peak" is the process's peak resident memory (VmHWM) over the
steady steps above what it held before it built its model, the same measure on every run:
after the 3 warm-up steps freed memory goes back to the system (malloc_trim) and VmHWM is reset,
so compile's tracing is not counted. Printed beside ours: planned (arena), held (the executor's
own count) and the checks; then, per torch technique, our fastest run at or below its peak.
Progress goes to stderr.

The target is this host, detected once (`--target host` measures it anew each time, and its
costs, hence its plans, vary a little); the cost model is the analytical one.
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# Small sizes: a 2-core machine shared with other work. The default set (SMALL) plans and runs
# in seconds; the big four (--torch --models resnet50,inception_v3,gpt_big,lstm_big) at sizes
# where a step takes 0.1-1 s here.
MODELS = {
    "lenet": ("lenet", {"batch": 32}),
    "resnet18": ("resnet", {"depth": 18, "batch": 4, "image": 64, "width": 0.5,
                            "classes": 10}),
    "lstm": ("lstm", {"batch": 16, "seq": 32, "hidden": 128, "layers": 2, "vocab": 500}),
    "gpt": ("gpt", {"batch": 4, "seq": 64, "dim": 64, "heads": 4, "layers": 2,
                    "vocab": 500}),
    "resnet50": ("resnet", {"depth": 50, "batch": 8, "image": 128, "width": 0.5,
                            "classes": 100}),
    "inception_v3": ("inception_v3", {"batch": 4, "image": 139, "width": 0.5,
                                      "classes": 100}),
    "gpt_big": ("gpt", {"batch": 8, "seq": 128, "dim": 128, "heads": 4, "layers": 4,
                        "vocab": 1000}),
    "lstm_big": ("lstm", {"batch": 32, "seq": 64, "hidden": 256, "layers": 2,
                          "vocab": 1000}),
}
SMALL = ("lenet", "resnet18", "lstm", "gpt")


def quartiles(xs: list[float]) -> tuple[float, float, float]:
    q = statistics.quantiles(xs, n=4, method="inclusive")
    return q[0], statistics.median(xs), q[2]


def run_model(key: str, kwargs: dict, target, points: int, rounds: int,
              offload: bool) -> None:
    from codegen.load import load
    from codegen.package import build_package
    from planner.cli.curve import chosen
    from planner.curve import budget_curve, format_curve
    from planner.frontend.options import GraphOptions
    from planner.frontend.prepare import prepare
    from planner.graph.interpret import init_params, random_feeds
    from planner.graph.optimizer import Optimizer
    from planner.memory.options import MemoryOptions, format_bytes
    from planner.pipeline import PlanOptions
    from planner.zoo import build

    name = MODELS[key][0]
    graph = prepare(build(name, **kwargs), GraphOptions(optimizer=Optimizer(kind="sgd")))
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


def progress(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def run_torch(key: str, kwargs: dict, target, points: int, rounds: int,
              budgets: list[float]) -> None:
    """The curve, 4 of its plans, torch plain, checkpoint and compile's activation budgets,
    each run in a child process of its own, taking turns step by step."""
    from bench.bench_memory_exec import LR, at_equal_peak, measure, torch_ops
    from codegen.package import build_package
    from planner.cli.curve import chosen
    from planner.curve import budget_curve, format_curve
    from planner.frontend.options import GraphOptions
    from planner.frontend.prepare import prepare
    from planner.graph.optimizer import Optimizer
    from planner.memory.options import MemoryOptions
    from planner.pipeline import PlanOptions
    from planner.zoo import build

    name = MODELS[key][0]
    forward = build(name, **kwargs)
    lacks = sorted({n.op for n in forward.nodes} - set(torch_ops()))
    graph = prepare(forward, GraphOptions(optimizer=Optimizer(kind="sgd", lr=LR)))
    load_before = os.getloadavg()[0]
    progress(f"{key}: planning the curve ({len(graph.nodes)} nodes, {points} points)")
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = budget_curve(graph, target, None,
                              PlanOptions(memory=MemoryOptions(offload=False)), points)
    curve = result.curve
    steps = [q.step_seconds for q in curve.points]
    print(f"== {key} {name}({', '.join(f'{k}={v}' for k, v in kwargs.items())}): "
          f"{len(graph.nodes)} nodes, curve planned in {time.perf_counter() - t0:.1f} s, "
          f"load average {load_before:.2f}")
    print(format_curve(curve))
    print(f"  {len(curve.points)} points; predicted step non-increasing in the budget: "
          f"{'yes' if all(b <= a for a, b in itertools.pairwise(steps)) else 'NO'}")
    picks = [curve.points[i] for i in chosen(len(curve.points), 4)]
    with tempfile.TemporaryDirectory(prefix="bench-curve-torch-") as tmp:
        configs, planned = [], {}
        for k, q in enumerate(picks):
            progress(f"{key}: building point {k + 1}/{len(picks)} "
                     f"(budget {q.budget_bytes / 2**20:.2f} MiB)")
            _, built = build_package(result.plans[q.plan_sha256], f"{tmp}/{key}{k}")
            label = f"ours {q.budget_bytes / 2**20:.2f} MiB"
            configs.append((label, {"kind": "ours", "package": str(built.dir), "steady": True}))
            planned[label] = q
        torch_spec = {"kind": "torch", "build": [name, kwargs], "threads": os.cpu_count() or 1,
                      "steady": True}
        if lacks:
            print(f"  torch: the translator lacks {', '.join(lacks)}")
        else:
            configs += [(f"torch {mode}", {**torch_spec, "mode": mode})
                        for mode in ("plain", "checkpoint")]
            configs += [(f"torch budget {b:g}", {**torch_spec, "mode": "budget", "budget": b})
                        for b in budgets]
        progress(f"{key}: {len(configs)} runs warming (3 steps each), then {rounds} rounds")
        results = measure(configs, rounds)
    load_after = os.getloadavg()[0]
    print(f"  {rounds} rounds, load average {load_before:.2f} before, {load_after:.2f} after "
          f"(seven other jobs share the 2 cores: times are noisy)")
    print(f"  {'run':<22} {'planned MiB':>11} {'held MiB':>9} {'peak MiB':>9} {'pred ms':>8} "
          f"{'meas ms':>8} {'[p25, p75] ms':>17}")
    rows = []
    for label, r in results.items():
        q = planned.get(label)
        lo, mid, hi = quartiles(r["times"])
        if q:
            rows.append((lo, mid, hi, r["held"] <= q.peak_bytes + q.host_bytes))
        print(f"  {label:<22} "
              + (f"{(q.peak_bytes + q.host_bytes) / 2**20:>11.2f} {r['held'] / 2**20:>9.2f}"
                 if q else f"{'':>11} {'':>9}")
              + f" {r['peak'] / 2**20:>9.1f} "
              + (f"{q.step_seconds * 1e3:>8.1f}" if q else f"{'':>8}")
              + f" {mid * 1e3:>8.1f} [{lo * 1e3:>7.1f}, {hi * 1e3:>7.1f}]")
    # Larger budgets come later: each point no slower than the one before, within spread.
    monotone = all(rows[k + 1][0] <= rows[k][2] for k in range(len(rows) - 1))
    print(f"  ours: measured step monotone within spread (each p25 <= the smaller budget's "
          f"p75): {'yes' if monotone else 'NO'}; held <= planned: "
          f"{'yes' if all(r[3] for r in rows) else 'NO'}")
    ours = {k: v for k, v in results.items() if k in planned}
    for label, theirs in results.items():
        if not label.startswith("torch") or label == "torch plain":
            continue
        mine = at_equal_peak(ours, theirs["peak"])
        print(f"  at {label}'s peak ({theirs['peak'] / 2**20:.1f} MiB, "
              f"{theirs['median'] * 1e3:.1f} ms): " + (
                  "no budget of ours reaches it" if mine is None else
                  f"ours {mine[0].removeprefix('ours ')}: peak "
                  f"{mine[1]['peak'] / 2**20:.1f} MiB, {mine[1]['median'] * 1e3:.1f} ms, "
                  f"torch/ours {theirs['median'] / mine[1]['median']:.2f}"), flush=True)


def sizes(specs: list[str]) -> dict[str, dict]:
    """`--size resnet50:batch=2,image=96` -> {"resnet50": {"batch": 2, "image": 96}}."""
    out: dict[str, dict] = {}
    for spec in specs:
        key, _, pairs = spec.partition(":")
        if key not in MODELS or not pairs:
            raise SystemExit(f"--size {spec!r}: want MODEL:key=value,... with MODEL one of "
                             f"{', '.join(MODELS)}")
        for pair in pairs.split(","):
            k, _, v = pair.partition("=")
            try:
                out.setdefault(key, {})[k] = float(v) if "." in v else int(v)
            except ValueError:
                raise SystemExit(f"--size {spec!r}: {pair!r} is not key=number") from None
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(SMALL))
    ap.add_argument("--size", action="append", default=[], metavar="MODEL:K=V,...",
                    help="a model's zoo sizes (repeatable), e.g. resnet50:batch=2,image=96")
    ap.add_argument("--points", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--offload", action="store_true")
    ap.add_argument("--torch", action="store_true",
                    help="each run in a process of its own, beside torch plain, checkpoint "
                         "and torch.compile's activation-memory budgets")
    ap.add_argument("--torch-budgets", default="0.5,0.1",
                    help="--torch: activation_memory_budget values (empty: none)")
    args = ap.parse_args()
    from planner.target.presets import load_target

    override = sizes(args.size)
    budgets = [float(b) for b in args.torch_budgets.split(",") if b]
    target = load_target("host")
    print(f"target host: {len(target.logical_cpus)} logical CPUs; load average before "
          f"{os.getloadavg()[0]:.2f}")
    for key in args.models.split(","):
        if key not in MODELS:
            raise SystemExit(f"unknown model {key!r}; known: {', '.join(MODELS)}")
        kwargs = {**MODELS[key][1], **override.get(key, {})}
        if args.torch:
            run_torch(key, kwargs, target, args.points, args.rounds, budgets)
        else:
            run_model(key, kwargs, target, args.points, args.rounds, args.offload)
    print(f"load average after {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
