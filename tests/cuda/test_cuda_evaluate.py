"""evaluate() on the CUDA executor: the same checks as the CPU's (tests/codegen/
test_evaluate.py) on a GPU: the reference interpreter on evaluation_graph's inputs, nothing of
the step changed, the trained parameters read in place. Needs a GPU (marked `gpu`)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from codegen.build import build
from codegen.load import load
from codegen.render import render
from planner.frontend.prepare import GraphOptions, prepare
from planner.graph.evaluation import evaluation_graph
from planner.graph.interpret import random_feeds, run
from planner.graph.optimizer import Optimizer
from planner.ir.graph import Graph
from tests.codegen.helpers import gpu_plan, rel_error
from tests.graph.evaluation_cases import bn_dropout_net


@pytest.mark.gpu
def test_cuda_evaluate_equals_the_reference_and_changes_nothing(tmp_path):
    graph = prepare(bn_dropout_net(), GraphOptions(optimizer=Optimizer(kind="adam", lr=0.05)))
    module = load(build(render(gpu_plan(graph), tmp_path / "bn_dropout_cuda")).dir)
    planned = Graph.model_validate(json.loads(module.plan)["graph"])
    ex = module.Executor(init=True)
    rng = np.random.default_rng(5)
    ex.load_params({"bn/running_mean": rng.standard_normal(4).astype(np.float32),
                    "bn/running_var": rng.uniform(0.5, 2.0, 4).astype(np.float32)},
                   partial=True)
    feeds = random_feeds(planned, seed=3)
    for _ in range(2):
        ex.step(feeds)
    before = ex.params()
    got = ex.evaluate(feeds)
    after = ex.params()
    assert all(after[k].tobytes() == v.tobytes() for k, v in before.items())
    want = run(evaluation_graph(planned), feeds, after, keep="outputs")
    # cuBLAS may use TF32 only under the tf32 policy: float32 here, a few ulps.
    for name in ("fc2", "loss"):
        assert rel_error(got[name], want[name]) < 1e-5, name
