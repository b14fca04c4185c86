"""A training step quiet and under load, for the generated executor and PyTorch eager, per
OpenMP wait policy (issue 15: steady under load).

    python bench/bench_under_load.py [--rounds 4] [--steps 5]

Load: one busy process (a spinning loop) per core but one, so the step's OpenMP team finds
every core but one taken, as when another job shares the machine. A team whose threads
spin-wait at barriers (libgomp's default under OMP_WAIT_POLICY unset: spin for a while, then
sleep) can collapse when one of its threads is descheduled: the others spin through their
time slices waiting for it.

For each wait policy, a fresh process (OpenMP reads its environment once, at load) times
resnet-18 training steps (batch 16, 64x64, SGD) of the executor and of PyTorch eager, in
rounds that alternate quiet and loaded, engines interleaved inside each round; the table
shows medians over rounds of each round's median step, the slowdown (loaded / quiet), and the
load average seen while measuring. Busy processes run at normal priority.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from codegen.backends import CPU_LOAD_ENVIRONMENT  # noqa: E402

# Each set explicitly, so that the generated package keeps it (it sets its own only where the
# user chose none): libgomp's default (OMP_WAIT_POLICY unset) spins 300,000 times.
POLICIES = {
    "default": {"GOMP_SPINCOUNT": "300000"},
    "passive": {"OMP_WAIT_POLICY": "passive"},
    "active": {"OMP_WAIT_POLICY": "active"},
    "package": CPU_LOAD_ENVIRONMENT,
}
MODEL = dict(depth=18, batch=16, image=64, classes=100)


def spin() -> None:
    while True:
        pass


def busy(n: int) -> list[mp.Process]:
    procs = [mp.Process(target=spin, daemon=True) for _ in range(n)]
    for p in procs:
        p.start()
    return procs


def child(folder: str, rounds: int, steps: int) -> dict:
    """Runs in the policy's process: alternating quiet / loaded rounds, both engines."""
    from bench.bench_executor import SGD
    from bench.torch_baseline import torch_trainer
    from codegen.load import load
    from planner.frontend.options import GraphOptions
    from planner.frontend.prepare import prepare
    from planner.graph.interpret import init_params, random_feeds
    from planner.zoo import build as zoo

    forward = zoo("resnet", **MODEL)
    graph = prepare(forward, GraphOptions(optimizer=SGD))
    ex = load(folder).Executor()
    ex.load_params(init_params(graph, seed=0))
    feeds = random_feeds(graph, seed=1)
    torch_step = torch_trainer(forward, SGD.lr, os.cpu_count() or 1)
    engines = {"executor": lambda: ex.step(feeds), "torch": torch_step}
    for run in engines.values():
        run()
    results: dict[str, dict[str, list[float]]] = {e: {"quiet": [], "loaded": []}
                                                  for e in engines}
    loads: dict[str, list[float]] = {"quiet": [], "loaded": []}
    others = max(1, (os.cpu_count() or 1) - 1)
    for _ in range(rounds):
        for condition in ("quiet", "loaded"):
            procs = busy(others) if condition == "loaded" else []
            try:
                time.sleep(0.5)
                for name, run in engines.items():
                    times = []
                    for _ in range(steps):
                        t0 = time.perf_counter()
                        run()
                        times.append(time.perf_counter() - t0)
                    results[name][condition].append(float(np.median(times)))
                loads[condition].append(os.getloadavg()[0])
            finally:
                for p in procs:
                    p.kill()
                    p.join()
    return {"steps": results, "load": loads}


def build_executor(folder: Path) -> None:
    import warnings

    from bench.bench_executor import SGD
    from codegen.package import build_package
    from planner.frontend.options import GraphOptions
    from planner.frontend.prepare import prepare
    from planner.pipeline import PlanOptions, plan
    from planner.schedule import ScheduleOptions
    from planner.target.detect import detect
    from planner.zoo import build as zoo

    graph = prepare(zoo("resnet", **MODEL), GraphOptions(optimizer=SGD))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        p = plan(graph, detect(), options=PlanOptions(
            schedule=ScheduleOptions(strategy="uniform")))
    build_package(p, folder, force=True)


def machine() -> str:
    model = "?"
    for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
        if line.startswith("Model name:"):
            model = line.split(":", 1)[1].strip()
    return f"{model}, {os.cpu_count()} logical CPUs"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.rounds, args.steps)))
        return
    print(f"machine: {machine()}; load: {max(1, (os.cpu_count() or 1) - 1)} busy process(es)")
    print(f"resnet-18 training step ({', '.join(f'{k}={v}' for k, v in MODEL.items())}), "
          f"median of {args.rounds} rounds x {args.steps} steps")
    print(f"{'policy':<10}{'engine':<10}{'quiet ms':>10}{'loaded ms':>11}{'slowdown':>10}"
          f"{'load avg q/l':>15}")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "resnet18_load"
        build_executor(folder)
        for policy, env in POLICIES.items():
            out = subprocess.run([sys.executable, __file__, "--child", str(folder),
                                  "--rounds", str(args.rounds), "--steps", str(args.steps)],
                                 env={**os.environ, **env}, capture_output=True, text=True,
                                 check=True)
            result = json.loads(out.stdout.strip().splitlines()[-1])
            load = result["load"]
            for engine, by in result["steps"].items():
                quiet, loaded = np.median(by["quiet"]), np.median(by["loaded"])
                print(f"{policy:<10}{engine:<10}{quiet * 1e3:>10.1f}{loaded * 1e3:>11.1f}"
                      f"{loaded / quiet:>10.2f}{np.median(load['quiet']):>8.2f}/"
                      f"{np.median(load['loaded']):<6.2f}", flush=True)


if __name__ == "__main__":
    main()
