"""What every fold pass's graph-level tests check (planner/graph/fold_*.py)."""

from __future__ import annotations

import numpy as np

from planner.graph.interpret import init_params, random_feeds, run
from planner.ir.graph import Graph


def assert_folded_computes_the_same(graph: Graph, folded: Graph) -> None:
    """The numpy reference run of `folded` (a fold pass's `graph`) gives every tensor it
    computes the values `graph`'s run gives it; `graph` computes more (the fold's intermediate
    tensors)."""
    state, feeds = init_params(graph, seed=0), random_feeds(graph, seed=1)
    apart, together = run(graph, feeds, state), run(folded, feeds, state)
    assert set(together) < set(apart)
    for name, value in together.items():
        np.testing.assert_array_equal(value, apart[name], err_msg=name)
