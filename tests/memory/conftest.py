"""Small graphs and plans for memory tests: a toy SMT target (co-running schedules) and tiny
training graphs, so every test runs in well under a second."""

from __future__ import annotations

import warnings

import pytest

from planner.frontend.autodiff import Optimizer, make_training_graph
from planner.memory import MemoryOptions
from planner.pipeline import PlanOptions, plan
from planner.plan import Plan
from planner.schedule import ScheduleOptions
from planner.target.presets import thread_major_cpus
from planner.target.records import CPU, Target
from planner.zoo import build


def toy_target(cores: int = 8) -> Target:
    return Target(name=f"toy{cores}", host_memory_bytes=1 << 34,
                  logical_cpus=thread_major_cpus(cores=cores, smt=2, cores_per_group=2),
                  cpu=CPU(model="toy", peak_flops=cores * 1.4e9 * 64, memory_bandwidth=100e9,
                          core_bandwidth=9e9, cache_group_level=2, cache_group_bytes=1 << 20))


def training(name: str, optimizer: str = "sgd", **params):
    return make_training_graph(build(name, **params), Optimizer(kind=optimizer))


def cpu_plan(graph, strategy: str = "optimized", memory: MemoryOptions | None = None) -> Plan:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return plan(graph, toy_target(), options=PlanOptions(
            schedule=ScheduleOptions(strategy=strategy), memory=memory or MemoryOptions()))


def replan(p: Plan, memory: MemoryOptions | None = None) -> Plan:
    """The plan of `p`'s graph by `p`'s strategy, under other memory options."""
    return cpu_plan(p.graph, p.summary.strategy, memory)


SMALL = {
    "lenet": dict(batch=4),
    "resnet": dict(batch=2, image=32, width=0.25, depth=18, classes=10),
    "alexnet": dict(batch=2, image=63, width=0.125, classes=10),
    "inception_v3": dict(batch=2, image=75, width=0.125, classes=10),
}


@pytest.fixture(scope="session")
def small_plans() -> dict[str, Plan]:
    return {name: cpu_plan(training(name, "momentum", **params))
            for name, params in SMALL.items()}
