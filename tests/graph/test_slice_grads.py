"""Joined slice gradients (planner/frontend/passes/slice_grads.py): a sum of SliceGrads that tile
one axis becomes a Concat with the same value, what does not tile is left alone, and a param read in
slices gets the gradient of the same computation written without slices."""

from __future__ import annotations

import numpy as np
import pytest

from planner.frontend.autodiff import gradients
from planner.frontend.passes.slice_grads import join_slice_gradients
from planner.graph import GraphBuilder, check_graph
from planner.graph.interpret import init_params, random_feeds, run
from planner.ir.graph import Graph

SHAPE = (3, 6, 2)


def slice_sum(pieces: list[tuple[int, int]], *, axis: int = 1, step: int = 1,
              reread: bool = False, second_cut: bool = False) -> Graph:
    """dx = sum of SliceGrad(dy_k) of x[..., first:end:step, ...] on `axis`, as reverse mode
    writes it: one SliceGrad per piece and an AddN."""
    b = GraphBuilder("pieces")
    parts = []
    for k, (first, end) in enumerate(pieces):
        attrs = {"starts": [first], "ends": [end], "axes": [axis], "steps": [step],
                 "input_shape": list(SHAPE)}
        if second_cut:
            attrs.update(starts=[first, 0], ends=[end, 1], axes=[axis, 2], steps=[step, 1])
        shape = list(SHAPE)
        shape[axis] = len(range(first, end, step))
        if second_cut:
            shape[2] = 1
        dy = b.input(f"dy{k}", shape)
        parts.append(b.op_n("SliceGrad", [dy], attrs, name=f"dx{k}", role="grad")[0])
    total = b.op_n("AddN", parts, name="dx/sum", role="grad")[0]
    return b.build(outputs=[total, *parts[:1]] if reread else [total])


@pytest.mark.parametrize("axis", [0, 1, 2])
def test_tiles_become_one_concat_of_the_same_value(axis: int) -> None:
    n = SHAPE[axis]
    pieces = [(1, n), (0, 1)] if n < 6 else [(4, 6), (0, 1), (1, 4)]  # out of order on purpose
    g = slice_sum(pieces, axis=axis)
    joined = check_graph(join_slice_gradients(g))
    assert [(x.op, x.attrs) for x in joined.nodes] == [("Concat", {"axis": axis})]
    assert joined.outputs == g.outputs and joined.tensor("dx/sum") == g.tensor("dx/sum")
    assert not any(t.name.startswith("dx") and t.name != "dx/sum" for t in joined.tensors)
    feeds = random_feeds(g, seed=axis)
    # Each element is one piece's value plus zeros: the same bits either way.
    np.testing.assert_array_equal(run(joined, feeds, {})["dx/sum"], run(g, feeds, {})["dx/sum"])


@pytest.mark.parametrize("graph", [
    slice_sum([(0, 3), (2, 6)]),                 # overlapping pieces
    slice_sum([(0, 2), (3, 6)]),                 # a gap
    slice_sum([(0, 3), (3, 6)], reread=True),    # a piece read elsewhere
    slice_sum([(0, 6, ), (1, 6)], step=2),       # strided pieces
    slice_sum([(0, 3), (3, 6)], second_cut=True),  # pieces cut on two axes
], ids=["overlap", "gap", "reread", "strided", "two-axes"])
def test_left_alone(graph: Graph) -> None:
    assert join_slice_gradients(graph) == graph


def test_a_param_read_in_slices_gets_the_unsliced_gradient() -> None:
    """x * c computed piecewise (three Slices, Concat) and in one Mul: the same dL/dx."""
    def model(sliced: bool) -> Graph:
        b = GraphBuilder("pieces")
        x, c, t = b.param("x", (5, 4), init="glorot"), b.input("c", (5, 4)), b.input("t", (5, 4))
        if sliced:
            parts = [b.op("Mul", [b.op("Slice", [x], {"starts": [s], "ends": [e], "axes": [0]},
                                       name=f"x{s}"),
                                  b.op("Slice", [c], {"starts": [s], "ends": [e], "axes": [0]},
                                       name=f"c{s}")], name=f"y{s}")
                     for s, e in ((0, 1), (1, 3), (3, 5))]
            y = b.op("Concat", parts, {"axis": 0})
        else:
            y = b.op("Mul", [x, c])
        return b.build(outputs=[b.op("MSE", [y, t], name="loss")])

    sliced, grads = gradients(model(True), wrt=["x"])
    assert not any(n.op in ("SliceGrad", "AddN") for n in sliced.nodes)
    check_graph(sliced)
    plain, plain_grads = gradients(model(False), wrt=["x"])
    feeds, params = random_feeds(plain, seed=3), init_params(plain, seed=3)
    np.testing.assert_allclose(run(sliced, feeds, params)[grads["x"]],
                               run(plain, feeds, params)[plain_grads["x"]], rtol=1e-6, atol=1e-7)
