"""pick_cores against the rule written the obvious way."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from planner.schedule.cores import pick_cores

GROUPS = ((0, 1, 2), (3, 4), (5, 6, 7, 8), (9,), (10, 11, 12, 13, 14, 15), (16, 17))


def reference(groups, free, k, affinity):
    # Groups ranked by most free cores, then lowest first free core; compact takes whole
    # groups in that order, spread one core per group in turn; the k taken, ascending.
    by_group = [[c for c in g if c in free] for g in groups]
    ranked = sorted((g for g in by_group if g), key=lambda g: (-len(g), g[0]))
    if affinity == "compact":
        order = [c for g in ranked for c in g]
    else:
        order = [g[i] for i in range(max(map(len, ranked))) for g in ranked if i < len(g)]
    return tuple(sorted(order[:k]))


@settings(max_examples=300, deadline=None)
@given(st.sets(st.integers(0, 17), min_size=1), st.integers(1, 18),
       st.sampled_from(["compact", "spread"]))
def test_pick_cores_follows_the_rule(free, k, affinity):
    k = min(k, len(free))
    assert pick_cores(GROUPS, free, k, affinity) == reference(GROUPS, free, k, affinity)
