"""Batched weight gradients (planner/frontend/passes/weight_grads.py): the LSTM's training graph
with one weight-gradient GEMM per time step and an n-way AddN (the rewrite switched off) against the
chunked GEMMs the planner makes, measured on the generated executor of this host and planned
on knl-7250.

    python bench/bench_weight_grads.py [--steps N]

Rows alternate between the two graphs for three rounds so that load from other jobs falls on
both; the table gives each graph's median step over all rounds and the ratio batched / per-step.
"""

from __future__ import annotations

import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_executor  # noqa: E402

from planner.costs import CostModel  # noqa: E402
from planner.frontend import passes as front_end_passes  # noqa: E402
from planner.frontend.options import GraphOptions  # noqa: E402
from planner.frontend.prepare import prepare  # noqa: E402
from planner.pipeline import plan  # noqa: E402
from planner.target import preset  # noqa: E402
from planner.target.detect import detect  # noqa: E402
from planner.zoo import build as zoo  # noqa: E402

MODELS = [("lstm small", dict(batch=20, seq=35, hidden=200, layers=2, vocab=2000)),
          ("lstm medium", dict(batch=20))]


def per_step_graph(forward):
    """The training graph as autodiff made it before the rewrite: one GEMM per step."""
    rewrite = front_end_passes.batch_weight_gradients
    front_end_passes.batch_weight_gradients = lambda g: g
    try:
        return prepare(forward, GraphOptions(optimizer=bench_executor.SGD))
    finally:
        front_end_passes.batch_weight_gradients = rewrite


def main() -> None:
    steps = int(sys.argv[sys.argv.index("--steps") + 1]) if "--steps" in sys.argv else 10
    warnings.simplefilter("ignore")
    host, knl = detect(), CostModel(preset("knl-7250"))
    print(f"host: {host.name}; {len(host.logical_cpus)} logical CPUs; {steps} steps x 3 rounds")
    print(f"{'model':<13}{'graph':<11}{'ops':>6}{'executor ms':>13}{'ratio':>7}"
          f"{'knl planned ms':>16}{'ratio':>7}")
    with tempfile.TemporaryDirectory() as tmp:
        for label, params in MODELS:
            forward = zoo("lstm", **params)
            graphs = {"per-step": per_step_graph(forward),
                      "batched": prepare(forward, GraphOptions(optimizer=bench_executor.SGD))}
            times: dict[str, list[float]] = {k: [] for k in graphs}
            for _ in range(3):
                for name, g in graphs.items():
                    folder = Path(tmp) / f"{label.replace(' ', '_')}_{name}"
                    times[name].append(bench_executor.executor_step(g, host, folder, steps))
            planned = {name: plan(g, knl.target).summary.step_seconds
                       for name, g in graphs.items()}
            for name, g in graphs.items():
                ms = float(np.median(times[name])) * 1e3
                base = float(np.median(times["per-step"])) * 1e3
                print(f"{label:<13}{name:<11}{len(g.nodes):>6}{ms:>13.2f}{ms / base:>7.2f}"
                      f"{planned[name] * 1e3:>16.2f}"
                      f"{planned[name] / planned['per-step']:>7.2f}")


if __name__ == "__main__":
    main()
