"""fold_conv_biases: which Conv2D -> BiasAdd -> Relu chains become one Conv2D, and that the
reference interpreter gives the same values for every kept tensor before and after (zoo:lenet,
inference and training)."""

import numpy as np
import pytest

import planner.frontend.passes as front_end_passes
from planner.frontend.autodiff import gradients, make_training_graph
from planner.frontend.passes.fold_conv_bias import fold_conv_biases
from planner.graph import GraphBuilder, Optimizer, check_graph
from planner.graph.interpret import init_params, random_feeds, run
from planner.zoo import build
from tests.helpers.folds import assert_folds_into, assert_same_values

LENET = dict(batch=4, image=12)


def _ops(graph):
    return [(n.op, len(n.inputs), n.attrs.get("activation")) for n in graph.nodes]


def _layer(bias=True, relu=True, axis=1, dtype="float32", read_conv=False, read_add=False,
           output_conv=False, output_add=False):
    """x -> Conv2D [-> BiasAdd] [-> Relu] -> Sigmoid, with the asked-for extra readers and
    graph outputs of the intermediate tensors."""
    b = GraphBuilder("layer")
    x, w = b.input("x", (2, 3, 6, 6), dtype), b.param("w", (4, 3, 3, 3), dtype=dtype)
    y = conv = b.op("Conv2D", [x, w], {"pads": [1, 1, 1, 1]}, name="conv")
    outs = []
    if bias:
        shape = (4,) if axis in (1, -3) else (6,)
        y = add = b.op("BiasAdd", [y, b.param("bias", shape, dtype=dtype)], {"axis": axis},
                       name="add")
    if relu:
        y = b.op("Relu", [y], name="relu")
    outs.append(b.op("Sigmoid", [y], name="out"))
    if read_conv:
        outs.append(b.op("Tanh", [conv], name="other"))
    if read_add:
        outs.append(b.op("Tanh", [add], name="other"))
    if output_conv:
        outs.append(conv)
    if output_add:
        outs.append(add)
    return b.build(outputs=outs)


@pytest.mark.parametrize("case,inputs,activation,last", [
    (dict(), ("x", "w", "bias"), "relu", "relu"),
    (dict(relu=False), ("x", "w", "bias"), None, "add"),
    (dict(bias=False), ("x", "w"), "relu", "relu"),
    (dict(axis=-3), ("x", "w", "bias"), "relu", "relu"),     # axis 1 counted from the end
    (dict(read_add=True), ("x", "w", "bias"), None, "add"),   # the Relu stays: add read twice
    (dict(output_add=True), ("x", "w", "bias"), None, "add"),
])
def test_what_folds(case, inputs, activation, last):
    assert_folds_into(_layer(**case), fold_conv_biases, "conv", "Conv2D", inputs, activation,
                      last)


@pytest.mark.parametrize("case", [
    dict(read_conv=True, relu=False),   # the convolution's output is read elsewhere too
    dict(output_conv=True, relu=False),  # ... or is a graph output
    dict(axis=2, relu=False),           # a bias over rows, not channels
    dict(dtype="bfloat16"),             # mixed precision's low convolutions
])
def test_what_is_not_folded(case):
    g = _layer(**case)
    assert fold_conv_biases(g) == g


def test_a_fused_conv2d_differentiates_as_its_parts():
    """Folding comes after autodiff, but a graph written after it (planner graph -o, then
    planner plan --train) differentiates too: a Conv2D that carries its bias and Relu has the
    gradient of the Conv2D, BiasAdd and Relu it replaced."""
    layer = _layer()
    feeds, params = random_feeds(layer, seed=3), init_params(layer, seed=4)
    want = {}
    for g in (layer, fold_conv_biases(layer)):
        training, grads = gradients(g, wrt=["w", "bias"], of=["out"])
        seed = {f"grad/{o}": np.ones(training.tensor(o).shape, np.float32) for o in ["out"]}
        values = run(training, {**feeds, **seed}, params)
        got = {p: values[grads[p]] for p in ("w", "bias")}
        for p in got:
            want.setdefault(p, got[p])
            np.testing.assert_allclose(got[p], want[p], rtol=1e-5, atol=1e-6, err_msg=p)


def test_lenet_forward_folds_every_layer_and_keeps_values():
    forward = build("lenet", **LENET)
    folded = check_graph(fold_conv_biases(forward))
    assert _ops(folded).count(("Conv2D", 3, "relu")) == 2
    assert [n.op for n in folded.nodes].count("BiasAdd") == \
        [n.op for n in forward.nodes].count("BiasAdd") - 2
    assert_same_values(forward, folded)


def test_training_graph_folds_after_autodiff(monkeypatch):
    """make_training_graph folds each convolution layer; the values of every tensor both graphs
    have (the loss, the updated params) equal the unfolded graph's, and the backward ops of the
    BiasAdd and Relu stay."""
    forward = build("lenet", **LENET)
    sgd = Optimizer(kind="sgd", lr=0.1)
    folded = make_training_graph(forward, sgd)
    monkeypatch.setattr(front_end_passes, "fold_conv_biases", lambda g: g)
    plain = make_training_graph(forward, sgd)
    assert _ops(folded).count(("Conv2D", 3, "relu")) == 2
    assert len(folded.nodes) == len(plain.nodes) - 4
    for op in ("BiasAddGrad", "ReluGrad", "Conv2DBackpropFilter"):
        assert [n.op for n in folded.nodes].count(op) == [n.op for n in plain.nodes].count(op)
    check_graph(folded)
    assert_same_values(plain, folded, seeds=(3, 4), fewer=True)


def test_inference_plans_are_folded_and_verify_against_their_graph(tmp_path, capsys):
    """`planner plan` without --train folds the convolution layers; `verify --graph` re-derives
    the same graph from the spec and accepts the fused Conv2Ds."""
    import json

    import planner.cli as cli

    spec, out = "zoo:lenet?batch=2&image=12&loss=false", str(tmp_path / "p.json")
    assert cli.main(["plan", spec, "--target", "knl-7250", "-o", out]) == 0
    nodes = json.load(open(out))["graph"]["nodes"]
    convs = [(len(n["inputs"]), n["attrs"].get("activation")) for n in nodes if n["op"] == "Conv2D"]
    assert convs == [(3, "relu"), (3, "relu")]
    assert cli.main(["verify", out, "--graph", spec]) == 0
    capsys.readouterr()
