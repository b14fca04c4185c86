"""evaluation_graph: the forward part of a training graph in inference mode."""

from __future__ import annotations

import numpy as np
import pytest

from planner.frontend.prepare import GraphOptions, prepare
from planner.graph.evaluation import evaluation_graph
from planner.graph.interpret import init_params, random_feeds, run
from planner.graph.optimizer import Optimizer
from planner.graph.validate import GraphError
from tests.graph.evaluation_cases import bn_dropout_net


def training(graph, kind: str = "adam"):
    return prepare(graph, GraphOptions(optimizer=Optimizer(kind=kind)))


def test_batchnorm_reads_running_statistics_and_dropout_is_the_identity():
    forward = bn_dropout_net()
    e = evaluation_graph(training(forward))
    assert e.kind == "inference" and e.outputs == ("fc2", "loss")
    assert [n.op for n in e.nodes] == ["MatMul", "BatchNorm", "Relu", "MatMul",
                                       "SoftmaxCrossEntropy"]
    bn = e.node_map["bn"]
    assert bn.attrs["training"] is False and len(bn.outputs) == 1
    assert e.node_map["fc2"].inputs[0] == "relu"
    # No gradient, update, optimizer or step-count tensor; persistent tensors keep their names.
    assert {t.role for t in e.tensors} <= {"input", "label", "param", "state", "activation"}
    assert all(t.updates is None for t in e.tensors)
    assert {t.name for t in e.by_role("param", "state")} == {
        "w1", "w2", "bn/scale", "bn/bias", "bn/running_mean", "bn/running_var"}
    # Its values: the reference interpreter's inference form, by hand.
    rng = np.random.default_rng(0)
    params = init_params(e, seed=1)
    params["bn/running_mean"] = rng.standard_normal(4).astype(np.float32)
    params["bn/running_var"] = rng.uniform(0.5, 2.0, 4).astype(np.float32)
    feeds = random_feeds(e, seed=2)
    got = run(e, feeds, params, keep="outputs")
    h = feeds["x"] @ params["w1"]
    h = (h - params["bn/running_mean"]) / np.sqrt(params["bn/running_var"] + 1e-5)
    h = np.maximum(h * params["bn/scale"] + params["bn/bias"], 0) @ params["w2"]
    np.testing.assert_allclose(got["fc2"], h, rtol=1e-5, atol=1e-5)


def test_without_batchnorm_or_dropout_it_is_the_forward_graph():
    forward = prepare("zoo:mlp?batch=2&hidden=4&in_features=3&classes=2")
    e = evaluation_graph(training(forward, "sgd"))
    # The same nodes and outputs; the same tensors (the training graph lists them in its
    # own order).
    assert (e.kind, e.nodes, e.outputs) == (forward.kind, forward.nodes, forward.outputs)
    assert sorted(e.tensors, key=lambda t: t.name) == sorted(forward.tensors,
                                                             key=lambda t: t.name)


def test_it_is_refused_for_an_inference_graph():
    with pytest.raises(GraphError, match="only made from a training graph"):
        evaluation_graph(bn_dropout_net())


def test_it_is_deterministic_and_keeps_kept_tensors():
    g = prepare(bn_dropout_net(), GraphOptions(optimizer=Optimizer(kind="sgd"), keep=("relu",)))
    assert evaluation_graph(g).to_json() == evaluation_graph(g).to_json()
    assert evaluation_graph(g).outputs == ("fc2", "loss", "relu")


def test_an_output_only_training_writes_is_left_out():
    g = prepare(bn_dropout_net(), GraphOptions(optimizer=Optimizer(kind="sgd"),
                                               keep=("bn:1", "bn:3")))
    stats = [o for o in g.outputs if g.tensor(o).updates == "bn/running_mean"]
    assert stats, g.outputs
    assert evaluation_graph(g).outputs == ("fc2", "loss")


def test_a_node_after_the_backward_pass_is_left_out():
    # A forward-phase node (it writes an activation) reading a gradient, as training may run.
    g = training(bn_dropout_net(), "sgd")
    grad = next(t.name for t in g.tensors if t.role == "grad" and t.shape == (5, 4))
    nodes = (*g.nodes, g.nodes[0].model_copy(update={"name": "late", "op": "Abs",
                                                      "inputs": (grad,), "outputs": ("late",),
                                                      "attrs": {}}))
    tensors = (*g.tensors, g.tensor(grad).model_copy(update={"name": "late",
                                                             "role": "activation"}))
    g = g.model_copy(update={"nodes": nodes, "tensors": tensors, "outputs": (*g.outputs, "late")})
    e = evaluation_graph(g)
    assert "late" not in e.node_map and e.outputs == ("fc2", "loss")
