"""How long `planner plan --target host --memory-budget B` takes: the CPU budget search, at the
budget halfway between the per-op bound and the unconstrained arena and at the smallest
feasible one, on the memory test's DenseNet and Inception-v3 and on a ResNet-50.

    python bench/bench_budget_search.py [--models densenet,inception_v3,resnet50]
                                        [--rounds 3] [--tree DIR ...]

This host is detected once and written to a target file every command plans for (`--target
host` measures the machine anew each time, and its costs, hence its plans, vary a little).
Budgets come from this tree (its unconstrained plan, and the smallest feasible budget its
error names); each `--tree` (a checkout of the planner, default this one) then plans them
with its own `planner plan` in a process of its own, the trees taking turns for `rounds`
rounds (alternating rounds see the same load); printed: the median wall seconds of the
command per tree, the plan's arena and added ops (equal across trees when their searches
decide the same), and the load average before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# The memory test's sizes (tests/codegen/test_zoo_models.py), and a ResNet-50.
MODELS = {
    "densenet": "zoo:densenet?batch=2&image=32&width=0.125&classes=10",
    "inception_v3": "zoo:inception_v3?batch=2&image=75&width=0.0625&classes=10",
    "resnet50": "zoo:resnet?batch=2&image=32&depth=50&width=0.125&classes=10",
}


def budgets(spec: str, target) -> dict[str, int]:
    """The midpoint and the smallest feasible budget of `spec`'s uniform plan on `target`."""
    from planner.errors import InfeasibleBudget
    from planner.frontend.load import load_graph
    from planner.frontend.options import GraphOptions
    from planner.frontend.prepare import prepare
    from planner.graph.optimizer import Optimizer
    from planner.memory.options import MemoryOptions
    from planner.pipeline import PlanOptions, plan
    from planner.schedule import ScheduleOptions

    graph = prepare(load_graph(spec), GraphOptions(optimizer=Optimizer(kind="sgd")))

    def planned(budget):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return plan(graph, target, options=PlanOptions(
                schedule=ScheduleOptions(strategy="uniform"),
                memory=MemoryOptions(budget_bytes=budget)))

    m = planned(None).summary.memory
    try:
        planned(64)
        raise AssertionError("64 bytes fit")
    except InfeasibleBudget as e:
        small = e.smallest_bytes
    return {"mid": max((m.per_op_bound_bytes + m.arena_bytes) // 2, small), "small": small}


def timed(tree: Path, spec: str, target: Path, budget: int, out: Path) -> tuple[float, dict]:
    env = dict(os.environ, PYTHONPATH=str(tree))
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "planner.cli", "plan", spec, "--train", "sgd",
                    "--target", str(target), "--strategy", "uniform", "--memory-budget",
                    str(budget), "-o", str(out), "--force", "--json"],
                   cwd=tree, env=env, check=True, capture_output=True)
    seconds = time.perf_counter() - t
    m = json.loads(out.read_text())["summary"]["memory"]
    return seconds, m


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tree", action="append", type=Path,
                    help="a planner checkout to time (repeatable; default: this one)")
    args = ap.parse_args()
    trees = args.tree or [ROOT]
    load0 = os.getloadavg()
    print(f"load average before: {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}")
    print("| model | budget | bytes | tree | plan s (median) | arena | recompute ops | "
          "offloads |")
    print("|---|---|---|---|---|---|---|---|")
    from planner.target.detect import detect

    with tempfile.TemporaryDirectory() as tmp:
        host = detect()
        target = Path(tmp) / "host.json"
        target.write_text(host.to_json())
        for model in args.models.split(","):
            spec = MODELS[model]
            for label, budget in budgets(spec, host).items():
                runs: dict[int, list[float]] = {k: [] for k in range(len(trees))}
                mem: dict[int, dict] = {}
                for _ in range(args.rounds):
                    for k, tree in enumerate(trees):
                        s, mem[k] = timed(tree, spec, target, budget, Path(tmp) / f"{k}.json")
                        runs[k].append(s)
                for k, tree in enumerate(trees):
                    m = mem[k]
                    print(f"| {model} | {label} | {budget} | {tree.name or tree} | "
                          f"{statistics.median(runs[k]):.1f} | {m['arena_bytes']} | "
                          f"{m['recompute_ops']} | {m['offloaded_tensors']} |", flush=True)
    load1 = os.getloadavg()
    print(f"load average after: {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f}")


if __name__ == "__main__":
    main()
