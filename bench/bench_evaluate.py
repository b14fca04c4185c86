"""Test accuracy of the digits demo (examples/train_digits.py) read two ways, alternating rounds:

    evaluate       the training executor's evaluate() (Plan.evaluation: the same build, the
                   parameters read in place), one training-sized batch at a time
    second build   what the demo did before: plan the inference graph (batch = the test
                   split), render and build its schedule library in a fresh folder, copy the
                   parameters in, forward()

Both from one trained executor (LeNet, 100 SGD steps); both must give the same accuracy.
Prints per-round seconds, medians, the ratio and the load average.

    python bench/bench_evaluate.py [--rounds 3] [--steps 100]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def example():
    spec = importlib.util.spec_from_file_location("train_digits", ROOT / "examples" /
                                                  "train_digits.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["train_digits"] = module
    spec.loader.exec_module(module)
    return module


def second_build(ex, digits, demo) -> float:
    """The baseline: a second plan and build of the forward graph, parameters copied in."""
    from planner.zoo import build

    forward = build("lenet", batch=len(digits.test_labels), image=8, loss=False)
    params = ex.params()
    with tempfile.TemporaryDirectory() as tmp:
        module = demo.executor_module(forward, Path(tmp) / "lenet_digits_test",
                                      say=lambda s: None)
        test = module.Executor()
        test.load_params({t.name: params[t.name] for t in forward.by_role("param", "state")})
        logits = test.forward({"images": digits.test_images})["logits"]
    return float(np.mean(np.argmax(logits, axis=1) == digits.test_labels))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--batch", type=int, default=32)
    args = parser.parse_args()
    demo = example()
    from planner.frontend.options import GraphOptions
    from planner.frontend.prepare import prepare
    from planner.graph.interpret import init_params
    from planner.graph.optimizer import Optimizer
    from planner.zoo import build

    digits = demo.reference_example().load_digits(seed=0)
    graph = prepare(build("lenet", batch=args.batch, image=8),
                    GraphOptions(optimizer=Optimizer(kind="sgd", lr=0.1)))
    with tempfile.TemporaryDirectory() as tmp:
        ex = demo.executor_module(graph, Path(tmp) / "lenet_digits_train",
                                  say=lambda s: None).Executor()
        ex.load_params(init_params(graph, seed=0))
        for pick in demo.batches(len(digits.train_labels), args.batch, args.steps, 0):
            ex.step({"images": digits.train_images[pick], "labels": digits.train_labels[pick]})
        print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        times: dict[str, list[float]] = {"evaluate": [], "second build": []}
        accuracies: dict[str, float] = {}
        for r in range(args.rounds):
            for name, run in (("evaluate", lambda: demo.accuracy(ex, digits, args.batch)),
                              ("second build", lambda: second_build(ex, digits, demo))):
                start = time.perf_counter()
                accuracies[name] = run()
                times[name].append(time.perf_counter() - start)
                print(f"round {r}  {name:<13} {times[name][-1]:8.4f} s  "
                      f"accuracy {accuracies[name]:.4f}")
    base = statistics.median(times["second build"])
    print(f"\n{'how':<14}{'median s':>10}{'ratio':>8}{'accuracy':>10}")
    for name in times:
        median = statistics.median(times[name])
        print(f"{name:<14}{median:>10.4f}{median / base:>8.3f}{accuracies[name]:>10.4f}")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0 if accuracies["evaluate"] == accuracies["second build"] else 1


if __name__ == "__main__":
    sys.exit(main())
