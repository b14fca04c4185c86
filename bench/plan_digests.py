"""The sha256 of every zoo model's plan: a check that a change to the planner's speed changed
no decision. Plans every model of the zoo at its default sizes, training (momentum, as
`bench_memory.py arena`) and inference, on knl-7250 and k40c-12gb, and prints one line per
plan: the digest of its canonical JSON, the graph, the target and the seconds it took.

    python bench/plan_digests.py > before.txt
    ... change the planner ...
    python bench/plan_digests.py > after.txt
    diff <(cut -d' ' -f1-3 before.txt) <(cut -d' ' -f1-3 after.txt)   # no output: identical
    python bench/plan_digests.py --only resnet,lstm                        # a few models
    python bench/plan_digests.py --timed         # also bench_schedule's timed graphs (SGD)
"""

from __future__ import annotations

import hashlib
import os
import sys
import time
import warnings

# This checkout's planner, whatever else is installed.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from planner.frontend.options import GraphOptions  # noqa: E402
from planner.frontend.prepare import prepare  # noqa: E402
from planner.graph.optimizer import Optimizer  # noqa: E402
from planner.pipeline import plan  # noqa: E402
from planner.target import preset  # noqa: E402
from planner.zoo import MODELS, build  # noqa: E402

TARGETS = ("knl-7250", "k40c-12gb")


def main() -> None:
    warnings.simplefilter("ignore")
    only = None
    if "--only" in sys.argv:
        only = set(sys.argv[sys.argv.index("--only") + 1].split(","))
    targets = [preset(t) for t in TARGETS]
    for name in MODELS:
        if only and name not in only:
            continue
        for train in (True, False):
            g = build(name)
            if train:
                g = prepare(g, GraphOptions(optimizer=Optimizer(kind="momentum")))
            for target in targets:
                t0 = time.perf_counter()
                text = plan(g, target).to_json()
                seconds = time.perf_counter() - t0
                sha = hashlib.sha256(text.encode()).hexdigest()
                kind = "train" if train else "infer"
                print(f"{sha} {name}-{kind} {target.name} {seconds:.2f}", flush=True)
    if "--timed" in sys.argv:
        from bench_schedule import TIMED

        from planner.zoo import from_spec

        for label, spec, _, _ in TIMED:
            g = prepare(from_spec(spec), GraphOptions(optimizer=Optimizer(kind="sgd")))
            t0 = time.perf_counter()
            text = plan(g, targets[0]).to_json()
            seconds = time.perf_counter() - t0
            sha = hashlib.sha256(text.encode()).hexdigest()
            print(f"{sha} {label.replace(' ', '-')}-sgd {targets[0].name} {seconds:.2f}",
                  flush=True)


if __name__ == "__main__":
    main()
