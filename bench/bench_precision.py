"""bf16-mixed against float32: one SGD training step of the generated CPU executor in each
precision, and PyTorch eager in float32 and under torch.autocast("cpu", dtype=torch.bfloat16),
on the same models (tests/torch_translator.py).

    PYTHONPATH=. python bench/bench_precision.py [--rounds 5] [--steps 5]

Medians of alternating rounds (each round runs every column for `steps` steps); the load
average before and after is printed, and what oneDNN ran for the bf16 convolutions and matmuls
(its implementation names, from the executor's stats()).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from codegen.build import build  # noqa: E402
from codegen.load import load  # noqa: E402
from codegen.render import render  # noqa: E402
from planner.frontend.options import GraphOptions  # noqa: E402
from planner.frontend.prepare import prepare  # noqa: E402
from planner.graph.interpret import init_params, random_feeds  # noqa: E402
from planner.graph.optimizer import Optimizer  # noqa: E402
from planner.pipeline import PlanOptions, plan  # noqa: E402
from planner.schedule import ScheduleOptions  # noqa: E402
from planner.target.detect import detect  # noqa: E402
from planner.zoo import build as zoo  # noqa: E402

MODELS = [
    ("mlp", "mlp", dict(batch=256, in_features=784, hidden=[1024, 1024], classes=10)),
    ("lenet", "lenet", dict(batch=64, image=28)),
    ("resnet-18", "resnet", dict(depth=18, batch=16, image=64, classes=100)),
]
SGD = Optimizer(kind="sgd", lr=0.01)


def executor(forward, precision: str, target, folder: Path):
    graph = prepare(forward, GraphOptions(optimizer=SGD, precision=precision))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        planned = plan(graph, target, options=PlanOptions(
            schedule=ScheduleOptions(strategy="uniform")))
    ex = load(build(render(planned, folder)).dir).Executor()
    ex.load_params(init_params(graph, seed=0))
    feeds = random_feeds(graph, seed=1)
    ex.step(feeds)
    return ex, (lambda: ex.step(feeds))


def timed(step, steps: int) -> list[float]:
    out = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        out.append(time.perf_counter() - t0)
    return out


def main() -> None:
    from torch_baseline import torch_trainer

    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=5)
    args = ap.parse_args()
    target = detect()
    threads = os.cpu_count() or 1
    print(f"host: {target.name}; {len(target.logical_cpus)} logical CPUs; "
          f"load average {os.getloadavg()[0]:.2f}")
    cols = ["executor fp32", "executor bf16", "torch fp32", "torch autocast bf16"]
    print(f"{'model':<11}" + "".join(f"{c:>21}" for c in cols) + f"{'bf16/fp32':>11}"
          f"{'ours/torch bf16':>17}")
    impls: dict[str, set[str]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for label, name, params in MODELS:
            forward = zoo(name, **params)
            f32 = executor(forward, "fp32", target, Path(tmp) / f"{name}_fp32")[1]
            ex16, b16 = executor(forward, "bf16-mixed", target, Path(tmp) / f"{name}_bf16")
            steps = [f32, b16, torch_trainer(forward, SGD.lr, threads),
                     torch_trainer(forward, SGD.lr, threads, autocast="bfloat16")]
            times: list[list[float]] = [[] for _ in steps]
            for _ in range(args.rounds):
                for k, step in enumerate(steps):
                    times[k] += timed(step, args.steps)
            med = [float(np.median(t)) * 1e3 for t in times]
            print(f"{label:<11}" + "".join(f"{m:>18.2f} ms" for m in med)
                  + f"{med[1] / med[0]:>11.2f}{med[1] / med[3]:>17.2f}")
            for d in ex16.stats()["ops"]:
                if d["op"] in ("Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter",
                               "MatMul"):
                    impls.setdefault(d["op"], set()).add(d.get("impl", ""))
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    for op, names in sorted(impls.items()):
        print(f"oneDNN for bf16 {op}: {'; '.join(sorted(names))}")


if __name__ == "__main__":
    main()
