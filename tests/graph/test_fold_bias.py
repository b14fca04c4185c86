"""fold_bias_adds: which BiasAdds and Relus go into their MatMul, and that the reference
interpreter gives the same bits for every kept tensor before and after (zoo:gpt and zoo:mlp,
inference and training; NaN where the unfolded graph has one)."""

import numpy as np
import pytest

import planner.frontend.passes as front_end_passes
from planner.frontend.autodiff import gradients, make_training_graph
from planner.frontend.passes.fold_bias import fold_bias_adds
from planner.graph import GraphBuilder, Optimizer, check_graph
from planner.graph.interpret import init_params, random_feeds, run
from planner.zoo import build
from tests.helpers.folds import assert_folds_into, assert_same_values

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
    assert_same_values(forward, folded)
    assert fold_bias_adds(folded) == folded


def test_training_graph_folds_after_autodiff(monkeypatch):
    """make_training_graph folds the forward biases; the values of every tensor both graphs
    have (the loss, the updated params) equal the unfolded graph's."""
    forward = build("gpt", **GPT)
    sgd = Optimizer(kind="sgd", lr=0.1)
    folded = make_training_graph(forward, sgd)
    monkeypatch.setattr(front_end_passes, "fold_bias_adds", lambda g: g)
    plain = make_training_graph(forward, sgd)
    assert _ops(folded).count(("MatMul", 3)) == 4 and ("BiasAdd", 2) not in _ops(folded)
    assert _ops(folded).count(("BiasAddGrad", 1)) == _ops(plain).count(("BiasAddGrad", 1)) == 4
    check_graph(folded)
    assert_same_values(plain, folded, seeds=(3, 4), fewer=True)


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


# ---- a linear layer's Relu ---------------------------------------------------------------------

MLP = dict(batch=4, in_features=6, hidden=[8, 5], classes=3)


def _acts(graph):
    return [(n.op, len(n.inputs), n.attrs.get("activation")) for n in graph.nodes]


def _layer(bias=True, relu=True, dtype="float32", read_mm=False, read_add=False,
           output_add=False, batched=False):
    """x -> MatMul [-> BiasAdd] [-> Relu] -> Sigmoid, with the asked-for extra reader and
    graph output of the intermediate tensors; `batched`: a (2, 4, 3) x under a (3, 2) w."""
    b = GraphBuilder("layer")
    x = b.input("x", (2, 4, 3) if batched else (4, 3), dtype)
    y = mm = b.op("MatMul", [x, b.param("w", (3, 2), dtype=dtype)], name="fc")
    if bias:
        y = add = b.op("BiasAdd", [y, b.param("bias", (2,), dtype=dtype)], {"axis": -1},
                       name="add")
    if relu:
        y = b.op("Relu", [y], name="relu")
    outs = [b.op("Sigmoid", [y], name="out")]
    if read_mm:
        outs.append(b.op("Tanh", [mm], name="other"))
    if read_add:
        outs.append(b.op("Tanh", [add], name="other"))
    if output_add:
        outs.append(add)
    return b.build(outputs=outs)


@pytest.mark.parametrize("case,inputs,activation,last", [
    (dict(), ("x", "w", "bias"), "relu", "relu"),
    (dict(batched=True), ("x", "w", "bias"), "relu", "relu"),
    (dict(bias=False), ("x", "w"), "relu", "relu"),
    (dict(relu=False), ("x", "w", "bias"), None, "add"),
    (dict(read_add=True), ("x", "w", "bias"), None, "add"),   # the Relu stays: add read twice
    (dict(output_add=True), ("x", "w", "bias"), None, "add"),
])
def test_what_folds_with_a_relu(case, inputs, activation, last):
    assert_folds_into(_layer(**case), fold_bias_adds, "fc", "MatMul", inputs, activation, last)


@pytest.mark.parametrize("case", [
    dict(read_mm=True, bias=False),   # the GEMM's output is read elsewhere too
    dict(dtype="bfloat16"),           # mixed precision's low GEMMs keep their Relu apart
    dict(dtype="bfloat16", bias=False),
])
def test_what_is_not_folded_with_a_relu(case):
    g = _layer(**case)
    assert fold_bias_adds(g) == g


def test_nan_goes_through_the_folded_relu():
    """A NaN weight's column stays NaN through the folded Relu, as through the Relu."""
    g = _layer()
    folded = fold_bias_adds(g)
    feeds, params = random_feeds(g, seed=1), init_params(g, seed=2)
    params["w"] = params["w"].copy()
    params["w"][0, 1] = np.nan
    before, after = run(g, feeds, params), run(folded, feeds, params)
    assert np.isnan(after["relu"][:, 1]).all() and not np.isnan(after["relu"][:, 0]).any()
    np.testing.assert_array_equal(after["relu"], before["relu"])


def test_a_fused_matmul_differentiates_as_its_parts():
    """A graph written after the fold (planner graph -o) differentiates too: the MatMul that
    carries its bias and Relu has the gradient of the MatMul, BiasAdd and Relu it replaced."""
    layer = _layer(batched=True)
    feeds, params = random_feeds(layer, seed=3), init_params(layer, seed=4)
    want = {}
    for g in (layer, fold_bias_adds(layer)):
        training, grads = gradients(g, wrt=["x", "w", "bias"], of=["out"])
        seed = {"grad/out": np.ones(training.tensor("out").shape, np.float32)}
        values = run(training, {**feeds, **seed}, params)
        for p in ("x", "w", "bias"):
            want.setdefault(p, values[grads[p]])
            np.testing.assert_allclose(values[grads[p]], want[p], rtol=1e-5, atol=1e-6,
                                       err_msg=p)


def test_mlp_training_graph_folds_each_hidden_relu(monkeypatch):
    """make_training_graph folds each hidden layer's BiasAdd and Relu into its MatMul (the
    logits' layer takes its bias alone); every kept tensor has the unfolded graph's bits, and
    the ReluGrads read the MatMuls' outputs."""
    forward = build("mlp", **MLP)
    sgd = Optimizer(kind="sgd", lr=0.1)
    folded = make_training_graph(forward, sgd)
    monkeypatch.setattr(front_end_passes, "fold_bias_adds", lambda g: g)
    plain = make_training_graph(forward, sgd)
    assert _acts(folded).count(("MatMul", 3, "relu")) == 2
    assert _acts(folded).count(("MatMul", 3, None)) == 1
    assert len(folded.nodes) == len(plain.nodes) - 5
    for op in ("ReluGrad", "BiasAddGrad"):
        assert [n.op for n in folded.nodes].count(op) == [n.op for n in plain.nodes].count(op)
    relu_grads = [n for n in folded.nodes if n.op == "ReluGrad"]
    assert {folded.producer[n.inputs[1]].op for n in relu_grads} == {"MatMul"}
    check_graph(folded)
    assert_same_values(plain, folded, seeds=(3, 4), fewer=True)
