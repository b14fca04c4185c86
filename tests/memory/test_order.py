"""Happens-before queries agree with a brute-force transitive closure on random DAGs."""

from __future__ import annotations

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.memory.order import HappensBefore, plan_edges


@st.composite
def dags(draw) -> tuple[int, list[tuple[int, int]]]:
    n = draw(st.integers(1, 14))
    pairs = [(u, w) for u in range(n) for w in range(u + 1, n)]
    edges = draw(st.lists(st.sampled_from(pairs), max_size=30)) if pairs else []
    return n, edges


@settings(max_examples=60, deadline=None)
@given(dags())
def test_before_is_reachability(dag):
    n, edges = dag
    hb = HappensBefore(n, edges)
    g = nx.DiGraph()
    g.add_nodes_from(range(n))
    g.add_edges_from(edges)
    for u in range(n):
        reach = nx.descendants(g, u)
        for w in range(n):
            assert hb.before(u, w) == (w in reach), (u, w, edges)


def test_a_serial_plan_is_one_chain():
    hb = HappensBefore(5, [(i, i + 1) for i in range(4)])
    assert hb.chains == 1 and hb.before(0, 4) and not hb.before(4, 0)


def test_edges_against_the_order_are_refused():
    with pytest.raises(ValueError, match="2 -> 1"):
        HappensBefore(3, [(2, 1)])


def test_added_edges_answer_from_their_source():
    hb = HappensBefore(3, [])
    assert not hb.before(0, 2)
    hb.add(0, 2)
    assert hb.before(0, 2) and not hb.before(1, 2)


def test_plan_edges_names_to_indices():
    assert sorted(plan_edges(["a", "b", "c"], [("a", "c"), ("a", "b")])) == [(0, 1), (0, 2)]
