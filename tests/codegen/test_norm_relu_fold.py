"""A BatchNorm's Relu or LeakyRelu and its gradient folded into the CPU runtime's BatchNorm
loops (planner/step/fold_norm_relu.py, kernels/batch_norm.cpp): a training step computes the
bits of the same step with the ops apart, on plain and channel-blocked images; evaluate() of a
folded LeakyRelu build gives the reference's values; the runtime refuses a folded gradient its
loops do not run."""

from __future__ import annotations

import pytest

from codegen.build import build
from codegen.load import load
from codegen.render import render
from planner.frontend.autodiff import make_training_graph
from planner.graph.interpret import random_feeds
from planner.graph.optimizer import Optimizer
from planner.pipeline import plan
from tests.codegen.helpers import (
    assert_evaluate_matches_reference,
    assert_fold_keeps_bits,
    host_with_block,
    start_state,
    uniform_plan,
)


def _net(leaky: bool = False):
    """Two convolution layers with BatchNorm and Relu (LeakyRelu(0.2), DCGAN's), a residual
    Add, a head; 35-pixel maps (four runs of the 8 partials and a remainder in the loops'
    sums)."""
    from planner.graph.builder import GraphBuilder
    from planner.zoo.layers import batch_norm, conv2d, head, relu

    def act(b, t, name):
        return b.op("LeakyRelu", [t], {"alpha": 0.2}, name=name) if leaky else relu(b, t, name)

    b = GraphBuilder("norm_relu")
    x = b.input("x", (3, 16, 5, 7))
    h = act(b, batch_norm(b, conv2d(b, x, 32, 3, pad=1, name="c1"), name="bn1"), "r1")
    z = act(b, batch_norm(b, conv2d(b, h, 32, 3, pad=1, name="c2"), name="bn2"), "r2")
    z = relu(b, b.op("Add", [z, h], name="add"), name="r3")
    z = conv2d(b, z, 16, 1, name="c3")
    return make_training_graph(
        b.build(head(b, b.op("Flatten", [z], {"axis": 1}, name="flatten"), 5, True)),
        Optimizer(kind="sgd", lr=0.1, momentum=0.9))


def _apart(graph):
    """`graph` with the BatchNorms', sums' and Relu gradients' outputs made graph outputs: the
    folds (fold_norm_relu.py, fold_sum_relu.py) leave every pair apart."""
    kept = [n.outputs[0] for n in graph.nodes
            if n.op in ("BatchNorm", "ReluGrad", "LeakyReluGrad", "Add", "AddN")]
    return graph.model_copy(update={"outputs": (*graph.outputs, *kept)})


@pytest.mark.parametrize("leaky", [False, True])
@pytest.mark.parametrize("block", [None, 16])
def test_a_folded_step_gives_the_bits_of_the_ops_apart(block, leaky, tmp_path):
    graph = _net(leaky)
    plans = {"folded": uniform_plan(graph, block), "apart": uniform_plan(_apart(graph), block)}
    kind = "leaky_relu" if leaky else "relu"
    for name, p in plans.items():
        folds = [n for n in p.graph.nodes if n.attrs.get("activation") == kind
                 and n.op.startswith("BatchNorm")]
        assert len(folds) == (4 if name == "folded" else 0), name
        assert all(n.attrs.get("alpha") == (0.2 if leaky else None) for n in folds)
    assert_fold_keeps_bits(graph, plans, start_state(graph), random_feeds(graph, seed=3), tmp_path)


def test_the_runtime_refuses_a_folded_gradient_its_loops_do_not_run(tmp_path):
    """A plan (a hostile one: the fold makes none) folding a ReluGrad into the gradient of a
    BatchNorm1d, whose (N, C) image has one element per channel and image, is refused at load
    rather than run without the Relu's mask."""
    from planner.graph.builder import GraphBuilder
    from planner.ir.graph import Graph

    b = GraphBuilder("bn1d_grad")
    dy, x = (b.input(n, (6, 4)) for n in ("dy", "x"))
    stats = [b.input(n, (4,)) for n in ("scale", "mean", "invstd", "bias")]
    outs = b.op("BatchNormGrad", [dy, x, *stats], {"activation": "relu"}, name="bn_grad")
    graph = b.build(outputs=outs)
    assert isinstance(graph, Graph)
    p = plan(graph, host_with_block(None))
    module = load(build(render(p, tmp_path / "bn1d", layout="own")).dir)
    with pytest.raises(Exception, match="folded Relu needs the float32 training loops"):
        module.Executor()


def test_evaluate_of_a_folded_leaky_step_gives_the_reference_values(tmp_path):
    """The evaluation graph keeps the BatchNorms' LeakyRelu (inference mode: oneDNN's
    normalisation, then the rule in a pass after, kernels/batch_norm.cpp ActivationAfter)."""
    from planner.graph.evaluation import evaluation_graph

    graph = _net(leaky=True)
    p = plan(graph, host_with_block(None))
    assert [n.attrs.get("activation") for n in evaluation_graph(p.graph).nodes
            if n.op == "BatchNorm"] == ["leaky_relu"] * 2
    # float32 convolutions' sums of at most 3x3x32 products, a few roundings a layer.
    assert_evaluate_matches_reference(p, graph, tmp_path / "eval", 1e-4)


def test_only_a_norm_takes_a_leaky_relu_and_with_its_slope():
    from planner.ops import TensorType, get_op
    from planner.ops.base import OpError

    x, c = TensorType((2, 4, 3, 3)), TensorType((4,))
    bn = get_op("BatchNorm")
    with pytest.raises(OpError, match="needs its slope"):
        bn.infer([x, c, c, c, c], bn.normalize_attrs({"activation": "leaky_relu"}))
    add = get_op("Add")
    with pytest.raises(OpError, match="must be one of"):
        add.infer([x, x], add.normalize_attrs({"activation": "leaky_relu"}))
