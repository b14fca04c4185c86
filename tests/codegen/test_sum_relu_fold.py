"""A residual sum's Relu and its gradient folded into the CPU runtime's sum loops
(planner/step/fold_sum_relu.py, kernels/binary.cpp): a ResNet training step computes the bits
of the same step with the ops apart, on plain and channel-blocked images."""

from __future__ import annotations

import pytest

import planner.step as step
from planner.frontend.options import GraphOptions
from planner.frontend.prepare import prepare
from planner.graph.interpret import random_feeds
from planner.graph.optimizer import Optimizer
from tests.codegen.helpers import assert_fold_keeps_bits, start_state, uniform_plan

RESNET = "zoo:resnet?depth=18&batch=2&image=16&width=0.25&classes=5"


@pytest.mark.parametrize("block", [None, 16])
def test_a_folded_resnet_step_gives_the_bits_of_the_ops_apart(block, tmp_path, monkeypatch):
    graph = prepare(RESNET, GraphOptions(optimizer=Optimizer(kind="sgd", lr=0.1,
                                                             momentum=0.9)))
    # The sums stay Adds in both (the BatchNorm before one takes it otherwise:
    # test_norm_sum_fold.py).
    monkeypatch.setattr(step, "fold_norm_sums", lambda g: g)
    folded = uniform_plan(graph, block)
    # The same step without the pass: every other choice alike.
    monkeypatch.setattr(step, "fold_sum_relus", lambda g: g)
    plans = {"folded": folded, "apart": uniform_plan(graph, block)}
    for name, p in plans.items():
        folds = sorted(n.op for n in p.graph.nodes
                       if n.op in ("Add", "AddN") and n.attrs.get("activation") == "relu")
        assert folds == ([] if name == "apart" else ["Add"] * 8 + ["AddN"] * 7), name
    layouts = [{t.name: t.layout for t in p.graph.tensors} for p in plans.values()]
    assert all(layouts[1][t] == layout for t, layout in layouts[0].items())
    if block:  # every sum on blocked images (the pools at either end of the stages take them)
        blocked = [n.name for n in folded.graph.nodes if n.op in ("Add", "AddN")
                   and all(folded.graph.tensor(t).layout for t in (*n.inputs, *n.outputs))]
        assert len(blocked) == 16, blocked
    module = assert_fold_keeps_bits(graph, plans, start_state(graph), random_feeds(graph, seed=5),
                                    tmp_path)["folded"]
    # Run by the sum loops, each with its rule.
    ex = module.Executor()
    ex.load_params(start_state(graph))
    ex.step(random_feeds(graph, seed=5))
    impls = {(o["op"], o.get("impl")) for o in ex.stats()["ops"] if o["op"] in ("Add", "AddN")}
    assert {("Add", "direct:sum + relu"), ("AddN", "direct:sum + relu grad")} <= impls
