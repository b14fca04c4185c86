"""The uniform baseline: every op with `intra` threads, `inter` ops at a time (TensorFlow).

TensorFlow's recommended setting (seed 002, Table I's baseline) is intra = physical cores and
inter = 1: ops run one after another, each on every core. With inter = M, M lanes of `intra`
cores each take ready ops in graph order (TensorFlow's FIFO queue). With `min_team_seconds`,
ops too small to pay for a team run on one thread, as PyTorch's intra-op loops run inline
below a grain of 32768 elements: every team op is a fork and a join, and on a machine shared
with other processes a join waits for a descheduled partner's next time slice (milliseconds;
bench/RESULTS.md, issue 25). `grid_pairs` lists the
settings the seed's "manual optimization" tries.

Example:
    >>> grid_pairs(68)[:4]
    [(68, 1), (34, 1), (34, 2), (17, 1)]
"""

from __future__ import annotations

from collections.abc import Sequence

from planner.schedule.costs import OpCosts
from planner.schedule.engine import Machine, list_schedule
from planner.schedule.placement import Placement

# Lanes the grid tries at most (TensorFlow's inter-op pools are small in practice).
MAX_INTER = 8


def uniform(costs: OpCosts, preds: Sequence[Sequence[int]],
            groups: tuple[tuple[int, ...], ...], intra: int, inter: int,
            min_team_seconds: float = 0.0) -> list[Placement]:
    """Placements of the uniform strategy: lanes of `intra` consecutive cores (compact); an op
    predicted to take less than `min_team_seconds` on one thread runs on its lane's first core
    alone (the lane still runs one op at a time)."""
    cores = [c for g in groups for c in g]
    if intra * inter > len(cores):
        raise ValueError(f"intra {intra} x inter {inter} exceeds {len(cores)} cores")
    lanes = [tuple(sorted(cores[j * intra:(j + 1) * intra])) for j in range(inter)]

    def decide(now: float, ready: list[int], machine: Machine) -> list[Placement]:
        started = []
        taken = 0  # FIFO: ready is in graph order; the first `taken` of it start now
        for lane in lanes:
            if taken == len(ready):
                break
            if machine.free.issuperset(lane):
                i = ready[taken]
                taken += 1
                alone = intra > 1 and costs.time(i, 1) < min_team_seconds
                k = 1 if alone else intra
                started.append(machine.start((i,), k, "compact", costs.time(i, k), now,
                                             cores=lane[:k]))
        return started

    return list_schedule(preds, Machine(groups, smt=False), decide)


def grid_pairs(cores: int) -> list[tuple[int, int]]:
    """(intra, inter) pairs of the grid: intra = cores / 1, 2, 4, ... and every inter that fits."""
    pairs = []
    intra = cores
    while intra >= 1:
        for inter in range(1, min(cores // intra, MAX_INTER) + 1):
            pairs.append((intra, inter))
        if intra == 1:
            break
        intra //= 2
    return pairs
