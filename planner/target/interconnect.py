"""The link between data-parallel ranks, alpha-beta: per preset, estimates until `planner
profile --all-reduce N` measures the process group (planner.costs.link).

Example:
    >>> interconnect_of = interconnect
    >>> from planner.target import preset
    >>> interconnect_of(preset("xeon-8180")).bandwidth
    12500000000.0
"""

from __future__ import annotations

from pydantic import Field

from planner.records import Record
from planner.target.records import Target


class Interconnect(Record):
    """The link between ranks, alpha-beta: `latency_seconds` per message, `bandwidth` in
    bytes/s, and where the numbers come from."""

    bandwidth: float = Field(gt=0)
    latency_seconds: float = Field(ge=0)
    source: str = ""


# Per preset. Estimates until `planner profile` measures the process group: gloo over
# loopback TCP between processes of one host (the "host" target and any unknown CPU target),
# 100 Gb/s InfiniBand-class links between the presets' cluster nodes.
_LOOPBACK = Interconnect(bandwidth=2e9, latency_seconds=50e-6,
                         source="estimate: gloo over loopback TCP on one host")
_CLUSTER = Interconnect(bandwidth=12.5e9, latency_seconds=5e-6,
                        source="estimate: 100 Gb/s InfiniBand between nodes")
INTERCONNECTS: dict[str, Interconnect] = {"knl-7250": _CLUSTER, "xeon-8180": _CLUSTER}


def interconnect(target: Target) -> Interconnect:
    """The target's link between ranks (loopback on one host unless its preset says more)."""
    return INTERCONNECTS.get(target.name, _LOOPBACK)
