"""One training step of the generated CPU executor against the numpy reference, for every zoo
model at a small size.

Two checks per model:
  - end to end: the loss and every updated parameter and state tensor after the step, against
    `train_step` in float64 on the same start (rel. error < 1e-4, or 10x what numpy's float32
    step is off by, where rounding alone moves it further: see `allowed`);
  - per op: every node's outputs against its numpy reference applied to the executor's own
    inputs, so each kernel is held to 1e-4 on its own.
Deep BatchNorm nets (inception_v3, densenet) get the per-op check and the loss only: there a
ReLU input within ~1e-6 of zero rounds to either side in float32, and the flipped gradient
element legitimately moves a parameter's update by percents (numpy float32 is no closer to
float64 there than the executor is).
"""

from __future__ import annotations

import numpy as np
import pytest

from planner.frontend.autodiff import make_training_graph
from planner.graph.interpret import random_feeds, train_step
from planner.graph.optimizer import Optimizer
from planner.zoo import build
from tests.codegen.helpers import (
    build_module,
    rel_error,
    start_state,
)
from tests.codegen.zoo_cases import MODELS, SLOW, TOL, check_training_step


@pytest.mark.parametrize("model", [pytest.param(m, marks=pytest.mark.slow) if m in SLOW
                                   else pytest.param(m, marks=pytest.mark.ci_sample)
                                   for m in MODELS])
def test_training_step_matches_reference(model, tmp_path_factory):
    check_training_step(model, tmp_path_factory.mktemp("zoo") / model, "cpu", TOL)


def test_second_step_continues_from_the_first(tmp_path_factory):
    """State stays in the arena between steps: two executor steps equal two reference steps."""
    graph = make_training_graph(build("mlp", **MODELS["mlp"]),
                                Optimizer(kind="adam", lr=0.01))
    module = build_module(graph, tmp_path_factory.mktemp("zoo") / "mlp_adam")
    ex = module.Executor()
    state = start_state(graph)
    ex.load_params(state)
    feeds = [random_feeds(graph, seed=s) for s in (3, 4)]
    losses = [float(ex.step(f)["loss"]) for f in feeds]
    ref_losses = []
    for f in feeds:
        outputs, state = train_step(graph, f, state)
        ref_losses.append(float(outputs["loss"]))
    np.testing.assert_allclose(losses, ref_losses, rtol=TOL)
    got = ex.params()
    for name, want in state.items():
        assert rel_error(got[name], want) < TOL, name


def test_dropout_draws_a_fresh_mask_each_step(tmp_path_factory):
    """The executor reads the training graph's rng/step each step, as the reference does: three
    steps on the same batch match three reference steps, and the count is saved with the state."""
    graph = make_training_graph(build("lstm", **MODELS["lstm"]), Optimizer(kind="sgd", lr=0.1))
    module = build_module(graph, tmp_path_factory.mktemp("zoo") / "lstm_dropout")
    ex = module.Executor()
    state = start_state(graph)
    ex.load_params(state)
    feeds = random_feeds(graph, seed=5)
    losses, ref_losses = [], []
    for _ in range(3):
        losses.append(float(ex.step(feeds)["loss"]))
        outputs, state = train_step(graph, feeds, state)
        ref_losses.append(float(outputs["loss"]))
    np.testing.assert_allclose(losses, ref_losses, rtol=TOL)
    assert int(ex.params()["rng/step"]) == int(state["rng/step"]) == 3
