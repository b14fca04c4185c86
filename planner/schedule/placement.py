"""What a strategy decides for one op (or one group of ops run as one parallel loop).

A strategy returns placements in execution order; the simulator then times them and the plan
builder turns cores into logical CPU ids. `cores` are physical core indices; `smt` places the
threads on the cores' second hardware threads, beside whatever runs on the first.

Example:
    >>> Placement(nodes=(3,), cores=(0, 1), affinity="compact", seconds=1e-3, start=0.0).threads
    2
"""

from __future__ import annotations

from typing import NamedTuple

from planner.target.records import Affinity


class Placement(NamedTuple):
    """Node indices (several: one parallel loop), cores, and the strategy's own timing guess.

    `seconds` is the run time alone on those cores (no SMT interference); `start` orders
    placements and breaks no rule if wrong: the simulator decides the real times. A named
    tuple, immutable: a list schedule makes one per op start, tens of thousands per plan (a
    frozen dataclass took twice as long to make). `group` is the kind of parallel loop that
    runs several nodes ("group": one signature's ops, "corun": a co-run group; "" for one
    node); the plan names each by its kind and its first node (schedule.cpu.record).
    """

    nodes: tuple[int, ...]
    cores: tuple[int, ...]
    affinity: Affinity
    seconds: float
    start: float
    smt: bool = False
    group: str = ""

    @property
    def threads(self) -> int:
        return len(self.cores)

    @property
    def end(self) -> float:
        return self.start + self.seconds


def in_order(placements: list[Placement]) -> list[Placement]:
    """Execution order: by planned start, then by first node index (topological)."""
    return sorted(placements, key=lambda p: (p.start, p.nodes[0]))
