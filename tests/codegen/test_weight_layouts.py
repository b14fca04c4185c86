"""Convolution weights kept in the layout their kernels read (templates/cpu/runtime/
weight_layouts.h, issue 89): a step on kept weights gives the plain-layout executor's bits in
every parameter and optimizer state over several SGD-with-momentum and Adam steps, read back
through every edge (params(), a checkpoint saved and loaded, load_params, evaluate(), a live
view, which releases the weight to plain); and the kept executor's convolutions run no
reorder of their weights or weight gradients."""

from __future__ import annotations

import numpy as np
import pytest

from codegen.build import build
from codegen.load import load
from codegen.render import render
from planner.frontend.autodiff import make_training_graph
from planner.graph.interpret import random_feeds
from planner.graph.optimizer import Optimizer
from tests.codegen.helpers import host_plan, start_state

# Each optimizer, and the tensors per weight it keeps in the kernels' layout: the weight and
# its optimizer state (the gradient is no parameter or state: not counted).
OPTIMIZERS = {
    "sgd": (Optimizer(kind="sgd", lr=0.05, weight_decay=1e-3), 1),
    "momentum": (Optimizer(kind="momentum", lr=0.05, momentum=0.9, weight_decay=1e-3), 2),
    "adam": (Optimizer(kind="adam", lr=1e-2, weight_decay=1e-2), 3),
    "adamw": (Optimizer(kind="adamw", lr=1e-2, weight_decay=1e-2), 3),
}


def conv_net(loss: bool = True):
    """3x3 convolutions of 16 to 32 channels (every weight a whole number of oneDNN's blocks)
    around a stride-2 transposed convolution (a DCGAN generator's layer, whose weight its
    data gradient, a Conv2D, reads too), ReLUs, a global pool and a linear head."""
    from planner.graph.builder import GraphBuilder
    from planner.zoo.layers import conv2d, conv_transpose2d, head, relu

    b = GraphBuilder("kept_weights")
    h = b.input("x", (4, 16, 8, 8))
    for k, channels in enumerate((32, 32)):
        h = relu(b, conv2d(b, h, channels, 3, pad=1, name=f"c{k}"), name=f"r{k}")
    h = relu(b, conv_transpose2d(b, h, 16, 4, stride=2, pad=1, name="up"), name="rup")
    h = relu(b, conv2d(b, h, 16, 3, pad=1, name="c2"), name="r2")
    h = b.op("GlobalAvgPool", [h], name="gap")
    return b.build(head(b, b.op("Flatten", [h], {"axis": 1}, name="flatten"), 5, loss))


@pytest.fixture(scope="module", params=sorted(OPTIMIZERS))
def built(request, tmp_path_factory):
    """(module, graph, tensors kept per weight) of the conv net's training plan under one
    optimizer."""
    optimizer, per_weight = OPTIMIZERS[request.param]
    p = host_plan(make_training_graph(conv_net(), optimizer))
    folder = tmp_path_factory.mktemp("kept") / request.param
    return load(build(render(p, folder)).dir), p.graph, per_weight


def conv_weights(graph) -> list[str]:
    """The weights of the forward convolutions, transposed or not."""
    return sorted({n.inputs[1] for n in graph.nodes
                   if n.op in ("Conv2D", "ConvTranspose2D")
                   and graph.tensor(n.inputs[1]).role == "param"})


def assert_same(got: dict, want: dict) -> None:
    assert got.keys() == want.keys()
    for name, value in want.items():
        np.testing.assert_array_equal(got[name], value, err_msg=name)


def stepped(module, graph, state, steps: int, concurrent: bool = False, **options):
    """An executor loaded with `state` after `steps` steps on fresh feeds."""
    ex = module.Executor(concurrent=concurrent, adaptive=False, **options)
    ex.load_params(state)
    for k in range(steps):
        ex.step(random_feeds(graph, seed=10 + k))
    return ex


def test_kept_weights_give_the_plain_layouts_bits_through_every_edge(built):
    module, graph, per_weight = built
    state = start_state(graph)
    kept = stepped(module, graph, state, 3)
    plain = stepped(module, graph, state, 3, weight_layouts="plain")
    weights = conv_weights(graph)
    held = kept.stats()["kept_layout_bytes"]
    # every convolution's weight and its optimizer state
    assert held == sum(graph.tensor(w).size * 4 for w in weights) * per_weight, held
    assert plain.stats()["kept_layout_bytes"] == 0
    assert_same(kept.params(), plain.params())
    # on the plan's lanes, each kernel made on its lane's thread: the same bits
    assert_same(stepped(module, graph, state, 3, concurrent=True).params(), plain.params())
    assert_same(kept.state_dict()["model"], plain.state_dict()["model"])
    feeds = random_feeds(graph, seed=99)
    assert_same(kept.evaluate(feeds), plain.evaluate(feeds))
    assert_same(kept.params(), plain.params())  # evaluate() put the kept layouts back
    # A checkpoint of the kept executor loaded into a fresh one, and its params() given to
    # load_params of another: two more steps each, the plain executor's bits.
    saved, copies = kept.state_dict(), kept.params()
    for k in range(2):
        plain.step(random_feeds(graph, seed=50 + k))
    for load_into, value in (("load_state_dict", saved), ("load_params", copies)):
        fresh = module.Executor(concurrent=False, adaptive=False)
        getattr(fresh, load_into)(value)
        assert fresh.stats()["kept_layout_bytes"] == held, load_into
        assert_same(fresh.params(), copies)
        for k in range(2):
            fresh.step(random_feeds(graph, seed=50 + k))
        assert_same(fresh.params(), plain.params())


