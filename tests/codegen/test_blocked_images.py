"""Images kept channel-blocked between oneDNN's convolutions, BatchNorm and by-position ops
(planner/step/blocked.py): a training step on them gives the reference's values, every
blocked tensor read back plain, at either block (16: AVX-512's nChw16c; 8: AVX2's, which
oneDNN's kernels on an AVX-512 CPU do not take, so the convolutions there reorder it:
kernels/conv.cpp's fallback) on any x86-64 CPU; BatchNorm's blocked loops and the columns
convolutions give the plain step's bits; the runtime knows the ops the planner keeps them
between; and `planner verify` refuses a graph that keeps an image blocked where a kernel reads
it plain."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from codegen.build import build
from codegen.load import load
from codegen.render import render
from planner.frontend.autodiff import make_training_graph
from planner.graph.interpret import random_feeds, train_step, widened
from planner.graph.optimizer import Optimizer
from planner.ops.base import BY_POSITION, REGISTRY
from planner.pipeline import plan
from planner.verify.graph import verify_graph_data
from planner.zoo import build as zoo
from tests.codegen.helpers import (
    host_with_block,
    node_errors,
    rel_error,
    start_state,
    step_with_values,
)
from tests.codegen.zoo_cases import TOL, allowed

# Channels 16 to 128 (width 0.25): every stage's images a multiple of both blocks; 64 px: the
# last stage 2x2, which the global pool reduces.
RESNET = dict(batch=2, image=64, depth=18, width=0.25, classes=5)
RUNTIME = Path(__file__).resolve().parents[2] / "templates" / "cpu" / "runtime"


def mobile_block():
    """A MobileNet-v2 block: 1x1 expansion, depthwise 3x3, ReLU6 (HardTanh with scalar bounds),
    1x1 projection, the residual Add; BatchNorm after each convolution."""
    from planner.graph.builder import GraphBuilder
    from planner.ir.graph import Tensor
    from planner.zoo.layers import batch_norm, conv2d, head

    b = GraphBuilder("mobile_block")
    bounds = [b.add_tensor(Tensor(name=n, shape=(), role="state", init="constant", value=v))
              for n, v in (("lo", 0.0), ("hi", 6.0))]
    x = b.input("x", (4, 16, 2, 2))  # 2x2 maps: the depthwise weight gradient on its own kernel
    h = b.op("HardTanh", [batch_norm(b, conv2d(b, x, 32, 1, name="expand"), name="bn1"),
                          *bounds], name="relu6a")
    w = b.param("depthwise/weight", (32, 1, 3, 3))
    h = b.op("Conv2D", [h, w], {"groups": 32, "pads": [1, 1, 1, 1]}, name="depthwise")
    h = b.op("HardTanh", [batch_norm(b, h, name="bn2"), *bounds], name="relu6b")
    h = batch_norm(b, conv2d(b, h, 16, 1, name="project"), name="bn3")
    h = b.op("Add", [h, x], name="residual")
    return b.build(head(b, b.op("Flatten", [conv2d(b, h, 16, 1, name="last")], {"axis": 1},
                                name="flatten"), 5, True))


def blocked_plan(block: int, model: str = "resnet"):
    """A training plan for this host with its CPU's channel block set to `block`: the resnet's,
    or the mobile block's."""
    forward = zoo("resnet", **RESNET) if model == "resnet" else mobile_block()
    graph = make_training_graph(forward, Optimizer(kind="sgd", lr=0.1, momentum=0.9))
    return plan(graph, host_with_block(block))


@pytest.mark.parametrize("block, model", [(8, "resnet"), (16, "resnet"), (16, "mobile")])
def test_a_step_on_blocked_images_gives_the_reference_values(block, model, tmp_path):
    p = blocked_plan(block, model)
    graph = p.graph
    blocked = [t for t in graph.tensors if t.layout]
    images = [t for t in graph.tensors if len(t.shape) == 4 and t.role == "activation"]
    assert {t.layout for t in blocked} == {f"nChw{block}c"}
    assert len(blocked) > len(images) // 2, "most of the step's images kept blocked"
    if model == "mobile":
        assert graph.tensor("depthwise").layout and graph.tensor("relu6b").layout
    else:  # the last stage too: the global pool reads it blocked, its gradient writes it so
        (pool,) = (n for n in graph.nodes if n.op == "GlobalAvgPool")
        (spread,) = (n for n in graph.nodes if n.op == "AvgPoolGrad")
        assert graph.tensor(pool.inputs[0]).layout and graph.tensor(spread.outputs[0]).layout
        assert graph.tensor(pool.inputs[0]).shape[2:] != (1, 1), "a map the pool reduces"
    module = load(build(render(p, tmp_path / f"blocked{block}", layout="own")).dir)
    state = start_state(graph)
    feeds = random_feeds(graph, seed=2)
    # Every tensor read back (the blocked ones as plain NCHW), every node against its
    # reference on the executor's own inputs.
    values = step_with_values(module, graph, state, feeds)
    worst = sorted(node_errors(graph, values))[-3:]
    assert worst[-1][0] < TOL, f"ops off the reference: {worst}"
    outputs, new_state = train_step(graph, feeds, state)
    exact_out, exact_state = train_step(widened(graph), feeds, state)
    assert rel_error(values["loss"], exact_out["loss"]) < allowed(
        outputs["loss"], exact_out["loss"], TOL)
    for t in graph.tensors:
        if t.updates and t.role == "param":
            assert rel_error(values[t.name], exact_state[t.updates]) < allowed(
                new_state[t.updates], exact_state[t.updates], TOL), t.name


