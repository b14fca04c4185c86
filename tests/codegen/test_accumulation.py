"""Gradient accumulation on the CPU executor: each step() takes one micro-batch, the
optimizer step's ops run on every K-th only (the executor reads optim/micro_step), and over
two optimizer steps and one micro-batch more the parameters, optimizer state and gradient sums
follow the float64 reference within 10x the float32 reference's own distance from it."""

from __future__ import annotations

import json

import numpy as np

from planner.frontend.options import GraphOptions
from planner.frontend.prepare import prepare
from planner.graph.interpret import random_feeds, train_step, widened
from planner.graph.optimizer import Optimizer, ParamGroup
from planner.ir.accumulation import MICRO_STEP, optimizer_step_nodes
from planner.ir.graph import Graph
from tests.codegen.helpers import build_module, rel_error, start_state

K = 4


def test_micro_batches_on_the_executor_follow_the_reference(tmp_path):
    optimizer = Optimizer(kind="adamw", lr=0.01, clip_grad_norm=0.5,
                          groups=[ParamGroup(params="bias$", weight_decay=0.0)])
    graph = prepare("zoo:mlp?batch=4&hidden=32&in_features=16&classes=5",
                    GraphOptions(optimizer=optimizer, accumulate=K))
    module = build_module(graph, tmp_path / "mlp_accumulate")
    ex = module.Executor()
    graph = Graph.model_validate(json.loads(ex.plan)["graph"])  # as planned for the cores
    start = start_state(graph)
    ex.load_params(start)
    single = dict(start)
    exact = {n: v.astype(np.float64) if v.dtype == np.float32 else v for n, v in start.items()}
    wide = widened(graph)
    step_only = optimizer_step_nodes(graph)
    for m in range(2 * K + 1):
        feeds = random_feeds(graph, seed=m)
        ex.step(feeds)
        _, single = train_step(graph, feeds, single)
        _, exact = train_step(wide, feeds, exact)
        spans = {o["name"]: o["end"] - o["start"] for o in ex.stats()["ops"]}
        ran = {name for name in step_only if spans.get(name, 0.0) > 0.0}
        assert ran == (set(step_only) if m % K == K - 1 else set()), m
        if m < K - 1:  # no optimizer step yet: the parameters are the loaded ones, exactly
            np.testing.assert_array_equal(ex.params()["fc1/weight"], start["fc1/weight"])
    got = ex.params()
    assert int(got[MICRO_STEP]) == 2 * K + 1 and float(got["optim/step"]) == 2.0
    for name, want in exact.items():
        if want.dtype != np.float64:
            continue
        floor = 10 * rel_error(single[name], want)
        assert rel_error(got[name], want) <= max(floor, 1e-6), name
