"""Exported PyTorch models train through the planner as they do in PyTorch: for each model of
torch_models.py, the training-mode export is imported, a cross-entropy loss attached, and one
SGD step on the numpy reference matches PyTorch's step (loss within 1e-4 relative; every
parameter and BatchNorm running statistic within the float32 noise PyTorch shows against
float64; see torch_step.py). Skipped where torch is not installed.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from planner.graph.interpret import train_step  # noqa: E402
from tests.importers.torch_models import MODELS, model_case  # noqa: E402
from tests.importers.torch_step import (  # noqa: E402
    LR,
    export,
    feeds_of,
    mismatches,
    planner_step,
    torch_step,
    training_graph,
    with_planner_dropout,
)

# The dynamo exporter writes BatchNormalization in inference form even from a train()-mode
# module (and folds it into the convolution), so only models without BatchNorm can match
# PyTorch's training step through it.
DYNAMO_MODELS = ["squeezenet", "transformer", "lstm"]


@pytest.mark.parametrize("name", sorted(MODELS))
def test_one_sgd_step_matches_pytorch(name):
    model, x, labels = model_case(name)
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
    model, x, labels = model_case(name)
    ours, start = planner_step(export(model, torch.from_numpy(x), dynamo=True, opset=18), x,
                               labels)
    f32 = torch_step(model, x, labels, torch.float32, start)
    f64 = torch_step(model, x, labels, torch.float64, start)
    # The dynamo exporter renames weights it rewrites (an LSTM's reordered gates): compare
    # those it keeps by name, which always include the head.
    compared = set(ours.state) & set(f64.state)
    assert {"head.weight", "head.bias"} <= compared or "classifier.1.weight" in compared
    assert mismatches(ours, f32, f64, compared) == []


# Opsets 7-21 through the legacy exporter, for models it exports there: the transformer needs
# opset 14 (unflatten, scaled_dot_product_attention), the LSTM 9 (opset 7 writes the retired
# ConstantFill); Dropout says it trains only from opset 12, so models with Dropout are left
# out below it.
OPSETS = [(m, o) for m in ("resnet", "shufflenet", "densenet") for o in (7, 9, 11, 13, 15, 21)]
OPSETS += [("lstm", 9), ("lstm", 21), ("transformer", 14), ("transformer", 21),
           ("vgg_bn", 12), ("mobilenet", 21)]


@pytest.mark.parametrize(("name", "opset"), OPSETS)
def test_opsets(name, opset):
    model, x, labels = model_case(name)
    ours, start = planner_step(export(model, torch.from_numpy(x), opset=opset), x, labels)
    f32 = torch_step(model, x, labels, torch.float32, start)
    f64 = torch_step(model, x, labels, torch.float64, start)
    assert mismatches(ours, f32, f64) == []


@pytest.mark.parametrize("name", sorted(set(MODELS) - set(DYNAMO_MODELS)))
def test_dynamo_exports_of_batchnorm_models_train(name):
    # Their BatchNorm comes out folded into the convolutions: they import and train as the
    # inference-mode networks the exporter wrote. So the loss is PyTorch's eval() loss with
    # the planner's dropout masks (in float64; 1e-5 relative: float32 rounding through the
    # network), and the SGD step moves each parameter by -lr times the loss's gradient:
    # checked, for the four parameters with the largest step, against central differences of
    # the loss along that step.
    pytest.importorskip("onnxscript")
    model, x, labels = model_case(name)
    graph, state = training_graph(export(model, torch.from_numpy(x), dynamo=True, opset=18))
    feeds = feeds_of(graph, x, labels)
    outputs, new = train_step(graph, feeds, state)
    loss = float(outputs["loss"])
    reference = with_planner_dropout(copy.deepcopy(model).eval().double())
    with torch.no_grad():
        want = nn.functional.cross_entropy(reference(torch.from_numpy(x).double()),
                                           torch.from_numpy(labels)).item()
    assert loss == pytest.approx(want, rel=1e-5)

    def loss_at(name: str, shift: np.ndarray) -> float:
        moved = {**state, name: (state[name] + shift).astype(np.float32)}
        return float(train_step(graph, feeds, moved)[0]["loss"])

    params = sorted({t.updates for t in graph.tensors
                     if t.updates and graph.tensor(t.updates).role == "param"})
    grads = {k: (state[k].astype(np.float64) - new[k]) / LR for k in params}
    for k in sorted(params, key=lambda k: -np.linalg.norm(grads[k]))[:4]:
        norm = np.linalg.norm(grads[k])
        assert norm > 0, k
        # Steps that change the loss by 1e-3, 3e-4 and 1e-4 of itself: float32 rounding of
        # the loss (~1e-7 relative) is then at most ~1e-3 of the difference, the curvature
        # less; the median, since one step may cross a ReLU's or a max pool's kink (vgg_bn's
        # second convolution does at 1e-3); 1e-2 allowed.
        along = grads[k] / norm
        slopes = []
        for change in (1e-3, 3e-4, 1e-4):
            eps = change * abs(loss) / norm
            slopes.append((loss_at(k, eps * along) - loss_at(k, -eps * along)) / (2 * eps))
        assert float(np.median(slopes)) == pytest.approx(norm, rel=1e-2), (k, slopes)


def test_batchnorm_running_statistics_follow_pytorch_train():
    model, x, labels = model_case("resnet")
    graph, _ = training_graph(export(model, torch.from_numpy(x)))
    updated = {t.updates for t in graph.tensors if t.updates}
    stats = {k for k in model.state_dict() if k.endswith(("running_mean", "running_var"))}
    assert stats and stats <= updated


def test_dropout_keeps_its_ratio():
    model, x, _ = model_case("vgg_bn")
    graph, _ = training_graph(export(model, torch.from_numpy(x)))
    dropouts = [n for n in graph.nodes if n.op == "Dropout"]
    assert [n.attrs["rate"] for n in dropouts] == [pytest.approx(0.5)]
    assert any(n.op == "DropoutGrad" for n in graph.nodes)


def test_inference_export_trains_with_frozen_statistics():
    model, x, _ = model_case("resnet")
    model.eval()
    import io

    f = io.BytesIO()
    torch.onnx.export(model, (torch.from_numpy(x),), f, dynamo=False, opset_version=17)
    graph, _ = training_graph(f.getvalue())
    assert all(not n.attrs["training"] for n in graph.nodes if n.op == "BatchNorm")
    assert not any(t.updates and "running" in t.updates for t in graph.tensors)


class _WithLoss(torch.nn.Module):
    """A model whose forward ends in its loss, as some training exports do."""

    def __init__(self, net):
        super().__init__()
        self.net = net

    def forward(self, x, labels):
        return torch.nn.functional.cross_entropy(self.net(x), labels)


def test_export_with_its_loss_trains_without_attaching_one():
    import io

    from planner.frontend.autodiff import make_training_graph
    from planner.graph import Optimizer, init_params
    from planner.importers import import_onnx

    model, x, labels = model_case("resnet")
    f = io.BytesIO()
    torch.onnx.export(_WithLoss(model).train(), (torch.from_numpy(x), torch.from_numpy(labels)),
                      f, dynamo=False, opset_version=17, input_names=["images", "labels"],
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
    imported = import_onnx(f.getvalue())
    assert [n.op for n in imported.graph.nodes][-1] == "SoftmaxCrossEntropy"
    assert imported.graph.tensor("labels").role == "label"
    graph = make_training_graph(imported.graph, Optimizer(kind="sgd", lr=0.1))
    start = {**init_params(graph), **imported.params()}
    outputs, new = train_step(graph, {"images": x, "labels": labels}, start)
    plain = {k.removeprefix("net."): v for k, v in start.items()}
    f32 = torch_step(model, x, labels, torch.float32, plain)
    f64 = torch_step(model, x, labels, torch.float64, plain)
    ours = type(f32)(float(outputs[graph.outputs[0]]),
                     {k.removeprefix("net."): v for k, v in new.items()})
    assert mismatches(ours, f32, f64) == []
