"""Session-wide built executors, so each small plan is compiled once per test run (the CPU
runtime itself is built once per host and cached across runs, see codegen/build.py)."""

from __future__ import annotations

import pytest

from planner.frontend.autodiff import make_training_graph
from planner.graph.optimizer import Optimizer
from planner.zoo import build
from tests.codegen.helpers import build_module

MLP = dict(batch=4, hidden=[8], in_features=6, classes=3)


@pytest.fixture(scope="session")
def mlp_graph():
    return make_training_graph(build("mlp", **MLP), Optimizer(kind="sgd", lr=0.1))


@pytest.fixture(scope="session")
def mlp_module(mlp_graph, tmp_path_factory):
    return build_module(mlp_graph, tmp_path_factory.mktemp("built") / "mlp_train")


@pytest.fixture(scope="session")
def mlp_inference_module(tmp_path_factory):
    return build_module(build("mlp", **MLP, loss=False),
                        tmp_path_factory.mktemp("built") / "mlp_infer")
