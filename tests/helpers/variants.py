"""A small LeNet planned on a uniform grid and built, for the schedule-variant tests
(tests/codegen/test_schedule_variants.py, test_reproducible.py)."""

from __future__ import annotations

import warnings

from codegen.build import build
from codegen.load import load
from codegen.render import render
from planner.frontend.autodiff import make_training_graph
from planner.graph.optimizer import Optimizer
from planner.pipeline import PlanOptions, plan
from planner.schedule import ScheduleOptions
from planner.target.detect import detect
from planner.zoo import build as zoo


def lenet_built(folder, intra: int, inter: int):
    """(training graph, plan, loaded module) of a small LeNet whose main schedule is the
    uniform grid intra x inter."""
    graph = make_training_graph(zoo("lenet", batch=4, image=12), Optimizer(kind="sgd", lr=0.05))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        p = plan(graph, detect(), options=PlanOptions(
            schedule=ScheduleOptions(strategy="uniform", intra=intra, inter=inter)))
    return graph, p, load(build(render(p, folder)).dir)
