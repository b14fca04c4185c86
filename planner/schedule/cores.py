"""Concrete cores for an op: which physical cores, honouring the target's cache groups.

compact fills the cache groups with the most free cores first (a KNL tile's two cores share its
L2); spread takes one free core per group in turn. Both prefer low indices, so equal inputs give
equal placements.

    groups      [0 1] [2 3] [4 5]        free = {1, 2, 3, 4, 5}
    compact 3   -> 2 3 4                 (whole free tiles first)
    spread 3    -> 2 4 1                 (one per tile, fullest tiles first)

Example:
    >>> pick_cores(((0, 1), (2, 3), (4, 5)), {1, 2, 3, 4, 5}, 3, "compact")
    (2, 3, 4)
    >>> pick_cores(((0, 1), (2, 3), (4, 5)), {1, 2, 3, 4, 5}, 3, "spread")
    (1, 2, 4)
"""

from __future__ import annotations

from collections.abc import Set

from planner.target.records import Affinity


def pick_cores(groups: tuple[tuple[int, ...], ...], free: Set[int], k: int,
               affinity: Affinity) -> tuple[int, ...]:
    """k cores out of `free` (sorted ascending); ValueError if fewer than k are free."""
    if k > len(free):
        raise ValueError(f"{k} cores asked for, {len(free)} free")
    by_group = [[c for c in g if c in free] for g in groups]
    ranked = sorted((g for g in by_group if g), key=lambda g: (-len(g), g[0]))
    if affinity == "compact":
        order = [c for g in ranked for c in g]
    else:
        depth = max((len(g) for g in ranked), default=0)
        order = [g[i] for i in range(depth) for g in ranked if i < len(g)]
    return tuple(sorted(order[:k]))
