"""ReduceMax and ReduceMin of computed tensors (rules_composite.py: one MaxPool window over the
reduced axes): values equal onnx's ReferenceEvaluator exactly (a max is exact in float32), and
a training step's gradient goes to the maximal element, as torch.amax's does when there are no
ties. The onnx node conformance cases themselves run in test_onnx_node_conformance.py and,
through the executor, tests/codegen/test_onnx_node_conformance.py."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from planner.frontend.autodiff import make_training_graph
from planner.frontend.loss import attach_loss
from planner.graph import Optimizer, init_params
from planner.graph.interpret import train_step
from planner.importers import import_onnx
from tests.importers.onnx_models import check_against_onnx, make_model, rand

node = helper.make_node
SHAPE = (2, 3, 4, 5)


def _model(op: str, axes: list[int] | None, **attrs):
    """y = op(x * w): the reduced tensor is computed, not a constant the importer folds."""
    inputs = ["p"] + (["axes"] if axes is not None else [])
    inits = {"w": rand(*SHAPE, seed=1)}
    if axes is not None:
        inits["axes"] = np.array(axes, dtype=np.int64)
    return make_model([node("Mul", ["x", "w"], ["p"]), node(op, inputs, ["y"], **attrs)],
                      {"x": rand(*SHAPE)}, ["y"], inits, opset=18)


CASES = [
    ([1, 3], {"keepdims": 1}),
    ([-1], {"keepdims": 0}),
    ([0, 2], {"keepdims": 0}),
    (None, {"keepdims": 0}),
    (None, {"keepdims": 1}),
    ([], {"noop_with_empty_axes": 1}),
]


@pytest.mark.parametrize("op", ["ReduceMax", "ReduceMin"])
@pytest.mark.parametrize("axes,attrs", CASES, ids=[f"{a}-{b}" for a, b in CASES])
def test_matches_onnx_reference(op, axes, attrs):
    graph = check_against_onnx(_model(op, axes, **attrs), {"x": rand(*SHAPE)}, rtol=0.0)
    ops = {n.op for n in graph.nodes}
    assert ("MaxPool" in ops) == (attrs.get("noop_with_empty_axes") != 1)


def test_gradient_goes_to_the_maximum_as_torch_amax():
    torch = pytest.importorskip("torch")
    imported = import_onnx(_model("ReduceMax", [1, 3], keepdims=0))
    lr = 0.5
    graph = make_training_graph(attach_loss(imported.graph, "mse"), Optimizer(kind="sgd", lr=lr))
    state = {**init_params(graph), **imported.params()}
    x, labels = rand(*SHAPE, seed=2), rand(2, 4, seed=3)
    _, new = train_step(graph, {"x": x, "targets": labels}, state)
    w = torch.tensor(state["w"], dtype=torch.float64, requires_grad=True)
    y = torch.amax(torch.tensor(x, dtype=torch.float64) * w, dim=(1, 3))
    torch.nn.functional.mse_loss(y, torch.tensor(labels, dtype=torch.float64)).backward()
    want = (w - lr * w.grad).detach().numpy()
    np.testing.assert_allclose(new["w"], want, rtol=1e-6, atol=1e-7)
    assert (new["w"] != state["w"]).sum() == 8  # one maximal element per (n, h)
