"""A convolution's LeakyRelu folded into it (planner/step/fold_conv_leaky.py): oneDNN's
eltwise post-op on the CPU runtime's Conv2D (kernels/conv.cpp), or one pass after the columns
kernel. A training step computes the bits of the same step with the ops apart, on plain and
channel-blocked images, a NaN weight's NaN kept (the post-op's form for a positive slope keeps
it, as LeakyRelu does); evaluate() of a folded build gives the reference's values."""

from __future__ import annotations

import numpy as np
import pytest

from planner.frontend.autodiff import make_training_graph
from planner.graph.interpret import random_feeds
from planner.graph.optimizer import Optimizer
from planner.step.layouts import with_layouts
from tests.codegen.helpers import (
    assert_evaluate_matches_reference,
    assert_fold_keeps_bits,
    start_state,
    uniform_plan,
)


def _net(columns: bool = False):
    """A GAN discriminator's opening: Conv2D (a bias) -> LeakyRelu(0.2) -> Conv2D ->
    BatchNorm -> LeakyRelu -> a head; with `columns`, every convolution on the columns kernels
    (which read and write plain and blocked images alike, the same bits)."""
    from planner.graph.builder import GraphBuilder
    from planner.zoo.layers import batch_norm, conv2d, head

    b = GraphBuilder("conv_leaky")
    x = b.input("x", (3, 3, 12, 12))
    h = b.op("LeakyRelu", [conv2d(b, x, 16, 4, stride=2, pad=1, name="c1")], {"alpha": 0.2},
             name="r1")
    z = b.op("LeakyRelu", [batch_norm(b, conv2d(b, h, 32, 4, stride=2, pad=1, bias=False,
                                                   name="c2"), name="bn2")],
             {"alpha": 0.2}, name="r2")
    graph = make_training_graph(
        b.build(head(b, b.op("Flatten", [z], {"axis": 1}, name="flatten"), 5, True)),
        Optimizer(kind="sgd", lr=0.1, momentum=0.9))
    return with_layouts(graph, {n.name: "columns" for n in graph.nodes
                                if columns and n.op.startswith("Conv2D")})


def _apart(graph):
    """`graph` with the first convolution's output a graph output: fold_conv_leaky leaves the
    pair apart."""
    return graph.model_copy(update={"outputs": (*graph.outputs, "c1")})


# oneDNN's kernels with the post-op on plain images (kept apart, the first convolution's output
# is a graph output, so plain, and so are the images its group shares: oneDNN's kernels on
# blocked ones would sum in another order); the columns kernels and the pass after them on
# blocked ones.
@pytest.mark.parametrize(("columns", "block", "nan"), [
    (False, None, False), (False, None, True), (True, 16, True)])
def test_a_folded_step_gives_the_bits_of_the_ops_apart(columns, block, nan, tmp_path):
    graph = _net(columns)
    plans = {"folded": uniform_plan(graph, block), "apart": uniform_plan(_apart(graph), block)}
    for name, p in plans.items():
        folds = [n.name for n in p.graph.nodes if n.op == "Conv2D"
                 and n.attrs.get("activation") == "leaky_relu"]
        assert folds == (["c1"] if name == "folded" else []), name
    state = start_state(graph)
    if nan:   # one output channel's every value NaN, and so the loss and the gradients
        state["c1/weight"] = state["c1/weight"].copy()
        state["c1/weight"][0, 0, 0, 0] = np.nan
    modules = assert_fold_keeps_bits(graph, plans, state, random_feeds(graph, seed=3),
                                     tmp_path)
    ex = modules["folded"].Executor()
    ex.load_params(state)
    ex.step(random_feeds(graph, seed=3))
    (impl,) = [r.get("impl", "") for r in ex.stats()["ops"] if r["name"] == "c1"]
    # the post-op on oneDNN's kernel; a pass after the columns kernel
    assert impl.endswith(" + leaky_relu") == columns, impl


def test_evaluate_of_a_folded_build_matches_the_reference(tmp_path):
    graph = _net()
    p = uniform_plan(graph, 16)
    assert any(n.attrs.get("activation") == "leaky_relu" for n in p.graph.nodes
               if n.op == "Conv2D")
    assert_evaluate_matches_reference(p, graph, tmp_path, tolerance=1e-5)
