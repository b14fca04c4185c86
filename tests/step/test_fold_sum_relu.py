"""The residual sums' Relu fold (planner/step/fold_sum_relu.py): which pairs fold, where the
folded op lands, and that the numpy reference computes the same values folded or not."""

from __future__ import annotations

import numpy as np
import pytest

from planner.frontend.autodiff import make_training_graph
from planner.frontend.options import GraphOptions
from planner.frontend.prepare import prepare
from planner.graph.builder import GraphBuilder
from planner.graph.optimizer import Optimizer
from planner.ops import TensorType, get_op
from planner.ops.base import OpError
from planner.step.fold_norm_relu import fold_norm_relus
from planner.step.fold_sum_relu import fold_sum_relus
from planner.zoo.layers import conv2d, head, relu
from tests.helpers.folds import assert_same_values

SGD = Optimizer(kind="sgd", lr=0.1, momentum=0.9)


def _block(shortcut_shape=(2, 4, 5, 5)):
    """conv + relu -> conv, plus a shortcut, -> relu -> head: the first relu's output read by
    the second convolution and the sum (its gradient an AddN of two)."""
    b = GraphBuilder("block")
    x = b.input("x", (2, 4, 5, 5))
    h = relu(b, conv2d(b, x, 4, 3, pad=1, name="c0"), name="r0")
    y = conv2d(b, h, 4, 3, pad=1, name="c1")
    s = h if shortcut_shape == (2, 4, 5, 5) else b.param("s", shortcut_shape, init="zeros")
    y = relu(b, b.op("Add", [y, s], name="add"), name="r1")
    return b.build(head(b, b.op("Flatten", [y], {"axis": 1}), 3, True))


def _ops(graph):
    return [(n.op, n.attrs.get("activation")) for n in graph.nodes
            if n.op in ("Add", "AddN", "Relu", "ReluGrad")]


def test_a_residual_block_folds_its_sum_and_its_gradient_in_place():
    g = make_training_graph(_block(), SGD)
    folded = fold_sum_relus(g)
    # (c0's Relu is the convolution's own; r1's gradient reads the head's alone: no AddN)
    assert _ops(folded) == [("Add", "relu"), ("ReluGrad", None), ("AddN", "relu")]
    add = folded.node_map["add"]
    # the Add writes the Relu's output, in the Relu's place
    assert add.outputs == g.node_map["r1"].outputs
    assert [n.name for n in folded.nodes].index("add") == \
        [n.name for n in g.nodes].index("r1") - 1
    # the AddN reads the Relu's output r last and writes the ReluGrad's output
    (addn,) = (n for n in folded.nodes if n.op == "AddN")
    relu_grad = next(n for n in g.nodes if n.op == "ReluGrad" and n.inputs[1] == "r0")
    assert addn.inputs[-1] == "r0" and addn.outputs == relu_grad.outputs
    assert fold_sum_relus(folded) is folded


def test_the_folded_step_computes_what_the_ops_apart_compute():
    g = make_training_graph(_block(), SGD)
    assert_same_values(g, fold_sum_relus(g), fewer=True)


def test_pairs_that_do_not_fold_stay_apart():
    # a broadcast shortcut: the CPU sum loops add operands of one size
    broadcast = make_training_graph(_block(shortcut_shape=(4, 1, 1)), SGD)
    assert ("Add", "relu") not in _ops(fold_sum_relus(broadcast))
    # the sum is a graph output, or read by another op as well
    g = make_training_graph(_block(), SGD)
    kept = g.model_copy(update={"outputs": (*g.outputs, g.node_map["add"].outputs[0])})
    assert ("Add", "relu") not in _ops(fold_sum_relus(kept))
    # bfloat16 (mixed precision's images stay apart, as the other folds leave them)
    b = GraphBuilder("low")
    a, c = (b.input(n, (2, 4, 5, 5), dtype="bfloat16") for n in "ac")
    low = b.build([b.op("Relu", [b.op("Add", [a, c], name="add")], name="r")])
    assert fold_sum_relus(low) is low


def test_resnet_folds_every_residual_sum():
    g = fold_norm_relus(prepare("zoo:resnet?depth=18&batch=2&image=32&width=0.25",
                                GraphOptions(optimizer=SGD)))
    folded = fold_sum_relus(g)
    ops = _ops(folded)
    assert ops.count(("Add", "relu")) == 8 and ("Add", None) not in ops
    # the last block's output gradient comes from the pooling alone: no AddN before it
    assert ops.count(("AddN", "relu")) == 7


def test_the_ops_refuse_a_folded_relu_they_do_not_compute():
    add, addn = get_op("Add"), get_op("AddN")
    f32 = TensorType((2, 3))
    with pytest.raises(OpError, match="output's shape"):
        add.infer([f32, TensorType((3,))], {"activation": "relu"})
    with pytest.raises(OpError, match="float32"):
        add.infer([TensorType((2, 3), "float16")] * 2, {"activation": "relu"})
    with pytest.raises(OpError, match="at least 2 inputs"):
        addn.infer([f32], {"activation": "relu"})
    with pytest.raises(OpError, match="activation must be one of"):
        addn.infer([f32, f32], {"activation": "gelu"})
    r = np.array([[1.0, 0.0, np.nan], [-1.0, 2.0, 0.5]], dtype=np.float32)
    x = np.arange(6, dtype=np.float32).reshape(2, 3) - 2
    (got,) = addn.reference([x, x, r], addn.normalize_attrs({"activation": "relu"}))
    np.testing.assert_array_equal(got, np.where(r > 0, x + x, 0))
