"""Targets the tests plan for besides the presets (a helper module, not a test file)."""

from __future__ import annotations

from planner.target.presets import thread_major_cpus
from planner.target.records import CPU, Target


def two_cores() -> Target:
    """A 2-core CPU without SMT, like the development and CI machines."""
    return Target(name="two", host_memory_bytes=1 << 33,
                  logical_cpus=thread_major_cpus(cores=2, smt=1, cores_per_group=1),
                  cpu=CPU(model="two", peak_flops=2 * 1.4e9 * 32, memory_bandwidth=20e9,
                          core_bandwidth=10e9, cache_group_level=2, cache_group_bytes=1 << 20))
