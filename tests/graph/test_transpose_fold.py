"""Transposes folded into MatMuls (planner/frontend/passes/transpose_fold.py): attention's head
splits and merges leave the graph, forward and backward, with every value unchanged; Transposes the
GEMMs cannot take (a strided row, another reader, a graph output) stay."""

from __future__ import annotations

import numpy as np
import pytest

import planner.frontend.passes as front_end_passes
from planner.frontend.autodiff import Optimizer, make_training_graph
from planner.frontend.passes.transpose_fold import fold_transposes
from planner.graph import GraphBuilder, check_graph
from planner.graph.interpret import init_params, random_feeds, run
from planner.zoo import build

SPLIT = {"perm": [0, 2, 1, 3]}  # (batch, seq, heads, width) <-> (batch, heads, seq, width)


def attention(batch=2, seq=5, heads=3, width=4):
    """Scores over split heads, softmax, context merged back: the zoo's attention core."""
    b = GraphBuilder("attention")
    shape = (batch, seq, heads, width)
    q, k, v = (b.op("Transpose", [b.input(n, shape)], SPLIT, name=f"{n}/heads") for n in "qkv")
    s = b.op("Softmax", [b.op("MatMul", [q, k], {"transpose_b": True}, name="scores")],
             {"axis": -1}, name="p")
    y = b.op("Transpose", [b.op("MatMul", [s, v], name="context")], SPLIT, name="merge")
    return b.build(outputs=[b.op("Reshape", [y], {"shape": [batch, seq, heads * width]},
                                 name="out")])


def _close(before, after, names):
    feeds = random_feeds(before, seed=1)
    params = init_params(before, seed=1)
    want, got = run(before, feeds, params), run(after, feeds, params)
    for n in names:
        np.testing.assert_allclose(got[n], want[n], rtol=1e-6, atol=1e-6)


def test_attention_loses_every_transpose_and_computes_the_same():
    g = attention()
    folded = check_graph(fold_transposes(g))
    assert [n.op for n in folded.nodes] == ["MatMul", "Softmax", "MatMul", "Reshape"]
    scores, context = folded.node_map["scores"], folded.node_map["context"]
    assert scores.inputs == ("q", "k") and context.inputs == ("p", "v")
    assert scores.attrs == {"perm_a": [0, 2, 1, 3], "perm_b": [0, 2, 1, 3],
                            "transpose_a": False, "transpose_b": True}
    assert context.outputs == ("merge",) and context.attrs["perm_y"] == [0, 2, 1, 3]
    assert folded.tensor("merge") == g.tensor("merge") and "context" not in folded.tensor_map
    _close(g, folded, ["out", "scores"])
    assert fold_transposes(g) == folded  # deterministic; g itself untouched
    assert fold_transposes(folded) is folded


def test_transposes_composed_with_transpose_flags_and_each_other():
    """Two Transposes in a row: the first has a Transpose reader and stays, the second folds
    under transpose_a; a result Transpose undoing the product's own perm_y leaves none."""
    b = GraphBuilder("chain")
    x = b.input("x", (2, 3, 4, 5))
    t1 = b.op("Transpose", [x], {"perm": [0, 1, 3, 2]}, name="t1")         # (2, 3, 5, 4)
    t2 = b.op("Transpose", [t1], SPLIT, name="t2")                        # (2, 5, 3, 4)
    y = b.op("MatMul", [t2, b.input("w", (2, 5, 3, 6))],
             {"transpose_a": True, "perm_y": [0, 2, 1, 3]}, name="mm")  # (2, 4, 5, 6)
    z = b.op("Transpose", [y], SPLIT, name="t3")                          # (2, 5, 4, 6)
    g = b.build(outputs=[b.op("Relu", [z], name="out")])
    folded = check_graph(fold_transposes(g))
    assert [n.op for n in folded.nodes] == ["Transpose", "MatMul", "Relu"]
    mm = folded.node_map["mm"]
    assert mm.inputs == ("t1", "w") and mm.outputs == ("t3",)
    assert mm.attrs == {"perm_a": [0, 2, 1, 3], "transpose_a": True, "transpose_b": False}
    _close(g, folded, ["out"])


def _graph_with(tail):
    """A MatMul of x with itself, then `tail(builder, product)` (returns the outputs)."""
    b = GraphBuilder("g")
    x = b.input("x", (2, 4, 4, 4))
    return b.build(outputs=tail(b, x))


@pytest.mark.parametrize("case", ["row-stride", "rows-outermost", "other-reader",
                                  "graph-output", "result-row-stride", "result-rows-outermost",
                                  "result-read-twice"])
