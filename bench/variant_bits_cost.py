"""What the variants' same-bits rule costs (issue 60, item 5): the step time of a few zoo
models' main schedule (two cores, `adaptive=False`), of the one-core variant (the calling
thread granted one core, the executor switched by its rule) and of the main schedule held with
that mask (`main-one-core`: the executor pins its lanes to the plan's CPUs, so it still runs on
them), in this checkout and in another one (`--before`: a checkout of the code before), in
alternating rounds, medians printed with the load average beside them. Plans are priced
analytically ($PLANNER_COSTS=analytical), so both checkouts plan from the same figures.

    python bench/variant_bits_cost.py --before ../other-checkout --rounds 5

A fixed number of partial sums (BiasAddGrad, loss totals) may cost the main schedule a little;
the variants keep oneDNN's thread-bound ops (MatMul, Conv2DBackpropFilter, LayerNormGrad) on
the main thread count, oversubscribed on one core.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

MODELS = {
    "gpt": ("gpt", {"batch": 4, "seq": 64, "dim": 128, "heads": 4, "layers": 2}),
    "lstm": ("lstm", {"batch": 4, "seq": 6, "hidden": 32, "layers": 2, "vocab": 50}),
    "resnet": ("resnet", {"batch": 8, "image": 32, "width": 0.25, "depth": 18}),
}

# The kernels the same-bits rule changed: their summed mean time per step on the main schedule.
KINDS = ("BiasAddGrad", "SoftmaxCrossEntropy", "SoftmaxCrossEntropyGrad")

CHILD = r"""
import json, os, statistics, sys, time, warnings
sys.path.insert(0, sys.argv[1])
warnings.simplefilter("ignore")
from codegen.build import build
from codegen.load import load
from codegen.render import render
from planner.frontend.autodiff import make_training_graph
from planner.graph.interpret import init_params, random_feeds
from planner.graph.optimizer import Optimizer
from planner.pipeline import plan
from planner.target.detect import detect
from planner.zoo import build as zoo

name, params, folder, steps = sys.argv[2], json.loads(sys.argv[3]), sys.argv[4], int(sys.argv[5])
graph = make_training_graph(zoo(name, **params), Optimizer(kind="adam", lr=1e-3))
p = plan(graph, detect())
module = load(build(render(p, os.path.join(folder, name))).dir)
feeds = random_feeds(graph, seed=1)
out = {}
for mode in ("main", "one-core", "main-one-core"):
    ex = module.Executor(adaptive=mode == "one-core")
    ex.load_params(init_params(graph))
    before = os.sched_getaffinity(0)
    if mode != "main":
        os.sched_setaffinity(0, {min(before)})
    try:
        for _ in range(5):
            ex.step(feeds)
        times = []
        for _ in range(steps):
            t = time.perf_counter()
            ex.step(feeds)
            times.append(time.perf_counter() - t)
    finally:
        os.sched_setaffinity(0, before)
    kinds = {}
    for o in ex.stats()["ops"]:  # the main schedule's ops (a variant's are not in stats)
        kinds[o["op"]] = kinds.get(o["op"], 0.0) + o["seconds"]
    out[mode] = (statistics.median(times), ex.stats()["schedule"]["running"], kinds)
print(json.dumps(out))
"""


def measure(checkout: str, model: str, folder: str, steps: int) -> dict:
    name, params = MODELS[model]
    env = {**os.environ, "PLANNER_COSTS": "analytical", "PYTHONPATH": checkout}
    done = subprocess.run([sys.executable, "-c", CHILD, checkout, name, json.dumps(params),
                           folder, str(steps)], env=env, capture_output=True, text=True,
                          check=True, cwd=checkout)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", required=True, help="a checkout of the code before")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--models", default=",".join(MODELS))
    args = ap.parse_args()
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    trees = {"before": os.path.abspath(args.before), "after": here}
    got: dict = {}
    ops: dict = {}  # (model, op kind, side): the main schedule's per-step seconds of that kind
    with tempfile.TemporaryDirectory() as tmp:
        for model in args.models.split(","):
            for r in range(args.rounds):
                for side in (("before", "after") if r % 2 == 0 else ("after", "before")):
                    folder = os.path.join(tmp, side)
                    res = measure(trees[side], model, folder, args.steps)
                    load = os.getloadavg()[0]
                    for mode, (seconds, running, kinds) in res.items():
                        got.setdefault((model, mode, side), []).append((seconds, load, running))
                        if mode == "main":
                            for kind in KINDS:
                                ops.setdefault((model, kind, side), []).append(
                                    kinds.get(kind, 0.0))
            for mode in ("main", "one-core", "main-one-core"):
                row = []
                for side in ("before", "after"):
                    rows = got[(model, mode, side)]
                    med = statistics.median(s for s, _, _ in rows) * 1e3
                    row.append(f"{side} {med:7.3f} ms ({rows[-1][2]})")
                loads = [x for _, x, _ in got[(model, mode, "after")]]
                print(f"{model:7s} {mode:9s} " + "  ".join(row) +
                      f"  load {min(loads):.1f}-{max(loads):.1f}", flush=True)
            for kind in KINDS:
                b, a = (statistics.median(ops[(model, kind, side)]) * 1e6
                        for side in ("before", "after"))
                if a or b:
                    print(f"{model:7s}   {kind:24s} per step, main: before {b:8.1f} us  "
                          f"after {a:8.1f} us", flush=True)


if __name__ == "__main__":
    main()
