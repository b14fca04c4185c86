"""Batched weight gradients (planner/graph/weight_grads.py): the structure of the rewrite, that
it computes the same sum, and that it leaves alone what it must not touch."""

from __future__ import annotations

import math

import numpy as np
import pytest

from planner.graph import GraphBuilder, check_graph
from planner.graph.autodiff import make_training_graph
from planner.graph.interpret import random_feeds, run
from planner.graph.ir import Graph
from planner.graph.optimizer import Optimizer
from planner.graph.weight_grads import batch_weight_gradients
from planner.zoo import build


def gemm_sum(steps: int, *, rows: int = 3, m: int = 4, n: int = 5, reread: bool = False,
             transpose_b: bool = False) -> Graph:
    """sum over t of A_t^T B_t written as reverse mode writes it: MatMuls and one AddN."""
    b = GraphBuilder("sum")
    parts = []
    for t in range(steps):
        a = b.input(f"a{t}", (rows + t, m))
        y = b.input(f"y{t}", (n, rows + t) if transpose_b else (rows + t, n))
        parts.append(b.op_n("MatMul", [a, y], {"transpose_a": True, "transpose_b": transpose_b},
                            name=f"dw{t}", role="grad")[0])
    total = b.op_n("AddN", parts, name="dw/sum", role="grad")[0]
    outputs = [total, *parts[:1]] if reread else [total]
    return b.build(outputs=outputs)


@pytest.mark.parametrize("steps", [2, 3, 5, 9, 10, 35])
def test_same_sum_in_ceil_sqrt_chunks(steps: int) -> None:
    g = gemm_sum(steps)
    fused = check_graph(batch_weight_gradients(g))
    chunks = math.ceil(steps / math.ceil(math.sqrt(steps)))
    assert sum(n.op == "MatMul" for n in fused.nodes) == chunks
    assert sum(n.op == "AddN" for n in fused.nodes) == (chunks > 1)
    assert fused.outputs == g.outputs and fused.tensor("dw/sum") == g.tensor("dw/sum")
    feeds = random_feeds(g, seed=steps)
    np.testing.assert_allclose(run(fused, feeds, {})["dw/sum"], run(g, feeds, {})["dw/sum"],
                               rtol=1e-5, atol=1e-5)


def test_each_chunk_waits_only_for_its_own_steps() -> None:
    fused = batch_weight_gradients(gemm_sum(9))
    first = fused.node_map["dw/sum/gemm0"]
    assert fused.node_map[first.inputs[0]].inputs == ("a0", "a1", "a2")
    assert fused.node_map[first.inputs[1]].inputs == ("y0", "y1", "y2")
    assert fused.node_map["dw/sum"].inputs == ("dw/sum/gemm0", "dw/sum/gemm1", "dw/sum/gemm2")


@pytest.mark.parametrize("graph", [gemm_sum(4, reread=True), gemm_sum(4, transpose_b=True)],
                         ids=["partial-read-elsewhere", "transpose_b"])
def test_left_alone(graph: Graph) -> None:
    assert batch_weight_gradients(graph) == graph


def test_lstm_training_graph_uses_chunked_gemms() -> None:
    g = make_training_graph(build("lstm", batch=2, seq=9, hidden=4, vocab=11),
                            Optimizer(kind="sgd"))
    check_graph(g)
    for layer in (1, 2):
        total = g.node_map[f"grad/layer{layer}/weight/sum"]
        assert total.op == "AddN" and len(total.inputs) == 3
        assert all(g.producer[i].op == "MatMul" for i in total.inputs)
    # No weight-sized partial per step is left.
    assert not any(n.op == "MatMul" and g.tensor(n.outputs[0]).shape == (8, 16)
                   and "/step" in n.name for n in g.nodes)
