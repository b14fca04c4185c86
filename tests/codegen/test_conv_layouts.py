"""Convolutions on their alternative kernels (planner/costs/conv_layouts.py: channels-last, or
the columns kernel for a forward convolution on maps of a few pixels): the same numbers as the
reference, chosen from measured times only, carried through `planner verify --graph`.

The CPU kernel reorders NCHW tensors into nhwc for oneDNN's brgemm kernels and back (or copies
the batch's columns for one matmul), so a step with every convolution on its alternative must
give what the reference interpreter gives, to the float32 tolerance of
tests/codegen/gradients.py (the summation order is another kernel's).
"""

from __future__ import annotations

import json
import re

import pytest

from planner.costs.conv_layouts import (
    COLUMNS,
    CONVOLUTIONS,
    IMAGE_COLUMNS,
    alternative,
    alternatives,
    channels_last,
    conv_layouts,
)
from planner.costs.records import CostEntry, CostTable, CpuSample
from planner.costs.signature import graph_signatures
from planner.frontend.autodiff import make_training_graph
from planner.graph import Graph
from planner.graph.interpret import random_feeds
from planner.graph.optimizer import Optimizer
from planner.graph.validate import GraphError, check_graph
from planner.pipeline import plan
from planner.target.detect import detect
from planner.zoo import build
from tests.codegen.gradients import check_gradients
from tests.codegen.helpers import build_module, host_with_block, start_state
from tests.codegen.zoo_cases import MODELS

SGD = Optimizer(kind="sgd", lr=0.1)


def _training(model: str) -> Graph:
    return make_training_graph(build(model, **MODELS[model]), SGD)


# dcgan, every convolution channels-last: strided 4x4 convolutions and transposed ones (every
# conv op); resnet, every convolution on its alternative: 3x3 and 1x1 ones with BatchNorm
# between them, channels-last on the early stages and the columns kernel on the last two
# (maps of 2x2 and 1x1 pixels).
@pytest.mark.parametrize(("model", "layouts", "want"), [
    ("dcgan", channels_last, {"nhwc"}), ("resnet", alternatives, {"nhwc", COLUMNS})])
def test_alternative_step_matches_reference(model, layouts, want, tmp_path_factory):
    graph = layouts(_training(model))
    assert {n.attrs.get("layout") for n in graph.nodes if n.op in CONVOLUTIONS} == want
    module = build_module(graph, tmp_path_factory.mktemp("layouts") / f"alternative_{model}")
    planned = Graph.model_validate(json.loads(module.plan)["graph"])
    assert {n.attrs.get("layout") for n in planned.nodes if n.op in CONVOLUTIONS} == want
    feeds = random_feeds(planned, seed=2)
    check_gradients(planned, module, start_state(planned), feeds)
    if COLUMNS in want:
        ex = module.Executor()
        ex.load_params(start_state(planned))
        ex.step(feeds)
        impls = {r["name"]: r.get("impl", "") for r in ex.stats()["ops"]}
        ran = {impls[n.name] for n in planned.nodes if n.attrs.get("layout") == COLUMNS}
        assert ran == {"direct:columns + sgemm"}


def _table(graph: Graph, seconds, blocked: bool = False) -> CostTable:
    """Every convolution's signature on its own layout and its alternative (`blocked`: the
    one a step that keeps images blocked weighs), at 1 and 2 threads: seconds(node, layout)
    at one thread, half of it at two."""
    entries = {}
    for layout, g in (("any", graph), ("alternative", alternatives(graph, blocked))):
        for name, sig in graph_signatures(g).items():
            if g.node_map[name].op in CONVOLUTIONS:
                t = seconds(g.node_map[name], layout)
                entries[sig.key] = CostEntry(signature=sig, cpu=(
                    CpuSample(threads=1, affinity="compact", seconds=t),
                    CpuSample(threads=2, affinity="compact", seconds=t / 2)))
    return CostTable(target=detect().name, entries=tuple(entries.values()))


def test_the_layout_measured_faster_is_chosen():
    graph = _training("dcgan")
    # Channels-last faster for the forward convolutions alone.
    table = _table(graph, lambda n, layout: 1.0 if layout != "any" and n.op == "Conv2D" else 2.0)
    chosen = conv_layouts(graph, table)
    for n in chosen.nodes:
        if n.op in CONVOLUTIONS:
            want = alternative(graph, graph.node_map[n.name]) if n.op == "Conv2D" else None
            assert n.attrs.get("layout") == want, n.name
    # Slower everywhere, or not measured: oneDNN's own pick stays (and the graph is the same).
    assert conv_layouts(graph, _table(graph, lambda n, layout: 1.0 + (layout != "any"))) == graph
    assert conv_layouts(graph, CostTable(target="host")) == graph