@pytest.mark.parametrize("width", [7, 17])
def test_a_step_on_blocked_images_gives_the_plain_steps_bits(width, tmp_path):
    """BatchNorm and its gradient on a blocked image add each channel's terms in the plain
    loops' order (kernels/batch_norm.cpp block_sums), the columns convolutions visit the
    same elements in the same order either way (conv_columns.h Planes), and the max pool takes
    the same taps and adds its overlapping windows' gradients in the same order (its plain
    loops: channels-last transposes on 7 columns, rows on 17): a training step of those ops
    alone gives the plain step's bits in every tensor, read back plain."""
    from planner.graph.builder import GraphBuilder
    from planner.step.layouts import with_layouts
    from planner.zoo.layers import batch_norm, conv2d, head, max_pool, relu

    b = GraphBuilder("blocked_bits")
    # 35 or 85 pixels: 8 partials and a remainder; 11 images: BatchNorm's sums in two
    # chunks of images, the second short
    x = b.input("x", (11, 16, 5, width))
    h = relu(b, batch_norm(b, conv2d(b, x, 32, 3, pad=1, name="c1"), name="bn1"), name="r1")
    h = max_pool(b, h, 3, 1, 1, name="pool")  # overlapping windows: dx adds up to 9 terms
    z = relu(b, batch_norm(b, conv2d(b, h, 32, 3, pad=1, name="c2"), name="bn2"), name="r2")
    z = relu(b, b.op("Add", [z, h], name="add"), name="r3")
    z = conv2d(b, z, 16, 1, name="c3")
    graph = make_training_graph(
        b.build(head(b, b.op("Flatten", [z], {"axis": 1}, name="flatten"), 5, True)),
        Optimizer(kind="sgd", lr=0.1))
    graph = with_layouts(graph, {n.name: "columns" for n in graph.nodes
                                 if n.op.startswith("Conv2D")})
    state, feeds = start_state(graph), random_feeds(graph, seed=3)
    runs = []
    for block in (None, 8, 16):
        p = plan(graph, host_with_block(block))
        kept = {t.name for t in p.graph.tensors if t.layout}
        assert len(kept) > 10 and {"r1", "pool"} <= kept if block else not kept
        module = load(build(render(p, tmp_path / f"block{block}", layout="own")).dir)
        runs.append(step_with_values(module, p.graph, state, feeds))
    plain, *blocked_runs = runs
    for blocked_run in blocked_runs:
        assert plain.keys() == blocked_run.keys()
        for name, value in plain.items():
            np.testing.assert_array_equal(blocked_run[name], value, err_msg=name)


def test_pools_keep_images_blocked_where_their_kernels_read_them_so():
    """The max pool's images and the global pool's input stay blocked; an average pool over
    smaller windows (oneDNN's plain kernel) keeps its image plain, and so its whole group."""
    from planner.graph.builder import GraphBuilder
    from planner.step.blocked import blocked_tensors
    from planner.zoo.layers import avg_pool, conv2d, head, max_pool

    def step(pool):
        b = GraphBuilder("pools")
        x = b.input("x", (2, 16, 8, 8))
        h = pool(b, b.op("Relu", [conv2d(b, x, 32, 3, pad=1, name="c1")], name="r1"))
        h = b.op("GlobalAvgPool", [b.op("Relu", [conv2d(b, h, 32, 1, name="c2")], name="r2")],
                 name="gap")
        graph = make_training_graph(
            b.build(head(b, b.op("Flatten", [h], {"axis": 1}, name="flatten"), 5, True)),
            Optimizer(kind="sgd", lr=0.1))
        return graph, blocked_tensors(graph, 16)

    graph, kept = step(lambda b, h: max_pool(b, h, 3, 2, 1, name="pool"))
    grads = {n.op: n.outputs[0] for n in graph.nodes}
    assert {"r1", "pool", "r2", grads["MaxPoolGrad"], grads["AvgPoolGrad"]} <= kept
    assert "gap" not in kept, "a (N, C, 1, 1) output feeding a view stays plain"
    graph, kept = step(lambda b, h: avg_pool(b, h, 2, 2, name="pool"))
    assert "r2" in kept and not {"r1", "pool"} & kept


def test_the_runtime_takes_blocked_images_where_the_planner_keeps_them():
    """executor.cpp's lists are the ops whose OpDef.channel_blocked the planner reads."""
    source = (RUNTIME / "executor.cpp").read_text()

    def listed(name: str) -> set[str]:
        body = re.search(name + r"\[\] = \{(.*?)\};", source, re.S).group(1)
        return set(re.findall(r'"([A-Za-z0-9]+)"', body))

    by_position = {n for n, d in REGISTRY.items() if d.channel_blocked == BY_POSITION}
    own = {n for n, d in REGISTRY.items() if callable(d.channel_blocked)}
    assert listed("kByPosition") - {"Offload", "Prefetch"} == by_position
    assert listed("kOwnLayouts") == own


def test_verify_refuses_a_blocked_image_a_kernel_reads_plain():
    data = blocked_plan(16).model_dump(mode="json", by_alias=True)
    assert verify_graph_data(data) == []
    plain = next(t for t in data["graph"]["tensors"]
                 if not t.get("layout") and len(t["shape"]) == 4 and t["shape"][1] % 16 == 0
                 and t["role"] == "activation")
    plain["layout"] = "nChw16c"
    problems = verify_graph_data(data)
    assert problems and plain["name"] in problems[0] and "does not take" in problems[0]
    # What crosses to the caller (a feed a convolution would take blocked, a parameter) is
    # plain: the graph's own validation refuses a layout there.
    from pydantic import ValidationError

    from planner.ir.graph import Tensor

    for role in ("input", "param", "state"):
        with pytest.raises(ValidationError, match="activation's or gradient's"):
            Tensor(name="x", shape=(2, 16, 4, 4), role=role, layout="nChw16c")
