"""What the CPU memory-budget executor tests share (tests/codegen/test_memory_exec.py,
test_pinned_exec.py): this host detected once, two small models whose smallest budgets offload
or recompute, and a plan built and stepped."""

from __future__ import annotations

import functools

from codegen.build import build
from codegen.load import load
from codegen.render import render
from planner.frontend.autodiff import make_training_graph
from planner.graph.optimizer import Optimizer
from planner.plan import Plan
from planner.target.detect import detect
from planner.zoo import build as zoo

SMALL = {"lenet": ("lenet", {"batch": 4, "image": 12, "width": 2.0}),  # offloads at its smallest
         "alexnet": ("alexnet", {"batch": 2, "image": 63, "classes": 4})}


@functools.cache
def host():
    """This host, detected once: detection measures it, so each call may differ a little, and
    plans of one graph compared here must be made for one target."""
    return detect()


def graph_of(key: str):
    """The SGD training graph of the SMALL model `key`."""
    name, kwargs = SMALL[key]
    return make_training_graph(zoo(name, **kwargs), Optimizer(kind="sgd", lr=0.1))


def run_steps(p: Plan, where, state, feeds, steps: int = 1):
    """Render and build `p` in `where`, load `state` and step `steps` times on `feeds`: the
    executor and each step's outputs."""
    ex = load(build(render(p, where)).dir).Executor()
    ex.load_params(state)
    outs = [ex.step(feeds) for _ in range(steps)]
    return ex, outs
