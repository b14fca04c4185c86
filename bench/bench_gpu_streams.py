"""Co-running GPU streams, predicted: per zoo model, the planned step on one compute stream
(strategy uniform) and on the co-running streams the planner keeps (the default, only when
predicted >= 5% faster), on GPU presets, with the analytical cost model. PREDICTIONS, not
measurements: the measured comparison is bench_gpu.py's "1-stream plan" row on a GPU.

    python bench/bench_gpu_streams.py [--targets h100-80gb,h200-141gb] [--models ...] [--json]

`--targets gpu` plans for this machine's GPU (detected), as bench_gpu.py does.

Columns: the one-stream plan's predicted step, the co-running candidate's (whatever the guard
decides), the kept plan's and its speedup over one stream (all after memory planning: conv
algorithms, workspaces, reuse edges), the compute streams the kept plan uses, its
cross-stream events, and the planning time of both plans (one run each).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from planner.costs import CostModel  # noqa: E402
from planner.frontend.options import GraphOptions  # noqa: E402
from planner.frontend.prepare import prepare  # noqa: E402
from planner.graph.optimizer import Optimizer  # noqa: E402
from planner.pipeline import PlanOptions, place, plan  # noqa: E402
from planner.schedule import ScheduleOptions  # noqa: E402
from planner.schedule.streams import co_running, compute_steps, is_compute  # noqa: E402
from planner.target.presets import load_target  # noqa: E402
from planner.zoo import build  # noqa: E402

# The sizes bench_gpu.py measures (the issue's), and the transformer blocks at a small size.
MODELS = {
    "resnet50": ("resnet", dict(batch=64, depth=50)),
    "inception_v3": ("inception_v3", dict(batch=16)),
    "lstm": ("lstm", dict(batch=20)),
    "wide_deep": ("wide_deep", dict(batch=256)),
    "gpt": ("gpt", dict(batch=8)),
    "bert": ("bert", dict(batch=8)),
    "dcgan": ("dcgan", dict(batch=64)),
    "alexnet": ("alexnet", dict(batch=64)),
}
UNIFORM = PlanOptions(schedule=ScheduleOptions(strategy="uniform"))


def compare(label: str, target: str) -> dict:
    name, size = MODELS[label]
    graph = prepare(build(name, **size), GraphOptions(optimizer=Optimizer(kind="sgd", lr=0.01)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t0 = time.perf_counter()
        one = plan(graph, load_target(target), options=UNIFORM)
        t1 = time.perf_counter()
        several = plan(graph, load_target(target))
        t2 = time.perf_counter()
        # The co-running candidate whatever the guard decides, after memory planning.
        model = CostModel(load_target(target))
        candidate = co_running(graph, compute_steps(graph, model),
                               model.target.gpus[0].memory_bandwidth)
        candidate_ms = max(op.end for op in place(graph, model, candidate).ops) * 1e3 \
            if candidate is not None else float("nan")
    streams = {op.name: op.stream for op in several.ops}
    events = sum(1 for e in several.happens_before if streams[e.before] != streams[e.after])
    return {"model": label, "target": target, "ops": len(graph.nodes),
            "one_ms": one.summary.step_seconds * 1e3, "candidate_ms": candidate_ms,
            "several_ms": several.summary.step_seconds * 1e3,
            "kept": several.summary.strategy,
            "compute_streams": len({s for s in streams.values() if is_compute(s)}),
            "events": events, "plan_s": (t1 - t0, t2 - t1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", default="h100-80gb,h200-141gb")
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    before = os.getloadavg()
    rows = [compare(m, t) for t in args.targets.split(",") for m in args.models.split(",")]
    after = os.getloadavg()
    if args.json:
        print(json.dumps(rows, indent=1))
        return
    print(f"PREDICTED (analytical cost model), not measured; load average before "
          f"{before[0]:.2f}, after {after[0]:.2f}")
    print(f"{'target':<12}{'model':<14}{'ops':>6}{'1 stream ms':>13}{'co-run ms':>11}"
          f"{'kept ms':>10}{'speedup':>9}{'plan':>9}{'streams':>9}{'events':>8}{'plan s':>12}")
    for r in rows:
        print(f"{r['target']:<12}{r['model']:<14}{r['ops']:>6}{r['one_ms']:>13.3f}"
              f"{r['candidate_ms']:>11.3f}"
              f"{r['several_ms']:>10.3f}{r['one_ms'] / r['several_ms']:>9.2f}{r['kept']:>9}"
              f"{r['compute_streams']:>9}{r['events']:>8}"
              f"{r['plan_s'][0]:>6.1f}/{r['plan_s'][1]:<5.1f}")


if __name__ == "__main__":
    main()
