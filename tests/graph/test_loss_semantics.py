"""Cross-entropy as PyTorch's F.cross_entropy: the SoftmaxCrossEntropy op's class axis,
ignore_index and label smoothing (reference and gradient vs torch, the gradient rule vs finite
differences), attach_loss's choice of the class axis (and what it refuses), and a UNet-like
export whose 32 classes on 32x32 images (C == W) trains one SGD step as in PyTorch, on the
reference and through the generated CPU executor."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402

from planner.cli import main  # noqa: E402
from planner.frontend.loss import LossError, attach_loss, parse_loss_spec  # noqa: E402
from planner.graph import GraphBuilder  # noqa: E402
from planner.graph.interpret import run, train_step  # noqa: E402
from planner.ops import OpError, TensorType, get_op  # noqa: E402
from tests.ops.opcheck import apply_rule, check_gradient, reference, rel_error  # noqa: E402

F = torch.nn.functional

# (logits shape, class axis, ignore_index, label_smoothing)
CASES = [
    ((4, 5), 1, -100, 0.0),
    ((2, 6, 3, 3), 1, -100, 0.0),
    ((2, 5, 4, 4), 1, 2, 0.1),
    ((3, 4, 5), -1, 0, 0.2),
    ((2, 3, 4), 1, -100, 0.3),
]


def _case(shape, axis, ignore, dtype, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(dtype)
    classes = shape[axis]
    labels = rng.integers(0, classes, shape[:axis % len(shape)] + shape[axis % len(shape) + 1:])
    labels.flat[::3] = ignore if ignore < 0 else labels.flat[::3]  # some positions ignored
    labels.flat[1] = ignore
    return x, labels.astype(np.int64), {"axis": axis, "ignore_index": ignore,
                                        "label_smoothing": 0.0}


def _torch_ce(axis, ignore, eps):
    def ce(x, labels):
        return F.cross_entropy(x.movedim(axis, 1), labels, ignore_index=ignore,
                               label_smoothing=eps)
    return ce


@pytest.mark.parametrize("shape,axis,ignore,eps", CASES)
def test_reference_matches_f_cross_entropy(shape, axis, ignore, eps):
    x, labels, attrs = _case(shape, axis, ignore, np.float32)
    attrs["label_smoothing"] = eps
    ours = reference("SoftmaxCrossEntropy", [x, labels], attrs)[0]
    theirs = _torch_ce(axis, ignore, eps)(torch.tensor(x), torch.tensor(labels)).numpy()
    assert ours.shape == () and ours.dtype == np.float32
    # float32 sums of at most a few dozen terms of size ~log C: a few ulps of the loss.
    assert rel_error(ours, theirs) < 1e-5


@pytest.mark.parametrize("shape,axis,ignore,eps", CASES)
def test_gradient_matches_torch_autograd_and_finite_differences(shape, axis, ignore, eps):
    x, labels, attrs = _case(shape, axis, ignore, np.float64, seed=1)
    attrs["label_smoothing"] = eps
    grads, dys = check_gradient("SoftmaxCrossEntropy", [x, labels], attrs)
    assert grads[1] is None
    tx = torch.tensor(x, requires_grad=True)
    (_torch_ce(axis, ignore, eps)(tx, torch.tensor(labels)) * float(dys[0])).backward()
    assert rel_error(grads[0], tx.grad.numpy()) < 1e-12
    ignored = np.moveaxis(grads[0], axis, -1)[labels == ignore]
    assert ignored.size and not ignored.any()


def test_gradient_rule_passes_the_attributes_on():
    x, labels, attrs = _case((2, 5, 4, 4), 1, 2, np.float64)
    attrs["label_smoothing"] = 0.25
    *_, emitted = apply_rule("SoftmaxCrossEntropy", [x, labels], attrs)
    assert emitted == ["SoftmaxCrossEntropyGrad"]


def test_every_label_ignored_gives_nan_as_pytorch():
    x, labels = np.zeros((2, 3), np.float32), np.full(2, -100)
    theirs = F.cross_entropy(torch.tensor(x), torch.tensor(labels))
    assert np.isnan(reference("SoftmaxCrossEntropy", [x, labels])[0]) and torch.isnan(theirs)


def test_label_out_of_range_names_the_ignore_index():
    with pytest.raises(OpError, match=r"label 7 out of range \[0, 3\) \(ignore_index -100\)"):
        reference("SoftmaxCrossEntropy", [np.zeros((2, 3, 4)), np.array([[0, 7, 1, 1]] * 2)])
    with pytest.raises(OpError, match=r"label_smoothing must be in \[0, 1\]"):
        sce = get_op("SoftmaxCrossEntropy")
        sce.infer([TensorType((2, 3)), TensorType((2,), "int64")],
                  sce.normalize_attrs({"label_smoothing": 1.5}))


# ---- attach_loss: which axis holds the classes --------------------------------------------

def _graph(shape, tail=None, axis=1):
    b = GraphBuilder("net")
    x = b.input("x", shape)
    y = b.op("Relu", [x], name="relu")
    if tail is not None:
        y = b.op(tail, [y], {"axis": axis}, name="head")
    return b.build(outputs=[y])


def test_segmentation_logits_take_classes_on_axis_1_even_when_c_equals_w():
    g = attach_loss(_graph((2, 4, 3, 4)))
    assert g.tensor("labels").shape == (2, 3, 4)
    rng = np.random.default_rng(0)
    x, labels = rng.standard_normal((2, 4, 3, 4)).astype(np.float32), rng.integers(0, 4, (2, 3, 4))
    loss = run(g, {"x": x, "labels": labels}, {})["loss"]
    theirs = F.cross_entropy(torch.relu(torch.tensor(x)), torch.tensor(labels))
    assert rel_error(loss, theirs.numpy()) < 1e-5


def test_trailing_ones_are_squeezed_and_one_class_refused():
    g = attach_loss(_graph((2, 10, 1, 1)))
    assert g.tensor("labels").shape == (2,)
    assert attach_loss(_graph((2, 10, 1, 1)), axis=1).tensor("labels").shape == (2, 1, 1)
    with pytest.raises(LossError, match=r"'relu' has shape \[2, 1\]: its class axis 1 holds 1 "
                                        r"class\(es\)"):
        attach_loss(_graph((2, 1, 1, 1)))
    with pytest.raises(LossError, match=r"shape \[2, 3, 4\]: are the classes on axis 1"):
        attach_loss(_graph((2, 3, 4)))
    with pytest.raises(LossError, match="no class axis 3"):
        attach_loss(_graph((2, 3, 4)), axis=3)


def test_softmax_output_takes_the_loss_on_its_input():
    with pytest.warns(UserWarning, match="taken on 'relu', the input of its Softmax node 'head'"):
        g = attach_loss(_graph((3, 5), "Softmax"))
    (loss,) = [n for n in g.nodes if n.op == "SoftmaxCrossEntropy"]
    assert loss.inputs[0] == "relu" and g.outputs == ("loss", "head")
    g = attach_loss(_graph((3, 5), "LogSoftmax"))  # the same loss and gradient: no warning
    assert next(n for n in g.nodes if n.op == "SoftmaxCrossEntropy").inputs[0] == "relu"
    g = attach_loss(_graph((3, 4, 5, 5), "Softmax", axis=3))  # not over the classes: kept
    assert next(n for n in g.nodes if n.op == "SoftmaxCrossEntropy").inputs[0] == "head"


def test_options_reach_the_op_and_train():
    g = attach_loss(_graph((4, 6)), ignore_index=0, label_smoothing=0.1)
    (node,) = [n for n in g.nodes if n.op == "SoftmaxCrossEntropy"]
    assert node.attrs == {"axis": 1, "ignore_index": 0, "label_smoothing": 0.1}
    assert parse_loss_spec("cross-entropy?ignore_index=3") == ("cross-entropy", None,
                                                              {"ignore_index": 3})
    with pytest.raises(LossError, match="loss option 'weight=2'"):
        parse_loss_spec("cross-entropy:y?weight=2")
    with pytest.raises(LossError, match="mse takes no axis"):
        attach_loss(_graph((4, 6)), "mse", axis=1)


def test_cli_takes_loss_options_and_refuses_an_ambiguous_output(tmp_path, capsys):
    import json

    path = tmp_path / "g.json"
    path.write_text(_graph((2, 3, 4)).to_json())
    assert main(["graph", str(path), "--loss", "cross-entropy"]) == 2
    assert "?axis=-1" in capsys.readouterr().err
    out = tmp_path / "t.json"
    assert main(["graph", str(path), "--loss",
                 "cross-entropy:relu?axis=-1&label_smoothing=0.1", "-o", str(out)]) == 0
    (node,) = [n for n in json.loads(out.read_text())["nodes"] if n["op"] == "SoftmaxCrossEntropy"]
    assert node["attrs"] == {"axis": 2, "ignore_index": -100, "label_smoothing": 0.1}


# ---- a UNet-like export: 32 classes on 32x32 images ----------------------------------------

class TinyUNet(nn.Module):
    """Down (conv, pool), up (transposed conv), skip concatenation, 1x1 head to 32 classes."""

    def __init__(self, classes: int = 32) -> None:
        super().__init__()
        self.enc = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU())
        self.down = nn.Sequential(nn.MaxPool2d(2), nn.Conv2d(4, 8, 3, padding=1), nn.ReLU())
        self.up = nn.ConvTranspose2d(8, 4, 2, stride=2)
        self.head = nn.Conv2d(8, classes, 1)

    def forward(self, x):
        skip = self.enc(x)
        return self.head(torch.cat([skip, self.up(self.down(skip))], 1))


def _unet_case():
    from tests.importers.torch_step import export, training_graph

    torch.manual_seed(0)
    model = TinyUNet()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 32, 32)).astype(np.float32)
    labels = rng.integers(0, 32, (2, 32, 32)).astype(np.int64)
    graph, start = training_graph(export(model, torch.from_numpy(x)))
    assert graph.tensor("labels").shape == (2, 32, 32)
    return model, x, labels, graph, start


def _check_against_pytorch(model, x, labels, ours, start):
    from tests.importers.torch_step import mismatches, torch_step

    f32 = torch_step(model, x, labels, torch.float32, start)
    f64 = torch_step(model, x, labels, torch.float64, start)
    assert set(ours.state) >= set(f64.state)
    assert mismatches(ours, f32, f64, set(f64.state)) == []


def test_unet_with_classes_equal_to_width_steps_as_pytorch_on_the_reference():
    from tests.importers.torch_step import Step, feeds_of

    model, x, labels, graph, start = _unet_case()
    outputs, new = train_step(graph, feeds_of(graph, x, labels), start)
    _check_against_pytorch(model, x, labels, Step(float(outputs["loss"]), new), start)


def test_unet_with_classes_equal_to_width_steps_as_pytorch_through_the_executor(
        tmp_path_factory):
    from tests.codegen.helpers import build_module
    from tests.importers.torch_step import Step, feeds_of

    model, x, labels, graph, start = _unet_case()
    module = build_module(graph, tmp_path_factory.mktemp("unet"))
    ex = module.Executor()
    ex.load_params(start)
    loss = float(np.asarray(ex.step(feeds_of(graph, x, labels))["loss"]))
    ours = Step(loss, {k: np.asarray(v) for k, v in ex.params().items()})
    _check_against_pytorch(model, x, labels, ours, start)
