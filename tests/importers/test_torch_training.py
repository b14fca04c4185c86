"""Exported PyTorch models train through the planner as they do in PyTorch: for each model of
torch_models.py, the training-mode export is imported, a cross-entropy loss attached, and one
SGD step on the numpy reference matches PyTorch's step (loss within 1e-4 relative; every
parameter and BatchNorm running statistic within the float32 noise PyTorch shows against
float64; see torch_step.py). Skipped where torch is not installed.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from tests.importers.torch_models import CLASSES, MODELS  # noqa: E402
from tests.importers.torch_step import (  # noqa: E402
    export,
    mismatches,
    planner_step,
    torch_step,
    training_graph,
)

# The dynamo exporter writes BatchNormalization in inference form even from a train()-mode
# module (and folds it into the convolution), so only models without BatchNorm can match
# PyTorch's training step through it.
DYNAMO_MODELS = ["squeezenet", "transformer", "lstm"]


def _case(name: str, seed: int = 0):
    make, shape = MODELS[name]
    torch.manual_seed(seed)
    model = make()
    with torch.no_grad():
        # Moved off their initial constants (LayerNorm's ones and zeros): the dynamo exporter
        # merges initializers of equal value, which would tie fresh norm layers' weights.
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(np.float32)
    labels = rng.integers(0, CLASSES, shape[0]).astype(np.int64)
    return model, x, labels


@pytest.mark.parametrize("name", sorted(MODELS))
def test_one_sgd_step_matches_pytorch(name):
    model, x, labels = _case(name)
    ours, start = planner_step(export(model, torch.from_numpy(x)), x, labels)
    f32 = torch_step(model, x, labels, torch.float32, start)
    f64 = torch_step(model, x, labels, torch.float64, start)
    compared = set(ours.state) & set(f64.state)
    # Every parameter and buffer of the module but BatchNorm's step counter is compared.
    assert compared == {k for k in f64.state if not k.endswith("num_batches_tracked")}
    assert mismatches(ours, f32, f64) == []


@pytest.mark.parametrize("name", DYNAMO_MODELS)
def test_dynamo_export_matches_pytorch(name):
    pytest.importorskip("onnxscript")  # the dynamo exporter's translator
    model, x, labels = _case(name)
    ours, start = planner_step(export(model, torch.from_numpy(x), dynamo=True, opset=18), x,
                               labels)
    f32 = torch_step(model, x, labels, torch.float32, start)
    f64 = torch_step(model, x, labels, torch.float64, start)
    # The dynamo exporter renames weights it rewrites (an LSTM's reordered gates): compare
    # those it keeps by name, which always include the head.
    compared = set(ours.state) & set(f64.state)
    assert {"head.weight", "head.bias"} <= compared or "classifier.1.weight" in compared
    assert mismatches(ours, f32, f64, compared) == []


def test_batchnorm_running_statistics_follow_pytorch_train():
    model, x, labels = _case("resnet")
    graph, _ = training_graph(export(model, torch.from_numpy(x)))
    updated = {t.updates for t in graph.tensors if t.updates}
    stats = {k for k in model.state_dict() if k.endswith(("running_mean", "running_var"))}
    assert stats and stats <= updated


def test_dropout_keeps_its_ratio():
    model, x, _ = _case("vgg_bn")
    graph, _ = training_graph(export(model, torch.from_numpy(x)))
    dropouts = [n for n in graph.nodes if n.op == "Dropout"]
    assert [n.attrs["rate"] for n in dropouts] == [pytest.approx(0.5)]
    assert any(n.op == "DropoutGrad" for n in graph.nodes)


def test_inference_export_trains_with_frozen_statistics():
    model, x, _ = _case("resnet")
    model.eval()
    import io

    f = io.BytesIO()
    torch.onnx.export(model, (torch.from_numpy(x),), f, dynamo=False, opset_version=17)
    graph, _ = training_graph(f.getvalue())
    assert all(not n.attrs["training"] for n in graph.nodes if n.op == "BatchNorm")
    assert not any(t.updates and "running" in t.updates for t in graph.tensors)
