"""The uniform baseline: every op with `intra` threads, `inter` ops at a time (TensorFlow).

TensorFlow's recommended setting (seed 002, Table I's baseline) is intra = physical cores and
inter = 1: ops run one after another, each on every core. With inter = M, M lanes of `intra`
cores each take ready ops in graph order (TensorFlow's FIFO queue). With `min_team_seconds`, ops
too small to pay for a team run on one thread, as PyTorch's intra-op loops run inline below a
grain of 32768 elements: every team op is a fork and a join, and on a machine shared with other
processes a join waits for a descheduled partner's next time slice (milliseconds;
bench/results/2026-11-23-transformer-issue25.md). With it set, an op the cost model gives no
shorter time on the team than on one thread runs alone too, whatever its size: with an in-step
profiled table that is an op whose team was measured no faster inside the step (a transformer's
layer-norm gradients and element-wise ops on two cores). `grid_pairs` lists the settings the
seed's "manual optimization" tries.

Example:
    >>> grid_pairs(68)[:4]
    [(68, 1), (34, 1), (34, 2), (17, 1)]
"""

from __future__ import annotations

from collections.abc import Sequence

from planner.schedule.bound import bottom_levels
from planner.schedule.costs import OpCosts
from planner.schedule.engine import Machine, list_schedule
from planner.schedule.placement import Placement

# Lanes the grid tries at most (TensorFlow's inter-op pools are small in practice).
MAX_INTER = 8


def uniform(costs: OpCosts, preds: Sequence[Sequence[int]],
            groups: tuple[tuple[int, ...], ...], intra: int, inter: int,
            min_team_seconds: float = 0.0) -> list[Placement]:
    """Placements of the uniform strategy: lanes of `intra` consecutive cores (compact); with
    `min_team_seconds` set, an op predicted to take less than it on one thread, or no less on
    `intra` threads than on one, runs on its lane's first core alone (the lane still runs one
    op at a time)."""
    cores = [c for g in groups for c in g]
    if intra * inter > len(cores):
        raise ValueError(f"intra {intra} x inter {inter} exceeds {len(cores)} cores")
    lanes = [tuple(sorted(cores[j * intra:(j + 1) * intra])) for j in range(inter)]
    return list_schedule(preds, Machine(groups, smt=False),
                         Lanes(costs, lanes, intra, min_team_seconds))


class Lanes:
    """uniform's policy: each free lane runs the first ready op (graph order)."""

    def __init__(self, costs: OpCosts, lanes: list[tuple[int, ...]], intra: int,
                 min_team_seconds: float) -> None:
        self.costs, self.lanes, self.intra = costs, lanes, intra
        self.min_team_seconds = min_team_seconds

    def decide(self, now: float, ready: list[int], machine: Machine) -> list[Placement]:
        """The ready ops started now, one on each free lane."""
        costs, intra = self.costs, self.intra
        started = []
        taken = 0  # FIFO: ready is in graph order; the first `taken` of it start now
        for lane in self.lanes:
            if taken == len(ready):
                break
            if machine.all_free(lane):
                i = ready[taken]
                taken += 1
                one = costs.time(i, 1)
                alone = intra > 1 and self.min_team_seconds > 0 and (
                    one < self.min_team_seconds or one <= costs.time(i, intra))
                k = 1 if alone else intra
                started.append(machine.start((i,), k, "compact", costs.time(i, k), now,
                                             cores=lane[:k]))
        return started


def uniform_floor(costs: OpCosts, preds: Sequence[Sequence[int]], intra: int,
                  inter: int) -> float:
    """A lower bound on the step of `uniform(costs, preds, groups, intra, inter)` (no
    min_team_seconds: every op on its lane's `intra` cores), without list-scheduling it: some
    lane runs at least its share of the ops' time one after another, and the longest path at
    those times runs in order (as simulate.step_floor; less simulate.sure_floor's margin).

    >>> import numpy as np
    >>> c = OpCosts(times=(np.array([2.0, 1.0]),) * 3, affinity=(("compact",) * 2,) * 3,
    ...             keys=("a",) * 3, analytical=())
    >>> uniform_floor(c, ((), (0,), ()), 1, 2), uniform_floor(c, ((), (0,), ()), 2, 1)
    (4.0, 3.0)
    """
    at = [t[intra - 1] for t in costs.time_lists]
    return max(sum(at) / inter, max(bottom_levels(at, preds), default=0.0))


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
