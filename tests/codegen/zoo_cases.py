"""The zoo models at the small sizes the executor tests run, and one training step of a
model's executor against the numpy reference (tests/codegen/test_zoo_models.py's check, which
the CUDA, pinned, memory-budget and stream tests repeat on their own executors)."""

from __future__ import annotations

from planner.frontend.autodiff import make_training_graph
from planner.graph.interpret import random_feeds, train_step, widened
from planner.graph.optimizer import Optimizer
from planner.pipeline import step_graph
from planner.target.detect import detect
from planner.zoo import build
from tests.codegen.helpers import (
    build_module,
    gpu_test_target,
    node_errors,
    rel_error,
    start_state,
    step_with_values,
)

TOL = 1e-4

MODELS = {
    "mlp": dict(batch=4, hidden=[8], in_features=6, classes=3),
    "lenet": dict(batch=4, image=12),
    "alexnet": dict(batch=2, image=67, width=0.0625, classes=10),
    "resnet": dict(batch=4, image=32, depth=18, width=0.125, classes=10),
    "inception_v3": dict(batch=2, image=75, width=0.0625, classes=10),
    "densenet": dict(batch=2, image=32, width=0.125, classes=10),
    "wide_deep": dict(batch=8, tables=3, vocab=[20], dim=4, dense=5, hidden=[16, 8]),
    "dcgan": dict(batch=4, image=16, nz=8, width=0.125),
    "lstm": dict(batch=2, seq=3, hidden=8, layers=2, vocab=20),
    "gpt": dict(batch=2, seq=8, dim=16, heads=2, layers=2, vocab=23),
    "bert": dict(batch=2, seq=8, dim=16, heads=2, layers=2, vocab=23),
}
END_TO_END = {"mlp", "lenet", "alexnet", "resnet", "wide_deep", "dcgan", "lstm", "gpt", "bert"}
SLOW = {"inception_v3", "densenet", "alexnet"}


def check_training_step(model: str, folder, backend: str, tol: float, **options) -> None:
    """One step of `model`'s executor on `backend` against the numpy reference (module
    docstring); `options` go to the executor (streams, cuda_graph)."""
    graph = make_training_graph(build(model, **MODELS[model]), Optimizer(kind="sgd", lr=0.1))
    # As planned for the target (planner.pipeline.step_graph: its CPU cores' rewrites): every
    # node the executor runs is compared.
    graph = step_graph(graph, detect() if backend == "cpu" else gpu_test_target())
    module = build_module(graph, folder, backend)
    state = start_state(graph)
    feeds = random_feeds(graph, seed=2)
    values = step_with_values(module, graph, state, feeds, **options)

    worst = sorted(node_errors(graph, values))[-3:]
    assert worst[-1][0] < tol, f"{model}: ops off the reference: {worst}"

    outputs, new_state = train_step(graph, feeds, state)
    exact_out, exact_state = train_step(widened(graph), feeds, state)
    assert rel_error(values["loss"], exact_out["loss"]) < allowed(outputs["loss"],
                                                                  exact_out["loss"], tol)
    if model in END_TO_END:
        updated = {t.updates: t.name for t in graph.tensors if t.updates}
        assert updated, "a training graph updates something"
        errors = sorted((rel_error(values[name], exact_state[target])
                         / allowed(new_state[target], exact_state[target], tol), target)
                        for target, name in updated.items())
        assert errors[-1][0] < 1, f"{model}: updated tensors off the reference (error / " \
                                  f"allowed): {errors[-3:]}"


def allowed(single, exact, tol: float = TOL) -> float:
    """The error a float32 result may have against the float64 reference: tol, or ten times
    numpy's own float32 error where that is larger. A float32 sum of n terms is off by up to
    about n * 2^-24 of the summed magnitudes, and by how much within that depends on the
    summation order (numpy's pairwise order, a kernel's blocked one): a gradient summed over
    4096 positions with cancellation legitimately lands 1e-4 away on one CPU and not another."""
    return max(tol, 10 * rel_error(single, exact))
