"""A BatchNorm's Relu and its gradient folded into the CPU runtime's BatchNorm loops
(planner/graph/fold_norm_relu.py, kernels/batch_norm.cpp): a training step computes the bits of
the same step with the ops apart, on plain and channel-blocked images; the runtime refuses a
folded gradient its loops do not run."""

from __future__ import annotations

import pytest

from codegen.build import build
from codegen.load import load
from codegen.render import render
from planner.graph.autodiff import make_training_graph
from planner.graph.interpret import random_feeds
from planner.graph.optimizer import Optimizer
from planner.pipeline import plan
from tests.codegen.helpers import (
    assert_fold_keeps_bits,
    host_with_block,
    start_state,
    uniform_plan,
)


def _net():
    """Two convolution layers with BatchNorm and Relu, a residual Add, a head; 35-pixel maps
    (four runs of the 8 partials and a remainder in the loops' sums)."""
    from planner.graph.builder import GraphBuilder
    from planner.zoo.layers import batch_norm, conv2d, head, relu

    b = GraphBuilder("norm_relu")
    x = b.input("x", (3, 16, 5, 7))
    h = relu(b, batch_norm(b, conv2d(b, x, 32, 3, pad=1, name="c1"), name="bn1"), name="r1")
    z = relu(b, batch_norm(b, conv2d(b, h, 32, 3, pad=1, name="c2"), name="bn2"), name="r2")
    z = relu(b, b.op("Add", [z, h], name="add"), name="r3")
    z = conv2d(b, z, 16, 1, name="c3")
    return make_training_graph(
        b.build(head(b, b.op("Flatten", [z], {"axis": 1}, name="flatten"), 5, True)),
        Optimizer(kind="sgd", lr=0.1, momentum=0.9))


def _apart(graph):
    """`graph` with the BatchNorms', sums' and ReluGrads' outputs made graph outputs: the folds
    (fold_norm_relu.py, fold_sum_relu.py) leave every pair apart."""
    kept = [n.outputs[0] for n in graph.nodes
            if n.op in ("BatchNorm", "ReluGrad", "Add", "AddN")]
    return graph.model_copy(update={"outputs": (*graph.outputs, *kept)})


@pytest.mark.parametrize("block", [None, 16])
def test_a_folded_step_gives_the_bits_of_the_ops_apart(block, tmp_path):
    graph = _net()
    plans = {"folded": uniform_plan(graph, block), "apart": uniform_plan(_apart(graph), block)}
    for name, p in plans.items():
        folds = [n for n in p.graph.nodes if n.attrs.get("activation") == "relu"
                 and n.op.startswith("BatchNorm")]
        assert len(folds) == (4 if name == "folded" else 0), name
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
