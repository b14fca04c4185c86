"""Which ops' results depend on the thread count (docs/executor.md, "Busy machines").

A plan whose main schedule runs every op on one lane with `threads`-thread teams (uniform,
intra=threads) and whose one-core variant runs every op on one thread is built with every
tensor in its own bytes (layout "own"); each schedule is forced (`set_variant`) from the same
state and feeds. `parameters_differ` compares the parameters after a few steps bit for bit;
`culprits` runs one step per schedule returning every tensor and names the ops whose inputs
are bit-identical across the schedules while an output is not: those ops, not their inputs,
round differently on another thread count.

    PYTHONPATH=. python -m tests.helpers.thread_bits lenet mlp resnet gpt lstm
"""

from __future__ import annotations

import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np

from codegen.build import build
from codegen.load import load
from codegen.render import render
from planner.graph.autodiff import make_training_graph
from planner.graph.interpret import random_feeds
from planner.graph.optimizer import Optimizer
from planner.pipeline import PlanOptions, plan
from planner.schedule import ScheduleOptions
from planner.target.detect import detect
from planner.zoo import build as zoo
from tests.codegen.helpers import start_state

# Small zoo models covering the kernels a training step runs: dense layers, convolutions
# with BatchNorm, attention with LayerNorm and softmax, a recurrent cell, embeddings.
MODELS = {
    "mlp": ("mlp", dict(batch=8, in_features=48, hidden=[64, 32], classes=10)),
    "lenet": ("lenet", dict(batch=4, image=12)),
    "resnet": ("resnet", dict(batch=2, image=16, width=0.125, depth=18)),
    "gpt": ("gpt", dict(batch=2, seq=8, dim=32, heads=2, layers=1)),
    "lstm": ("lstm", dict(batch=4, seq=6, hidden=32, layers=2, vocab=50)),
}


def built(name: str, folder: Path, threads: int = 2, optimizer: str = "adam"):
    """(training graph, loaded module) of zoo model `name` (MODELS) whose main schedule runs
    every op on `threads` threads, with every tensor readable after a step."""
    model, params = MODELS[name]
    graph = make_training_graph(zoo(model, **params), Optimizer(kind=optimizer, lr=0.01))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        p = plan(graph, detect(), options=PlanOptions(
            schedule=ScheduleOptions(strategy="uniform", intra=threads, inter=1)))
    return graph, p, load(build(render(p, folder / name, layout="own")).dir)


def trained(module, graph, schedule: str, steps: int) -> dict[str, np.ndarray]:
    """The parameters after `steps` steps from start_state on schedule `schedule`."""
    ex = module.Executor()
    ex.load_params(start_state(graph))
    ex.set_variant(schedule)
    for t in range(steps):
        ex.step(random_feeds(graph, seed=300 + t))
    return ex.params()


def parameters_differ(module, graph, steps: int = 3) -> dict[str, list[str]]:
    """Per variant, the parameters that differ (bit for bit) from the main schedule's."""
    names = [v["name"] for v in module.Executor().variants()]
    main = trained(module, graph, "main", steps)
    out = {}
    for name in names[1:]:
        got = trained(module, graph, name, steps)
        out[name] = sorted(k for k in main if not np.array_equal(got[k], main[k]))
    return out


def culprits(module, graph, p, schedule: str) -> list[tuple[str, str, str]]:
    """(node, op, output) of each op whose inputs are equal on `schedule` and the main one
    after one step from the same state, while that output differs."""
    graph = p.graph  # the graph the executor runs (memory planning's ops included)
    fed = {t.name for t in graph.tensors
           if t.role in ("input", "label", "param", "state", "optimizer-state")}
    wanted = [t.name for t in graph.tensors if t.name not in fed]
    values = {}
    for name in ("main", schedule):
        ex = module.Executor()
        ex.load_params(start_state(graph))
        ex.set_variant(name)
        values[name] = ex.step(random_feeds(graph, seed=300), outputs=wanted)
    a, b = values["main"], values[schedule]
    same = {k for k in a if np.array_equal(a[k], b[k], equal_nan=True)} | fed
    out = []
    for node in graph.nodes:
        if all(i in same for i in node.inputs):
            for o in node.outputs:
                if o in a and o not in same:
                    out.append((node.name, node.op, o))
    return out


def main(names: list[str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        for name in names or list(MODELS):
            graph, p, module = built(name, Path(tmp))
            differ = parameters_differ(module, graph)
            print(f"{name}: parameters that differ: {differ}")
            for schedule in differ:
                for node, op, out in culprits(module, graph, p, schedule):
                    print(f"  {schedule}: {op:24s} {node} -> {out}")
            sys.stdout.flush()


if __name__ == "__main__":
    main(sys.argv[1:])
