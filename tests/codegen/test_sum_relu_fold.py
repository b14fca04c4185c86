"""A residual sum's Relu and its gradient folded into the CPU runtime's sum loops
(planner/graph/fold_sum_relu.py, kernels/binary.cpp): a ResNet training step computes the bits
of the same step with the ops apart, on plain and channel-blocked images."""

from __future__ import annotations

import numpy as np
import pytest

from codegen.build import build
from codegen.load import load
from codegen.render import render
from planner.frontend.options import GraphOptions
from planner.frontend.prepare import prepare
from planner.graph import step
from planner.graph.interpret import random_feeds
from planner.graph.optimizer import Optimizer
from planner.pipeline import PlanOptions, plan
from planner.schedule import ScheduleOptions
from tests.codegen.helpers import host_with_block, start_state, step_with_values

RESNET = "zoo:resnet?depth=18&batch=2&image=16&width=0.25&classes=5"


@pytest.mark.parametrize("block", [None, 16])
def test_a_folded_resnet_step_gives_the_bits_of_the_ops_apart(block, tmp_path, monkeypatch):
    graph = prepare(RESNET, GraphOptions(optimizer=Optimizer(kind="sgd", lr=0.1,
                                                             momentum=0.9)))
    state, feeds = start_state(graph), random_feeds(graph, seed=5)
    runs, layouts = [], []
    # The sums stay Adds in both (the BatchNorm before one takes it otherwise:
    # test_norm_sum_fold.py).
    monkeypatch.setattr(step, "fold_norm_sums", lambda g: g)
    for name in ("folded", "apart"):
        if name == "apart":  # the same step without the pass: every other choice alike
            monkeypatch.setattr(step, "fold_sum_relus", lambda g: g)
        # One lane of every core: each op's thread count its own (an optimized schedule of
        # fewer ops may move the stem's weight gradient to one thread, and oneDNN's sums of
        # it follow the thread count: not the fold's bits to compare).
        p = plan(graph, host_with_block(block), options=PlanOptions(
            schedule=ScheduleOptions(strategy="uniform")))
        layouts.append({t.name: t.layout for t in p.graph.tensors})
        folds = sorted(n.op for n in p.graph.nodes
                       if n.op in ("Add", "AddN") and n.attrs.get("activation") == "relu")
        assert folds == ([] if name == "apart" else ["Add"] * 8 + ["AddN"] * 7), name
        if block and name == "folded":  # every sum on blocked images (the pools at either
            # end of the stages take them too)
            blocked = [n.name for n in p.graph.nodes if n.op in ("Add", "AddN")
                       and all(p.graph.tensor(t).layout for t in (*n.inputs, *n.outputs))]
            assert len(blocked) == 16, blocked
        module = load(build(render(p, tmp_path / f"{name}{block}", layout="own")).dir)
        runs.append(step_with_values(module, p.graph, state, feeds))
        if name == "folded":  # run by the sum loops, each with its rule
            ex = module.Executor()
            ex.load_params(state)
            ex.step(feeds)
            impls = {(o["op"], o.get("impl")) for o in ex.stats()["ops"]
                     if o["op"] in ("Add", "AddN")}
            assert {("Add", "direct:sum + relu"), ("AddN", "direct:sum + relu grad")} <= impls
    folded, apart = runs
    assert all(layouts[1][t] == layout for t, layout in layouts[0].items())
    assert set(folded) < set(apart)
    updated = {t.updates for t in graph.tensors if t.updates and t.role == "param"}
    assert updated <= set(folded)
    for name, value in folded.items():
        np.testing.assert_array_equal(value, apart[name], err_msg=name)
