"""A real GPU plan with inserted ops, shared by the verify tests: ResNet-18 on the K40c under
a budget tight enough for offloads and prefetches."""

from __future__ import annotations

import json
import warnings
from functools import lru_cache

from planner.errors import InfeasibleBudget
from planner.frontend.autodiff import Optimizer, make_training_graph
from planner.memory import MemoryOptions
from planner.pipeline import PlanOptions, plan
from planner.target import preset
from planner.zoo import build


@lru_cache(maxsize=1)
def offloading_plan_text() -> str:
    g = make_training_graph(build("resnet", depth=18, batch=16, image=32, classes=4),
                            Optimizer(kind="sgd"))
    target = preset("k40c-12gb")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        free = plan(g, target).summary.memory.arena_bytes
        try:
            plan(g, target, options=PlanOptions(memory=MemoryOptions(budget_bytes=1)))
        except InfeasibleBudget as e:
            low = e.smallest_bytes
        budget = low + (free - low) * 6 // 10
        p = plan(g, target, options=PlanOptions(memory=MemoryOptions(budget_bytes=budget)))
    return p.to_json()


def offloading_plan() -> dict:
    """A fresh copy of the plan's JSON data (it has offload and prefetch ops)."""
    data = json.loads(offloading_plan_text())
    kinds = {m["kind"] for m in data["memory"]["ops"]}
    assert {"offload", "prefetch"} <= kinds, kinds
    return data
