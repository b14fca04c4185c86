"""Shared fixtures: a small SMT target and small training graphs."""

from __future__ import annotations

import pytest

from planner.frontend.autodiff import Optimizer, make_training_graph
from planner.target.presets import thread_major_cpus
from planner.target.records import CPU, Target
from planner.zoo import build


def toy_target(cores: int = 8, smt: int = 2, per_group: int = 2) -> Target:
    """A KNL-like machine in miniature: tiles of 2 cores, 2 hardware threads per core."""
    return Target(name=f"toy{cores}", host_memory_bytes=1 << 34,
                  logical_cpus=thread_major_cpus(cores=cores, smt=smt, cores_per_group=per_group),
                  cpu=CPU(model="toy", peak_flops=cores * 1.4e9 * 64, memory_bandwidth=100e9,
                          core_bandwidth=9e9, cache_group_level=2, cache_group_bytes=1 << 20))


@pytest.fixture(scope="session")
def target() -> Target:
    return toy_target()


def training(name: str, **params) -> object:
    return make_training_graph(build(name, **params), Optimizer(kind="sgd"))
