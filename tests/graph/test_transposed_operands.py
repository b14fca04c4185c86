"""Shared transposed GEMM operands copied once (planner/graph/transposed_operands.py): which
GEMMs are rewired, that the graph computes the same, what is left alone, and that only a CPU
training graph (its cores known) gets the copies."""

from __future__ import annotations

import numpy as np
import pytest

from planner.graph import GraphBuilder, check_graph
from planner.graph.autodiff import make_training_graph
from planner.graph.interpret import random_feeds, run
from planner.graph.ir import Graph
from planner.graph.optimizer import Optimizer
from planner.graph.transposed_operands import MAX_ROWS, copy_transposed_operands


def steps(n: int, rows: int = 3, transpose_a: bool = False) -> Graph:
    """n GEMMs h_t = h_{t-1} U^T (h: rows x 4), the last h and a loss-free output."""
    b = GraphBuilder("rnn")
    u = b.param("u", (4, 4), init="glorot")
    h = b.input("h0", (4, rows) if transpose_a else (rows, 4))
    for t in range(n):
        h = b.op("MatMul", [h, u], {"transpose_a": transpose_a and t == 0, "transpose_b": True},
                 name=f"step{t}")
    return b.build(outputs=[h])


def test_readers_share_one_copy_and_compute_the_same() -> None:
    g = steps(4)
    copied = check_graph(copy_transposed_operands(g))
    assert [n.op for n in copied.nodes] == ["Transpose", *["MatMul"] * 4]
    assert all(n.inputs[1] == "u/transposed" and not n.attrs["transpose_b"]
               for n in copied.nodes[1:])
    assert copied.tensor("u/transposed").shape == (4, 4)
    feeds = random_feeds(g, seed=0)
    params = {"u": np.random.default_rng(1).standard_normal((4, 4)).astype(np.float32)}
    want, got = run(g, feeds, params), run(copied, feeds, params)
    np.testing.assert_allclose(got["step3"], want["step3"], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("graph", [steps(1), steps(4, rows=MAX_ROWS + 1)],
                         ids=["one-reader", "tall-a"])
def test_left_alone(graph: Graph) -> None:
    assert copy_transposed_operands(graph) == graph


def test_transpose_a_readers_are_not_counted() -> None:
    copied = copy_transposed_operands(steps(3, transpose_a=True))
    assert copied.node_map["step0"].inputs[1] == "u"  # A^T B^T keeps its view
    assert [copied.node_map[f"step{t}"].inputs[1] for t in (1, 2)] == ["u/transposed"] * 2


def test_only_a_cpu_training_graph_gets_copies() -> None:
    b = GraphBuilder("loop")
    u, y = b.param("u", (4, 4), init="glorot"), b.input("y", (3, 4))
    h = b.input("h0", (3, 4))
    for t in range(3):
        h = b.op("Tanh", [b.op("MatMul", [h, u], {"transpose_b": True}, name=f"step{t}")])
    forward = b.build(outputs=[b.op("MSE", [h, y], name="loss")])
    sgd = Optimizer(kind="sgd")
    assert not any(n.op == "Transpose" for n in make_training_graph(forward, sgd).nodes)
    on_cpu = check_graph(make_training_graph(forward, sgd, cores=1))
    assert [n.name for n in on_cpu.nodes if n.op == "Transpose"] == ["u/transposed"]
    # The gradient GEMMs read u itself, without a transpose.
    assert {n.inputs[1] for n in on_cpu.nodes if n.op == "MatMul" and "grad" in n.name
            and "u" in n.inputs} == {"u"}
