"""A residual sum folded into the BatchNorm before it (planner/step/fold_norm_sum.py): which
pairs fold, where the folded op lands, that the numpy reference computes the same values folded
or not, and that a CPU plan's graph with the fold verifies against its training graph."""

from __future__ import annotations

import json

import pytest

from planner.frontend.autodiff import make_training_graph
from planner.frontend.options import GraphOptions
from planner.frontend.prepare import prepare
from planner.graph.builder import GraphBuilder
from planner.graph.optimizer import Optimizer
from planner.ops import TensorType, get_op
from planner.ops.base import OpError
from planner.step.fold_norm_relu import fold_norm_relus
from planner.step.fold_norm_sum import fold_norm_sums
from planner.step.fold_sum_relu import fold_sum_relus
from planner.zoo.layers import batch_norm, conv2d, head, relu
from tests.helpers.folds import assert_same_values

SGD = Optimizer(kind="sgd", lr=0.1, momentum=0.9)


def _block(image=(2, 4, 5, 5), shortcut_shape=None, relu_after=True):
    """relu(conv) -> conv -> bn, plus a shortcut (the first relu's output, or a parameter of
    `shortcut_shape`), -> relu -> head."""
    b = GraphBuilder("block")
    x = b.input("x", image)
    h = relu(b, conv2d(b, x, image[1], 3, pad=1, name="c0"), name="r0")
    y = batch_norm(b, conv2d(b, h, image[1], 3, pad=1, name="c1"), name="bn")
    s = h if shortcut_shape is None else b.param("s", shortcut_shape, init="zeros")
    y = b.op("Add", [y, s], name="add")
    if relu_after:
        y = relu(b, y, name="r1")
    return b.build(head(b, b.op("Flatten", [y], {"axis": 1}), 3, True))


def _step(graph):
    return fold_sum_relus(fold_norm_relus(make_training_graph(graph, SGD)))


def _residual(graph):
    return [n for n in graph.nodes if n.op == "BatchNorm" and len(n.inputs) == 6]


def test_a_block_folds_its_sum_into_the_norm_in_the_sums_place():
    g = _step(_block())
    folded = fold_norm_sums(g)
    (bn,) = _residual(folded)
    add = g.node_map["add"]
    assert bn.name == "bn" and bn.attrs["activation"] == "relu"
    assert bn.inputs == (*g.node_map["bn"].inputs, "r0")
    assert bn.outputs == (add.outputs[0], *g.node_map["bn"].outputs[1:])
    names = [n.name for n in folded.nodes]
    assert "add" not in names and names.index("bn") == [n.name for n in g.nodes].index("add") - 1
    assert g.node_map["bn"].outputs[0] not in folded.tensor_map
    assert fold_norm_sums(folded) is folded
    # without a Relu after the sum, the norm takes none
    (plain,) = _residual(fold_norm_sums(_step(_block(relu_after=False))))
    assert plain.attrs["activation"] == "none"


@pytest.mark.parametrize("relu_after", [True, False])
def test_the_folded_step_computes_what_the_ops_apart_compute(relu_after):
    g = _step(_block(relu_after=relu_after))
    assert_same_values(g, fold_norm_sums(g), fewer=True)


def test_pairs_that_do_not_fold_stay_apart():
    # a broadcast shortcut: the loops add a residual of x's own shape
    assert not _residual(fold_norm_sums(_step(_block(shortcut_shape=(4, 1, 1)))))
    # one element per channel and image: not the loops'
    assert not _residual(fold_norm_sums(_step(_block(image=(2, 4, 1, 1)))))
    # the normalised branch is a graph output, or read by another op as well
    g = _step(_block())
    kept = g.model_copy(update={"outputs": (*g.outputs, g.node_map["bn"].outputs[0])})
    assert not _residual(fold_norm_sums(kept))
    # a BatchNorm with its own folded Relu (the sum's input is a Relu's output)
    b = GraphBuilder("own_relu")
    x, s = b.input("x", (2, 4, 5, 5)), b.input("s", (2, 4, 5, 5))
    y = relu(b, batch_norm(b, x, name="bn"), name="r")
    g = fold_norm_relus(b.build([b.op("Add", [y, s], name="add")]))
    assert not _residual(fold_norm_sums(g))


def test_resnet_folds_each_block_on_maps_of_two_pixels_or_more():
    g = fold_sum_relus(fold_norm_relus(prepare(
        "zoo:resnet?depth=18&batch=2&image=64&width=0.25", GraphOptions(optimizer=SGD))))
    folded = fold_norm_sums(g)
    assert len(_residual(folded)) == 8  # every block's last norm (maps 16x16 to 2x2)
    assert not any(n.op == "Add" for n in folded.nodes)


def test_the_op_refuses_a_residual_unlike_x_and_has_no_gradient_for_it():
    bn = get_op("BatchNorm")
    x, c = TensorType((2, 4, 3, 3)), TensorType((4,))
    a = bn.normalize_attrs({})
    with pytest.raises(OpError, match="the residual is"):
        bn.infer([x, c, c, c, c, TensorType((2, 4, 1, 1))], a)
    with pytest.raises(OpError, match="the residual is"):
        bn.infer([x, c, c, c, c, TensorType((2, 4, 3, 3), "float16")], a)
    with pytest.raises(OpError, match="6 with a folded residual"):
        bn.infer([x, c, c, c, c, x, x], a)
    b = GraphBuilder("folded")
    ins = [b.input("x", (2, 4, 3, 3)), b.param("scale", (4,), init="ones"),
           *(b.input(n, (4,)) for n in "bcd"), b.input("s", (2, 4, 3, 3))]
    y = b.op_n("BatchNorm", ins, {}, name="bn")[0]
    with pytest.raises(Exception, match="no gradient rule for a folded residual"):
        make_training_graph(b.build(head(b, b.op("Flatten", [y], {"axis": 1}), 3, True)), SGD)


def test_training_plans_verify_against_their_graph(tmp_path, capsys):
    """A CPU training plan folds the sums; `verify --graph` re-derives the same step graph."""
    import planner.cli as cli

    spec = "zoo:resnet?batch=2&image=64&depth=18&width=0.25&classes=5"
    graph, out = str(tmp_path / "g.json"), str(tmp_path / "p.json")
    assert cli.main(["graph", spec, "--train", "sgd", "-o", graph]) == 0
    assert cli.main(["plan", graph, "--target", "knl-7250", "-o", out]) == 0
    nodes = json.load(open(out))["graph"]["nodes"]
    assert sum(n["op"] == "BatchNorm" and len(n["inputs"]) == 6 for n in nodes) == 8
    assert cli.main(["verify", out, "--graph", graph]) == 0
    capsys.readouterr()
