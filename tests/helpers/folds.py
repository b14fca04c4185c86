"""What every graph fold must keep: each tensor the folded graph still has holds the unfolded
graph's bits (the numpy reference interpreter on the same feeds and parameters); and what a
layer's fold (a bias, a Relu into its Conv2D or MatMul) must make of it."""

from __future__ import annotations

import numpy as np

from planner.graph import check_graph
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


def assert_folds_into(plain, fold, node: str, op: str, inputs: tuple[str, ...],
                      activation: str | None, last: str) -> None:
    """`fold(plain)` makes `node` (an `op`) of `inputs` with `activation` the producer of
    `last`, the chain's last tensor: no BiasAdd left, `node`'s own output gone, the folded node
    before the reader "out" of its output, the same bits, and a second fold a no-op."""
    folded = check_graph(fold(plain))
    made = folded.producer[last]
    assert (made.name, made.op, made.inputs, made.attrs.get("activation")) == \
        (node, op, inputs, activation)
    assert node not in folded.tensor_map and "BiasAdd" not in [n.op for n in folded.nodes]
    # the folded node sits where the chain's last op was: before the reader of its output
    order = [n.name for n in folded.nodes]
    assert order.index(node) < order.index("out")
    assert_same_values(plain, folded)
    assert fold(folded) == folded