def test_a_live_view_releases_its_weight_to_plain(built):
    module, graph, _ = built
    state = start_state(graph)
    kept = stepped(module, graph, state, 1)
    plain = stepped(module, graph, state, 1, weight_layouts="plain")
    held = kept.stats()["kept_layout_bytes"]
    w = conv_weights(graph)[0]
    view = kept.params(copy=False, names=[w])[w]
    np.testing.assert_array_equal(view, plain.params()[w])
    assert 0 < kept.stats()["kept_layout_bytes"] < held  # its family alone
    for k in range(2):
        kept.step(random_feeds(graph, seed=20 + k))
        plain.step(random_feeds(graph, seed=20 + k))
    np.testing.assert_array_equal(view, plain.params()[w])  # live, plain
    assert_same(kept.params(), plain.params())
    kept.params(copy=False)
    assert kept.stats()["kept_layout_bytes"] == 0
    with pytest.raises(ValueError, match="'nothing' is not a parameter"):
        kept.params(names=["nothing"])
    with pytest.raises(ValueError, match="weight_layouts must be 'kernel' or 'plain'"):
        module.Executor(weight_layouts="blocked")  # one line naming the field


def test_kept_weights_run_no_weight_reorder(built):
    """The forward convolutions and weight gradients on kept weights run one oneDNN primitive
    fewer each (the weight's reorder in, the gradient's out) than on plain ones; so does the
    transposed convolution's data gradient, a Conv2D, while the transposed convolution
    reorders its weight from the kept layout instead of from plain (as many primitives)."""
    module, graph, _ = built
    state = start_state(graph)
    runs = {}
    for layouts in ("kernel", "plain"):
        ex = stepped(module, graph, state, 1, weight_layouts=layouts)
        runs[layouts] = {op["name"]: len(op["impl"].split(" + ")) for op in ex.stats()["ops"]
                         if op.get("impl")}
    names = [n.name for n in graph.nodes if n.op in ("Conv2D", "Conv2DBackpropFilter",
                                                      "ConvTranspose2D")]
    assert len(names) >= 8, names
    for name in names:
        fewer = 0 if graph.node_map[name].op == "ConvTranspose2D" else 1
        assert runs["kernel"][name] == runs["plain"][name] - fewer, name


def test_a_weight_another_op_reads_stays_plain(tmp_path):
    """clip_grad_norm's global norm reads every gradient (a sum whose order a layout would
    move): no weight is kept, and the step is the plain executor's to the bit."""
    optimizer = Optimizer(kind="momentum", lr=0.05, momentum=0.9, clip_grad_norm=0.5)
    p = host_plan(make_training_graph(conv_net(), optimizer))
    assert any(n.op == "ClipGradNorm" for n in p.graph.nodes)
    module = load(build(render(p, tmp_path / "clipped")).dir)
    state = start_state(p.graph)
    kept = stepped(module, p.graph, state, 2)
    plain = stepped(module, p.graph, state, 2, weight_layouts="plain")
    assert kept.stats()["kept_layout_bytes"] == 0
    assert_same(kept.params(), plain.params())


def test_an_inference_plans_weights_are_kept_too(tmp_path):
    """Read by its convolutions alone (no update), a weight is loaded into the kept layout once
    and read as it lies by every forward(); the outputs are the plain executor's."""
    p = host_plan(conv_net(loss=False))
    assert p.graph.kind == "inference"
    module = load(build(render(p, tmp_path / "inference")).dir)
    state = start_state(p.graph)
    runs = {}
    for layouts in ("kernel", "plain"):
        ex = module.Executor(concurrent=False, adaptive=False, weight_layouts=layouts)
        ex.load_params(state)
        runs[layouts] = [ex.forward(random_feeds(p.graph, seed=k)) for k in range(2)]
        # the Conv2Ds' weights; the transposed convolution's, which no Conv2D (its data
        # gradient) reads here to give the layout, stays plain
        read = {n.inputs[1] for n in p.graph.nodes if n.op == "Conv2D"}
        assert ex.stats()["kept_layout_bytes"] == (
            sum(p.graph.tensor(w).size * 4 for w in read) if layouts == "kernel" else 0)
        assert_same(ex.params(), state)
    for kept, plain in zip(runs["kernel"], runs["plain"], strict=True):
        assert_same(kept, plain)


def test_an_executor_joining_the_arena_releases_its_kept_weights(built):
    """An executor made on a kept one's arena (arena_of: a range's shapes in the trainer):
    the kept layouts are released to plain, both hold every tensor plain, and steps taken in
    turns on the two give the plain executor's bits."""
    module, graph, _ = built
    state = start_state(graph)
    kept = stepped(module, graph, state, 1)
    plain = stepped(module, graph, state, 1, weight_layouts="plain")
    assert kept.stats()["kept_layout_bytes"] > 0
    joined = module.Executor(concurrent=False, adaptive=False, arena_of=kept)
    assert kept.stats()["kept_layout_bytes"] == joined.stats()["kept_layout_bytes"] == 0
    assert_same(joined.params(), plain.params())
    for k, ex in enumerate((joined, kept, joined)):
        ex.step(random_feeds(graph, seed=30 + k))
        plain.step(random_feeds(graph, seed=30 + k))
    assert_same(kept.params(), plain.params())
