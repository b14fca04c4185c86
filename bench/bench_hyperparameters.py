"""Per-step cost of setting the learning rate between steps (issue 35), beside the step
itself: examples/train_torch_run.py's MLP (64-64-LayerNorm-10, batch 32, AdamW with two groups
and clipping) on the generated CPU executor. Best and median of 5 runs of 300 calls, seconds.

    python bench/bench_hyperparameters.py
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
import train_torch_run as example  # noqa: E402

from planner.runtime.schedules import Schedule  # noqa: E402


def timeit(f, n: int = 300) -> tuple[float, float]:
    runs = []
    for _ in range(5):
        t0 = time.perf_counter()
        for k in range(n):
            f(k)
        runs.append((time.perf_counter() - t0) / n)
    return min(runs), float(np.median(runs))


def main() -> None:
    train_set, _ = example.data()
    torch.manual_seed(0)
    t, opt, _ = example.start(example.Net(), 3, 43, Path(tempfile.mkdtemp()))
    x, y = (v[:32].numpy() for v in train_set.tensors)
    run = Schedule(kind="warmup-cosine", warmup=10, total=1000).on(t.executor)
    rows = {"step": lambda k: t.step(x, y),
            "ScheduledRun.apply (2 groups)": run.apply,
            "set_hyperparameters (1 group)": lambda k: t.executor.set_hyperparameters(
                {"lr": 1e-3}),
            "ExecutorOptimizer.step (2 groups)": lambda k: opt.step()}
    print(f"{'call':36} {'best s':>10} {'median s':>10}")
    for name, f in rows.items():
        best, median = timeit(f)
        print(f"{name:36} {best:10.2e} {median:10.2e}")


if __name__ == "__main__":
    main()