def test_a_plan_records_its_layouts_and_verify_carries_them(tmp_path):
    from planner.cli.main import main

    graph = _training("dcgan")
    table = _table(graph, lambda n, layout: 1.0 if layout != "any" and n.op == "Conv2D" else 2.0)
    # A host whose step keeps images blocked keeps oneDNN's blocked kernel everywhere
    # (planner.costs.conv_layouts.chosen_layouts: the times measured on plain operands held
    # its reorders); one without a channel block takes the faster alternatives.
    blocked = plan(graph, host_with_block(16), table).graph
    assert not any(n.attrs.get("layout") for n in blocked.nodes)
    p = plan(graph, host_with_block(None), table)
    forward = {n.name for n in p.graph.nodes if n.op == "Conv2D"}
    assert {n.name for n in p.graph.nodes if n.attrs.get("layout")} == forward
    path = tmp_path / "dcgan.plan.json"
    path.write_text(p.to_json())
    graph_path = tmp_path / "dcgan.graph.json"
    graph_path.write_text(graph.to_json())
    assert main(["verify", str(path), "--graph", str(graph_path)]) == 0
    # A layout the op refuses, written into the plan: a problem line, not a traceback.
    data = json.loads(path.read_text())
    node = next(n for n in data["graph"]["nodes"] if n["name"] in forward)
    node["attrs"]["layout"] = "nchw16c"
    path.write_text(json.dumps(data))
    assert main(["verify", str(path), "--graph", str(graph_path)]) == 1


@pytest.mark.parametrize("op, layout, says", [
    ("Conv2D", "nchw", "layout"),  # not a layout at all
    ("ConvTranspose2D", "columns", "'columns'"),  # a layout its kernel does not have
])
def test_a_refused_layout_names_the_node(op, layout, says):
    graph = _training("dcgan")
    conv = next(n for n in graph.nodes if n.op == op)
    bad = graph.model_copy(update={"nodes": tuple(
        n.model_copy(update={"attrs": {**n.attrs, "layout": layout}}) if n is conv else n
        for n in graph.nodes)})
    with pytest.raises(GraphError, match=re.escape(conv.name) + ".*" + says):
        check_graph(bad)


def test_a_blocked_step_weighs_image_columns_in_its_own_layouts(tmp_path):
    """Where the step keeps images blocked, the data gradients onto DCGAN's 3-channel images
    (its discriminator's first layer's, its generator's last transposed convolution) measured
    faster on image_columns, in the step's own tensor layouts, take it, and no other
    convolution moves; the step keeps its blocked tensors, runs the kernel on a blocked dy, and
    matches the reference."""
    from codegen.build import build
    from codegen.load import load
    from codegen.render import render
    from planner.pipeline.choices import step_graph

    graph = _training("dcgan")
    host = host_with_block(8)   # DCGAN's test width: 8-channel images, kept blocked by 8
    step = step_graph(graph, host)
    table = _table(step, lambda n, layout: 1.0 if layout != "any" else 2.0, blocked=True)
    p = plan(graph, host, table)
    chosen = {n.name: n.op for n in p.graph.nodes if n.attrs.get("layout")}
    assert sorted(chosen.values()) == ["Conv2DBackpropInput", "ConvTranspose2D"]
    assert all(p.graph.node_map[name].attrs["layout"] == IMAGE_COLUMNS for name in chosen)
    assert {t.name: t.layout for t in p.graph.tensors} == {t.name: t.layout for t in step.tensors}
    dy = {p.graph.node_map[name].inputs[0] for name in chosen}
    assert any(p.graph.tensor(t).layout for t in dy)
    # Measured slower, or on plain operands only (the pre-step graph's signatures): no change.
    assert not any(n.attrs.get("layout") for n in plan(
        graph, host, _table(step, lambda n, layout: 1.0 + (layout != "any"), blocked=True)
    ).graph.nodes)
    assert not any(n.attrs.get("layout") for n in plan(
        graph, host, _table(graph, lambda n, layout: 1.0 if layout != "any" else 2.0)
    ).graph.nodes)
    module = load(build(render(p, tmp_path / "image_columns", layout="own")).dir)
    feeds = random_feeds(p.graph, seed=2)
    check_gradients(p.graph, module, start_state(p.graph), feeds)
    ex = module.Executor()
    ex.load_params(start_state(p.graph))
    ex.step(feeds)
    impls = {r["name"]: r.get("impl", "") for r in ex.stats()["ops"]}
    assert {impls[name] for name in chosen} == {"direct:image columns + sgemm"}
