"""A residual block's sum folded into the BatchNorm before it (planner/step/fold_norm_sum.py,
kernels/batch_norm.cpp): a ResNet training step computes the bits of the same step with the ops
apart, on plain and channel-blocked images; evaluate() of the folded build (the BatchNorm's
inference form with the sum) gives the reference's values; the runtime refuses a residual its
loops do not run."""

from __future__ import annotations

import pytest

import planner.step as step
from codegen.build import build
from codegen.load import load
from codegen.render import render
from planner.frontend.options import GraphOptions
from planner.frontend.prepare import prepare
from planner.graph.evaluation import evaluation_graph
from planner.graph.interpret import random_feeds
from planner.graph.optimizer import Optimizer
from planner.ir.graph import Graph
from planner.pipeline import plan
from tests.codegen.helpers import (
    assert_evaluate_matches_reference,
    assert_fold_keeps_bits,
    host_with_block,
    start_state,
    uniform_plan,
)

RESNET = "zoo:resnet?depth=18&batch=2&image=16&width=0.25&classes=5"


def _residual_norms(graph: Graph) -> list[str]:
    return [n.name for n in graph.nodes if n.op == "BatchNorm" and len(n.inputs) == 6]


@pytest.mark.parametrize("block", [None, 16])
def test_a_folded_resnet_step_gives_the_bits_of_the_ops_apart(block, tmp_path, monkeypatch):
    graph = prepare(RESNET, GraphOptions(optimizer=Optimizer(kind="sgd", lr=0.1,
                                                             momentum=0.9)))
    folded = uniform_plan(graph, block)
    # The same step without the pass: every other choice alike.
    monkeypatch.setattr(step, "fold_norm_sums", lambda g: g)
    plans = {"folded": folded, "apart": uniform_plan(graph, block)}
    # The last BatchNorm of each block on maps of 4x4 and 2x2 (layer3's and layer4's 1x1 maps:
    # one element per channel and image, not the loops') takes its sum, the main branch's in a
    # downsampling block.
    norms = _residual_norms(folded.graph)
    assert len(norms) == 4 and not _residual_norms(plans["apart"].graph), norms
    assert all(folded.graph.node_map[n].attrs["activation"] == "relu" for n in norms)
    layouts = [{t.name: t.layout for t in p.graph.tensors} for p in plans.values()]
    assert all(layouts[1][t] == layout for t, layout in layouts[0].items())
    if block:  # the shortcuts blocked with the sums
        assert all(folded.graph.tensor(t).layout for n in norms
                   for t in (*folded.graph.node_map[n].inputs[::5],
                             folded.graph.node_map[n].outputs[0]))
    assert_fold_keeps_bits(graph, plans, start_state(graph), random_feeds(graph, seed=5), tmp_path)


def test_evaluate_of_a_folded_step_gives_the_reference_values(tmp_path):
    graph = prepare(RESNET, GraphOptions(optimizer=Optimizer(kind="sgd", lr=0.1)))
    p = plan(graph, host_with_block(None))
    assert _residual_norms(p.graph)
    assert _residual_norms(evaluation_graph(p.graph)), "the inference form keeps the sum"
    # float32 convolutions' sums over at most 3x3x64 products, a few roundings each layer:
    # 1e-4 of the largest value.
    assert_evaluate_matches_reference(p, graph, tmp_path / "eval", 1e-4)


def test_the_runtime_refuses_a_residual_its_loops_do_not_run(tmp_path):
    """A plan (a hostile one: the fold makes none) folding a sum into a BatchNorm1d, whose
    (N, C) image has one element per channel and image, is refused at load rather than run
    without the sum."""
    from planner.graph.builder import GraphBuilder

    b = GraphBuilder("bn1d_sum")
    x, s = b.input("x", (6, 4)), b.input("s", (6, 4))
    params = [b.input(n, (4,)) for n in ("scale", "bias", "mean", "var")]
    outs = b.op_n("BatchNorm", [x, *params, s], {}, name="bn")
    p = plan(b.build(outputs=outs), host_with_block(None))
    module = load(build(render(p, tmp_path / "bn1d", layout="own")).dir)
    with pytest.raises(Exception, match="folded residual or leaky_relu needs the float32 loops"):
        module.Executor()

