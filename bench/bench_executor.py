"""Generated CPU executor benchmark (issue 7): build times and step times against PyTorch.

    python bench/bench_executor.py [--quick]     (--quick skips the cold resnet-50 build)

1. Build: a resnet-50 training plan (batch 32, 224x224, SGD, uniform strategy) rendered and
   built cold (a fresh PLANNER_CACHE, so the kernel library compiles too, and a fresh tree),
   then again unchanged (the content-hash cache: render + stamp check). Targets: cold < 120 s,
   cached < 1 s.
2. Steps: one SGD training step of lenet, resnet-18, inception_v3 (small images) and lstm,
   the generated executor (uniform plan: every op on all cores) against PyTorch eager on the
   same graph (torch autograd + torch.optim.SGD, the test suite's translator from planner nodes
   to torch calls), both with every core; median of the timed steps after warm-up.
"""

from __future__ import annotations

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

STEP_MODELS = [
    ("lenet", "lenet", dict(batch=64, image=28)),
    ("resnet-18", "resnet", dict(depth=18, batch=16, image=64, classes=100)),
    ("inception_v3", "inception_v3", dict(batch=8, image=107, width=0.5, classes=100)),
    ("lstm", "lstm", dict(batch=20, seq=35, hidden=200, layers=2, vocab=2000)),
]
SGD = Optimizer(kind="sgd", lr=0.01)


def plan_for(graph, target):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return plan(graph, target, options=PlanOptions(
            schedule=ScheduleOptions(strategy="uniform")))


def bench_build(target) -> None:
    graph = prepare(zoo("resnet", depth=50, batch=32), GraphOptions(optimizer=SGD))
    plan = plan_for(graph, target)
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["PLANNER_CACHE"] = str(Path(tmp) / "cache")
        try:
            t0 = time.perf_counter()
            tree = render(plan, Path(tmp) / "resnet50")
            build(tree)
            cold = time.perf_counter() - t0
            t0 = time.perf_counter()
            tree = render(plan, Path(tmp) / "resnet50")
            result = build(tree)
            cached = time.perf_counter() - t0
        finally:
            del os.environ["PLANNER_CACHE"]
    assert result.cached
    print(f"{'resnet-50 b32 training plan (' + str(len(plan.ops)) + ' ops)':<44}"
          f"cold {cold:7.1f} s (target 120)   cached {cached:6.3f} s (target 1)")


def executor_step(graph, target, folder: Path, steps: int) -> float:
    module = load(build(render(plan_for(graph, target), folder)).dir)
    ex = module.Executor()
    ex.load_params(init_params(graph, seed=0))
    feeds = random_feeds(graph, seed=1)
    ex.step(feeds)
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        ex.step(feeds)
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def torch_step(forward, steps: int) -> float:
    from torch_baseline import torch_trainer

    step = torch_trainer(forward, SGD.lr, os.cpu_count() or 1)
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def bench_steps(target, steps: int = 10) -> None:
    print(f"{'model':<14}{'config':<46}{'executor ms':>12}{'torch ms':>10}{'ratio':>8}")
    with tempfile.TemporaryDirectory() as tmp:
        for label, name, params in STEP_MODELS:
            forward = zoo(name, **params)
            graph = prepare(forward, GraphOptions(optimizer=SGD))
            ours = executor_step(graph, target, Path(tmp) / name, steps)
            theirs = torch_step(forward, steps)
            config = ",".join(f"{k}={v}" for k, v in params.items())
            print(f"{label:<14}{config:<46}{ours * 1e3:>12.2f}{theirs * 1e3:>10.2f}"
                  f"{ours / theirs:>8.2f}")


def main() -> None:
    target = detect()
    print(f"host: {target.name}; {len(target.logical_cpus)} logical CPUs")
    if "--quick" not in sys.argv:
        bench_build(target)
    bench_steps(target)


if __name__ == "__main__":
    main()
