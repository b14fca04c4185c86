"""What every graph fold must keep: each tensor the folded graph still has holds the unfolded
graph's bits (the numpy reference interpreter on the same feeds and parameters)."""

from __future__ import annotations

import numpy as np

from planner.graph.interpret import init_params, random_feeds, run


def assert_same_values(plain, folded, seeds: tuple[int, int] = (1, 2),
                       fewer: bool = False) -> None:
    """`folded`'s tensors are `plain`'s (a subset of them; a proper one with `fewer`: the fold
    dropped some), each bit for bit."""
    feeds, params = random_feeds(plain, seed=seeds[0]), init_params(plain, seed=seeds[1])
    before, after = run(plain, feeds, params), run(folded, feeds, params)
    assert set(after) < set(before) if fewer else set(after) <= set(before)
    for name, value in after.items():
        np.testing.assert_array_equal(value, before[name], err_msg=name)
