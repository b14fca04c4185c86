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
from functools import lru_cache

from planner.target.records import Affinity


@lru_cache(maxsize=16)
def _group_of(groups: tuple[tuple[int, ...], ...]) -> dict[int, int]:
    return {c: gi for gi, g in enumerate(groups) for c in g}


def pick_cores(groups: tuple[tuple[int, ...], ...], free: Set[int], k: int,
               affinity: Affinity) -> tuple[int, ...]:
    """k cores out of `free` (sorted ascending); ValueError if fewer than k are free.

    `groups` partition the cores, each ascending (Target.cache_groups). A list schedule calls
    this at every op start, so it walks the free cores once rather than every group."""
    if k > len(free):
        raise ValueError(f"{k} cores asked for, {len(free)} free")
    if k == len(free):
        return tuple(sorted(free))
    group_of = _group_of(groups)
    members: dict[int, list[int]] = {}
    for c in sorted(free):
        gi = group_of[c]
        if gi in members:
            members[gi].append(c)
        else:
            members[gi] = [c]
    # Groups entered `members` in order of their first free core: a stable sort by size alone
    # ranks them by (most free cores, lowest first free core).
    ranked = sorted(members.values(), key=len, reverse=True)
    if affinity == "compact":
        order = [c for g in ranked for c in g]
    else:
        depth = len(ranked[0])
        order = [g[i] for i in range(depth) for g in ranked if i < len(g)]
    return tuple(sorted(order[:k]))