def test_left_alone(case):
    def tail(b, x):
        if case in ("row-stride", "rows-outermost"):
            # the operand's last axis leaves the matrix axes; its rows become the outermost
            # axis (oneDNN's slow matmul: nn.MultiheadAttention's seq-first heads)
            perm = [0, 3, 1, 2] if case == "row-stride" else [2, 0, 1, 3]
            t = b.op("Transpose", [x], {"perm": perm})
            return [b.op("MatMul", [t, t])]
        if case in ("other-reader", "graph-output"):
            t = b.op("Transpose", [x], SPLIT)
            y = b.op("MatMul", [t, t])
            return [y, b.op("Relu", [t])] if case == "other-reader" else [y, t]
        y = b.op("MatMul", [x, x])
        if case.startswith("result-r") and case != "result-read-twice":
            perm = [0, 1, 3, 2] if case == "result-row-stride" else [2, 0, 1, 3]
            return [b.op("Transpose", [y], {"perm": perm})]
        return [b.op("Transpose", [y], SPLIT), b.op("Relu", [y])]

    g = _graph_with(tail)
    assert fold_transposes(g) is g


@pytest.mark.parametrize("model", ["gpt", "bert"])
def test_training_graphs_of_transformers_have_no_transposes(model, monkeypatch):
    """make_training_graph folds the 8 Transposes per layer (4 forward, their 4 gradients);
    every value of the step, the updated parameters included, is the unfolded graph's."""
    forward = build(model, batch=2, seq=6, dim=8, heads=2, layers=2, vocab=7)
    folded = make_training_graph(forward, Optimizer(kind="sgd", lr=0.1))
    monkeypatch.setattr(front_end_passes, "fold_transposes", lambda g: g)
    plain = make_training_graph(forward, Optimizer(kind="sgd", lr=0.1))
    assert sum(n.op == "Transpose" for n in plain.nodes) == 16
    assert not any(n.op == "Transpose" for n in folded.nodes)
    assert len(plain.nodes) - len(folded.nodes) == 16
    feeds, params = random_feeds(plain, seed=2), init_params(plain, seed=2)
    want, got = run(plain, feeds, params), run(folded, feeds, params)
    for t in folded.tensors:
        if t.updates is not None or t.name in folded.outputs:
            np.testing.assert_allclose(got[t.name], want[t.name], rtol=1e-5, atol=1e-6,
                                       err_msg=t.name)


def grouped_attention(batch=2, seq=5, groups=2, heads=3, width=4):
    """Heads in groups, split after the Transpose: (batch, seq, groups x heads, width)
    transposed to (batch, groups x heads, seq, width), then split into (batch, groups, heads,
    seq, width); the context merged back the same way; a projection weight and an MSE loss so
    that the gradients have the mirror images."""
    b = GraphBuilder("grouped")
    x = b.input("x", (batch, seq, groups * heads, width))
    w = b.param("w", (width, width), init="glorot")
    split = [batch, groups, heads, seq, width]
    q = b.op("Reshape", [b.op("Transpose", [b.op("MatMul", [x, w], name="proj")], SPLIT,
                              name="t")], {"shape": split}, name="split")
    p = b.op("Softmax", [b.op("MatMul", [q, q], {"transpose_b": True}, name="scores")],
             {"axis": -1}, name="p")
    c = b.op("Reshape", [b.op("MatMul", [p, q], name="context")],
             {"shape": [batch, groups * heads, seq, width]}, name="merge")
    y = b.op("Transpose", [c], SPLIT, name="back")
    loss = b.op("MSE", [y, b.input("target", (batch, seq, groups * heads, width))], name="loss")
    return b.build(outputs=[loss])


def test_transposes_across_split_and_merge_reshapes_fold(monkeypatch):
    """The Reshape moves to the other side of the Transpose (splitting the Transpose's input,
    or merging the MatMul's permuted result), and the Transpose folds: forward and backward."""
    forward = grouped_attention()
    folded = check_graph(fold_transposes(forward))
    assert not any(n.op == "Transpose" for n in folded.nodes)
    assert folded.node_map["split"].inputs == ("proj",)
    assert folded.tensor("split").shape == (2, 5, 2, 3, 4)
    assert folded.node_map["scores"].attrs["perm_a"] == [0, 2, 3, 1, 4]
    assert folded.node_map["context"].attrs["perm_y"] == [0, 3, 1, 2, 4]
    assert folded.node_map["merge"].outputs == ("back",)
    _close(forward, folded, ["loss", "back"])
    training = make_training_graph(forward, Optimizer(kind="sgd", lr=0.1))
    monkeypatch.setattr(front_end_passes, "fold_transposes", lambda g: g)
    plain = make_training_graph(forward, Optimizer(kind="sgd", lr=0.1))
    assert sum(n.op == "Transpose" for n in plain.nodes) == 4
    # left: the gradient of `t`, between a sum (AddN) and the weight gradient's flattening
    assert [n.name for n in training.nodes if n.op == "Transpose"] == ["grad/t/transpose"]
    feeds, params = random_feeds(plain, seed=4), init_params(plain, seed=4)
    want, got = run(plain, feeds, params), run(training, feeds, params)
    np.testing.assert_allclose(got["update/w"], want["update/w"], rtol=1e-5, atol=1e-6)
