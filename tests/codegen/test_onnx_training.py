"""Exported PyTorch models train one SGD step through the generated CPU executor as they do in
PyTorch: the models of tests/importers/torch_models.py, exported in training mode, imported
with a cross-entropy loss, planned for this host, built, loaded with the export's weights and
stepped once; the loss and every parameter and running statistic are held to PyTorch's step
with the same criterion as on the reference (tests/importers/torch_step.py). A model whose
training graph has ops without a CPU kernel is skipped naming them, so it runs once the
kernels exist. Skipped where torch is not installed.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from codegen.backends import RUNTIMES  # noqa: E402
from tests.codegen.helpers import build_module  # noqa: E402
from tests.importers.torch_models import MODELS, model_case  # noqa: E402
from tests.importers.torch_step import (  # noqa: E402
    Step,
    export,
    feeds_of,
    mismatches,
    torch_step,
    training_graph,
)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_executor_step_matches_pytorch(name, tmp_path_factory):
    model, x, labels = model_case(name)
    graph, start = training_graph(export(model, torch.from_numpy(x)))
    missing = sorted({n.op for n in graph.nodes if n.op not in RUNTIMES["cpu"].ops})
    if missing:
        pytest.skip(f"no CPU kernel for {', '.join(missing)}")
    check_step(name, model, x, labels, graph, start, tmp_path_factory)


def test_lstm_step_for_one_core_matches_pytorch(tmp_path_factory):
    """The LSTM's training graph for a 1-core step: its weight gradient one GEMM over all
    steps (planner/frontend/passes/weight_grads.py), its recurrent weight read by every step and
    packed by the runtime once per step (weight_packs.h), stepped by the executor."""
    model, x, labels = model_case("lstm")
    graph, start = training_graph(export(model, torch.from_numpy(x)), cores=1)
    assert not any(n.name.endswith("/gemm0") for n in graph.nodes)
    check_step("lstm_one_core", model, x, labels, graph, start, tmp_path_factory)


def check_step(name, model, x, labels, graph, start, tmp_path_factory) -> None:
    """One executor step of `graph` from `start` against PyTorch's (float32 and float64)."""
    module = build_module(graph, tmp_path_factory.mktemp("onnx_train") / name)
    ex = module.Executor()
    ex.load_params(start)
    loss = float(np.asarray(ex.step(feeds_of(graph, x, labels))["loss"]))
    ours = Step(loss, {k: np.asarray(v) for k, v in ex.params().items()})
    f32 = torch_step(model, x, labels, torch.float32, start)
    f64 = torch_step(model, x, labels, torch.float64, start)
    compared = set(ours.state) & set(f64.state)
    assert compared == {k for k in f64.state if not k.endswith("num_batches_tracked")}
    assert mismatches(ours, f32, f64, compared) == []
