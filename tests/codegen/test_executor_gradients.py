"""The generated CPU executor's gradient of every parameter after one step, against the numpy
reference interpreter's, for every zoo model at a small size (exported channel-shuffle CNNs:
test_channel_shuffle_gradients.py).

The forward pass is held to the float64 reference, the backward pass to the float64 reference
run on the executor's own forward values, each at the float32 tolerance of
tests/codegen/gradients.py (why teacher-forced: a ReLU input within rounding of zero).
"""

from __future__ import annotations

import pytest

from planner.frontend.autodiff import make_training_graph
from planner.graph.interpret import random_feeds
from planner.graph.optimizer import Optimizer
from planner.zoo import build
from tests.codegen.gradients import check_gradients
from tests.codegen.helpers import build_module, planned_graph, start_state
from tests.codegen.zoo_cases import MODELS, SLOW

# test_zoo_models' sizes, but densenet's batch: at batch 2 its last block normalizes 1x1 maps
# over 2 values each, where BatchNorm's input gradient is zero but for its epsilon, and both
# float32 results are cancellation noise of unrelated size (measured: 11x apart).
SIZES = {**MODELS, "densenet": {**MODELS["densenet"], "batch": 4}}


@pytest.mark.parametrize("model", [pytest.param(m, marks=pytest.mark.slow) if m in SLOW
                                   else pytest.param(m, marks=pytest.mark.ci_sample)
                                   for m in SIZES])
def test_zoo_model_gradients_match_reference(model, tmp_path_factory):
    graph = make_training_graph(build(model, **SIZES[model]), Optimizer(kind="sgd", lr=0.1))
    # Folder names are module names: `load` would shadow an installed package of that name.
    module = build_module(graph, tmp_path_factory.mktemp("grads") / f"grads_{model}")
    # The graph as planned for this host (planner.pipeline.step_graph's rewrites for its
    # cores), which is what the executor runs: every node of it is checked.
    graph = planned_graph(module)
    check_gradients(graph, module, start_state(graph), random_feeds(graph, seed=2))
