"""fold_bias_adds: which BiasAdds go into their MatMul, and that the reference interpreter gives
the same bits for every kept tensor before and after (zoo:gpt, inference and training)."""

import numpy as np
import pytest

import planner.graph.autodiff as autodiff
from planner.graph import GraphBuilder, Optimizer, check_graph, make_training_graph
from planner.graph.fold_bias import fold_bias_adds
from planner.graph.interpret import init_params, random_feeds, run
from planner.zoo import build

GPT = dict(batch=2, seq=8, dim=16, heads=2, layers=1, vocab=32)


def _ops(graph):
    return [(n.op, len(n.inputs)) for n in graph.nodes]


def test_gpt_forward_folds_every_linear_bias_and_keeps_values():
    forward = build("gpt", **GPT)
    folded = fold_bias_adds(forward)
    check_graph(folded)
    biases = _ops(forward).count(("BiasAdd", 2))
    assert biases == 4 * GPT["layers"]  # qkv, proj, fc, out
    assert ("BiasAdd", 2) not in _ops(folded)
    assert _ops(folded).count(("MatMul", 3)) == biases
    assert len(folded.nodes) == len(forward.nodes) - biases
    feeds, params = random_feeds(forward, seed=1), init_params(forward, seed=2)
    before = run(forward, feeds, params)
    after = run(folded, feeds, params)
    for name, value in after.items():
        assert np.array_equal(value, before[name]), name
    assert fold_bias_adds(folded) == folded


def test_training_graph_folds_after_autodiff(monkeypatch):
    """make_training_graph folds the forward biases; the values of every tensor both graphs
    have (the loss, the updated params) equal the unfolded graph's."""
    forward = build("gpt", **GPT)
    sgd = Optimizer(kind="sgd", lr=0.1)
    folded = make_training_graph(forward, sgd)
    monkeypatch.setattr(autodiff, "fold_bias_adds", lambda g: g)
    plain = make_training_graph(forward, sgd)
    assert _ops(folded).count(("MatMul", 3)) == 4 and ("BiasAdd", 2) not in _ops(folded)
    assert _ops(folded).count(("BiasAddGrad", 1)) == _ops(plain).count(("BiasAddGrad", 1)) == 4
    check_graph(folded)
    feeds, params = random_feeds(plain, seed=3), init_params(plain, seed=4)
    before, after = run(plain, feeds, params), run(folded, feeds, params)
    assert set(after) < set(before)
    for name, value in after.items():
        assert np.array_equal(value, before[name]), name


def _linear(axis=-1, bias_shape=(2,), dtype="float32", read_twice=False, output=False):
    b = GraphBuilder("linear")
    x, w = b.input("x", (4, 3), dtype), b.param("w", (3, 2), dtype=dtype)
    bias = b.param("bias", bias_shape, dtype=dtype)
    mm = b.op("MatMul", [x, w], name="fc")
    y = b.op("BiasAdd", [mm, bias], {"axis": axis}, name="add")
    outs = [y]
    if read_twice:
        outs.append(b.op("Relu", [mm], name="relu"))
    if output:
        outs.append(mm)
    return b.build(outputs=outs)


@pytest.mark.parametrize("case", [
    dict(axis=0, bias_shape=(4,)),            # not the last axis
    dict(read_twice=True),                    # the GEMM's output is read elsewhere too
    dict(output=True),                        # ... or is a graph output
    dict(dtype="bfloat16"),                   # mixed precision's low GEMMs
])
def test_what_is_not_folded(case):
    g = _linear(**case)
    assert fold_bias_adds(g) == g


def test_axis_one_of_a_matrix_is_its_last_axis():
    g = fold_bias_adds(_linear(axis=1))
    assert [(n.op, n.inputs, n.outputs) for n in g.nodes] == [
        ("MatMul", ("x", "w", "bias"), ("add",))]
    assert "fc" not in g.tensor_map


def test_inference_plans_are_folded_and_verify_against_their_graph(tmp_path, capsys):
    """`planner plan` without --train folds the forward graph; `verify --graph` takes the same
    graph file as the plan was made from."""
    import json

    import planner.cli as cli

    spec, out = "zoo:mlp?batch=2&in_features=3&hidden=4&classes=2", str(tmp_path / "p.json")
    assert cli.main(["plan", spec, "--target", "knl-7250", "-o", out]) == 0
    ops = [(n["op"], len(n["inputs"])) for n in json.load(open(out))["graph"]["nodes"]]
    assert ("MatMul", 3) in ops and ("BiasAdd", 2) not in ops
    assert cli.main(["verify", out, "--graph", spec]) == 0
    capsys.readouterr()
