"""Real plans the verify tests edit, as the JSON data of their files: a LeNet training plan,
a budget plan of it that adds recompute, offload and prefetch ops, and a data-parallel plan of
it with several all-reduces. Planned once per session for the preset target (planning needs
no such machine); `for_host` plans for this host, to build and run."""

from __future__ import annotations

import functools
import json
import warnings
from typing import Any

from planner.errors import InfeasibleBudget
from planner.frontend.autodiff import make_training_graph
from planner.graph.optimizer import Optimizer
from planner.ir.graph import Graph
from planner.memory.options import MemoryOptions
from planner.pipeline import PlanOptions, plan
from planner.plan import Plan
from planner.schedule import ScheduleOptions
from planner.schedule.parallel import DataParallelOptions
from planner.target import preset
from planner.zoo import build as zoo

TARGET = "xeon-8180"
# The budget kind is planned at the smallest budget the planner names for this LeNet on its
# target (about 2.8 MiB on xeon-8180: three recomputes, three offloads and their prefetches;
# `planner plan 'zoo:lenet?batch=4&image=12&width=4' --train sgd --target xeon-8180
# --memory-budget 64` names it). Width 4 for this kind alone: at width 1 the convolutions'
# per-thread scratch is the peak alone, met by running ops one at a time.
# `--data-parallel 2 --bucket-bytes 4096`: four all-reduces on the communication lane.
RANKS, BUCKET_BYTES = 2, 4096
# `zero3`: the same with --shard-parameters (all-gathers, reduce-scatters, updates of shards);
# `zero3-fp16`: that in fp16-mixed (the shards unscaled in place, the flag reduced, each
# shard's next value behind a SkipOnOverflow).
KINDS = ("train", "budget", "parallel", "zero3", "zero3-fp16")


@functools.cache
def lenet(width: float = 1.0, precision: str = "fp32") -> Graph:
    return make_training_graph(zoo("lenet", batch=4, image=12, width=width),
                               Optimizer(kind="sgd", lr=0.1), precision=precision)


def options(kind: str, budget: int | None = None) -> PlanOptions:
    """The options of each kind of plan (`budget`: the memory budget of the budget kind)."""
    if kind == "budget":
        return PlanOptions(memory=MemoryOptions(budget_bytes=budget))
    if kind in ("parallel", "zero3", "zero3-fp16"):
        return PlanOptions(data_parallel=DataParallelOptions(
            ranks=RANKS, bucket_bytes=BUCKET_BYTES, shard_parameters=kind != "parallel"))
    return PlanOptions(schedule=ScheduleOptions(strategy="optimized"))


def make(kind: str, target, budget: int | None = None) -> Plan:
    """The kind's plan for `target`; the budget kind at `budget`, by default the smallest
    feasible one the planner names."""
    if kind == "budget" and budget is None:
        budget = smallest_budget(target)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return plan(lenet(4.0 if kind == "budget" else 1.0,
                          "fp16-mixed" if kind == "zero3-fp16" else "fp32"), target,
                    options=options(kind, budget))


def smallest_budget(target) -> int:
    """The smallest budget the planner names for the budget kind's LeNet on `target` (what an
    infeasible one's error says)."""
    try:
        make("budget", target, budget=64)
    except InfeasibleBudget as e:
        return e.smallest_bytes
    raise AssertionError("a 64-byte budget was met")


@functools.cache
def _text(kind: str) -> str:
    return make(kind, preset(TARGET)).to_json()


def plan_data(kind: str) -> dict[str, Any]:
    """A fresh copy of the kind's plan (its file's JSON data), to edit."""
    return json.loads(_text(kind))
