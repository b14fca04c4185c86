"""evaluate() from the same build (Plan.evaluation): the forward graph in inference mode on
the parameters the steps train, checked against the numpy reference interpreter run on
evaluation_graph, and against the bytes it must not change."""

from __future__ import annotations

import json

import numpy as np
import pytest

from planner.frontend.prepare import GraphOptions, prepare
from planner.graph.evaluation import evaluation_graph
from planner.graph.interpret import random_feeds, run
from planner.graph.optimizer import Optimizer
from planner.ir.graph import Graph
from tests.codegen.helpers import build_module, rel_error
from tests.graph.evaluation_cases import bn_dropout_net


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    graph = prepare(bn_dropout_net(), GraphOptions(optimizer=Optimizer(kind="adam", lr=0.05)))
    module = build_module(graph, tmp_path_factory.mktemp("built") / "bn_dropout_eval")
    # The graph as planned for this host: its evaluation graph is what evaluate runs.
    planned = Graph.model_validate(json.loads(module.plan)["graph"])
    return planned, module


def started(module, graph: Graph):
    """An executor with its parameters drawn and running statistics off their start values
    (zero mean, unit variance would make BatchNorm's inference form nearly the identity)."""
    ex = module.Executor(init=True)
    rng = np.random.default_rng(5)
    ex.load_params({"bn/running_mean": rng.standard_normal(4).astype(np.float32),
                    "bn/running_var": rng.uniform(0.5, 2.0, 4).astype(np.float32)},
                   partial=True)
    return ex


def reference(graph: Graph, ex, feeds) -> dict[str, np.ndarray]:
    e = evaluation_graph(graph)
    return run(e, feeds, ex.params(), keep="outputs")


def check(got, want) -> None:
    assert set(got) == set(want) == {"fc2", "loss"}
    # float32 sums of a few products each: a few ulps of the largest value.
    for name in want:
        assert rel_error(got[name], want[name]) < 1e-5, name


def test_evaluate_equals_the_reference_on_the_evaluation_graph(built):
    graph, module = built
    ex = started(module, graph)
    feeds = random_feeds(graph, seed=3)
    check(ex.evaluate(feeds), reference(graph, ex, feeds))
    # Dropout is the identity and BatchNorm reads running statistics: the same twice.
    again = ex.evaluate(feeds)
    np.testing.assert_array_equal(again["fc2"], ex.evaluate(feeds)["fc2"])


def test_evaluate_changes_nothing_of_the_step(built):
    graph, module = built
    ex = started(module, graph)
    feeds = random_feeds(graph, seed=4)
    ex.step(feeds)  # optimizer state and step counts are no longer their zeros
    before, steps = ex.params(), ex.stats()["steps"]
    assert {"optim/step", "rng/step", "optim/w1/m"} <= set(before)
    ex.evaluate(feeds)
    after = ex.params()
    assert ex.stats()["steps"] == steps
    for name, value in before.items():
        assert after[name].tobytes() == value.tobytes(), name


def test_evaluate_after_steps_reads_the_trained_parameters(built):
    graph, module = built
    ex = started(module, graph)
    feeds = random_feeds(graph, seed=6)
    first = ex.evaluate(feeds)
    for _ in range(3):
        ex.step(feeds)
    got = ex.evaluate(feeds)
    check(got, reference(graph, ex, feeds))  # the parameters as the steps left them
    assert rel_error(got["fc2"], first["fc2"]) > 1e-3  # and not those it started with


def test_evaluate_checks_its_feeds(built):
    graph, module = built
    ex = started(module, graph)
    feeds = random_feeds(graph, seed=7)
    with pytest.raises(ValueError, match="missing feed 'y'"):
        ex.evaluate({"x": feeds["x"]})
    with pytest.raises(ValueError, match="'w1' is not an input of the evaluation"):
        ex.evaluate({**feeds, "w1": feeds["x"]})
    with pytest.raises(ValueError, match="feed 'x' has shape"):
        ex.evaluate({**feeds, "x": feeds["x"][:2]})
    with pytest.raises(RuntimeError, match="loss"):  # a label out of range, named by its op
        ex.evaluate({**feeds, "y": np.full(6, 9, np.int64)})
    assert ex.has_evaluation


def test_a_plan_without_an_evaluation_refuses_evaluate(mlp_inference_module):
    ex = mlp_inference_module.Executor(init=True)
    assert not ex.has_evaluation
    with pytest.raises(ValueError, match="carries no evaluation schedule"):
        ex.evaluate({})


@pytest.mark.parametrize("model", ["resnet", "gpt", "lstm"])
def test_zoo_models_evaluate_as_the_reference_with_the_planned_arena(model, tmp_path):
    """Convolutions and BatchNorm, attention, an unrolled LSTM, with the memory plan's offsets
    (the training arena shared, the evaluation's own from its arena_offset)."""
    from planner.frontend.autodiff import make_training_graph
    from planner.zoo import build
    from tests.codegen.helpers import start_state
    from tests.codegen.zoo_cases import MODELS

    graph = make_training_graph(build(model, **MODELS[model]), Optimizer(kind="sgd", lr=0.01))
    module = build_module(graph, tmp_path / model, layout="plan")
    planned = Graph.model_validate(json.loads(module.plan)["graph"])
    ex = module.Executor()
    ex.load_params(start_state(planned))
    feeds = random_feeds(planned, seed=3)
    ex.step(feeds)
    got = ex.evaluate(feeds)
    want = run(evaluation_graph(planned), feeds, ex.params(), keep="outputs")
    assert set(got) == set(want)
    for name in want:  # float32 sums over at most a few hundred terms
        assert rel_error(got[name], want[name]) < 1e-5, name
