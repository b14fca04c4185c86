"""Which ops' results depend on the thread count (docs/executor.md, "Busy machines").

A plan whose main schedule runs every op on one lane with `threads`-thread teams (uniform,
intra=threads) and whose one-core variant runs every op on one thread is built with every
tensor in its own bytes (layout "own"); each schedule is forced (`set_variant`) from the same
state and feeds. `parameters_differ` compares the parameters after a few steps bit for bit;
`culprits` runs one step per schedule returning every tensor and names the ops whose inputs
are bit-identical across the schedules while an output is not: those ops, not their inputs,
round differently on another thread count.

    PYTHONPATH=. python -m tests.helpers.thread_bits lenet mlp resnet gpt lstm
    PYTHONPATH=. python -m tests.helpers.thread_bits bn_mlp convnet encoder torch_lstm

(the second line: torch nn.Modules, tests/helpers/thread_bits_modules.py).
"""

from __future__ import annotations

import sys
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from codegen.build import build
from codegen.load import load
from codegen.render import render
from planner.frontend.autodiff import make_training_graph
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


class Case(NamedTuple):
    """A built plan: its module, the graph it runs, the plan, the start state and each
    step's feeds (by step number)."""
    module: Any
    graph: Any
    plan: Any
    state: dict[str, np.ndarray]
    feeds: Callable[[int], dict[str, np.ndarray]]


def plan_options(threads: int) -> PlanOptions:
    return PlanOptions(schedule=ScheduleOptions(strategy="uniform", intra=threads, inter=1))


def built(name: str, folder: Path, threads: int = 2, optimizer: str = "adam") -> Case:
    """Zoo model `name` (MODELS) whose main schedule runs every op on `threads` threads, with
    every tensor readable after a step."""
    model, params = MODELS[name]
    graph = make_training_graph(zoo(model, **params), Optimizer(kind=optimizer, lr=0.01))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        p = plan(graph, detect(), options=plan_options(threads))
    module = load(build(render(p, folder / name, layout="own")).dir)
    return Case(module, p.graph, p, start_state(graph),
                lambda t: random_feeds(graph, seed=300 + t))


def module_built(module, inputs, loss, labels, folder: Path, threads: int = 2) -> Case:
    """A torch nn.Module imported as planner.torch.trainer does (Adam), planned like `built`;
    every step feeds `inputs` and `labels`."""
    from planner.torch import trainer

    t = trainer(module, inputs, loss, labels, optimizer="adam", lr=0.01, costs="analytical",
                out_dir=folder / "trainer", strategy="uniform", intra=threads, inter=1,
                no_evaluation=True)
    name = type(module).__name__
    package = load(build(render(t.plan, folder / name, layout="own")).dir)
    arrays = [np.ascontiguousarray(v.detach().numpy()) for v in (*inputs, labels)]
    names = [n for n in t.imported.inputs if n in {x.name for x in t.graph.tensors}]
    feeds = dict(zip(names, arrays, strict=True))
    return Case(package, t.plan.graph, t.plan, t.executor.params(), lambda step: feeds)


def trained(case: Case, schedule: str, steps: int) -> dict[str, np.ndarray]:
    """The parameters after `steps` steps from the start state on schedule `schedule`."""
    ex = case.module.Executor()
    ex.load_params(case.state)
    ex.set_variant(schedule)
    for t in range(steps):
        ex.step(case.feeds(t))
    return ex.params()


def parameters_differ(case: Case, steps: int = 3) -> dict[str, list[str]]:
    """Per variant, the parameters that differ (bit for bit) from the main schedule's."""
    names = [v["name"] for v in case.module.Executor().variants()]
    main = trained(case, "main", steps)
    out = {}
    for name in names[1:]:
        got = trained(case, name, steps)
        out[name] = sorted(k for k in main if not np.array_equal(got[k], main[k]))
    return out


def culprits(case: Case, schedule: str) -> list[tuple[str, str, str]]:
    """(node, op, output) of each op whose inputs are equal on `schedule` and the main one
    after one step from the same state, while that output differs."""
    graph = case.graph  # the graph the executor runs (memory planning's ops included)
    fed = {t.name for t in graph.tensors
           if t.role in ("input", "label", "param", "state", "optimizer-state")}
    wanted = [t.name for t in graph.tensors if t.name not in fed]
    values = {}
    for name in ("main", schedule):
        ex = case.module.Executor()
        ex.load_params(case.state)
        ex.set_variant(name)
        values[name] = ex.step(case.feeds(0), outputs=wanted)
    a, b = values["main"], values[schedule]
    same = {k for k in a if np.array_equal(a[k], b[k], equal_nan=True)} | fed
    out = []
    for node in graph.nodes:
        if all(i in same for i in node.inputs):
            for o in node.outputs:
                if o in a and o not in same:
                    out.append((node.name, node.op, o))
    return out


def report(name: str, case: Case) -> None:
    differ = parameters_differ(case)
    print(f"{name}: parameters that differ: {differ}")
    for schedule in differ:
        for node, op, out in culprits(case, schedule):
            print(f"  {schedule}: {op:24s} {node} -> {out}")
    sys.stdout.flush()


def main(names: list[str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        for name in names or list(MODELS):
            if name in MODELS:
                report(name, built(name, Path(tmp)))
            else:
                from tests.helpers.thread_bits_modules import MODULES

                report(name, module_built(*MODULES[name](), Path(tmp)))


if __name__ == "__main__":
    main(sys.argv[1:])
