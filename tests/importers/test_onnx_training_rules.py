"""Import rules for training: training-mode BatchNormalization and Dropout, ONNX's loss ops,
attach_loss and `--loss`, constant folding of shape arithmetic (bounded), recurrent layers and
the transformer ops, each against onnx's reference evaluator or PyTorch's convention."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from planner.cli import main
from planner.frontend.autodiff import make_training_graph
from planner.frontend.loss import LossError, attach_loss
from planner.graph import Optimizer, check_graph, init_params, run
from planner.graph.interpret import train_step
from planner.importers import OnnxImportError, import_onnx, load_onnx
from planner.importers.onnx.fold import FOLD_OUTPUT_LIMIT
from tests.importers.onnx_models import check_against_onnx, make_model, rand

node = helper.make_node


def _bn_model(opset: int, training: bool):
    attrs = {"epsilon": 1e-5, "momentum": 0.9}
    outputs = ["y"]
    if training and opset >= 14:
        attrs["training_mode"] = 1
    if training:
        outputs += ["rm", "rv"] + ([] if opset >= 14 else ["sm", "sv"])
    bn = node("BatchNormalization", ["x", "s", "b", "m", "v"], outputs, **attrs)
    c = 3
    inits = {"s": rand(c, seed=1), "b": rand(c, seed=2), "m": rand(c, seed=3),
             "v": np.abs(rand(c, seed=4)) + 0.5}
    return make_model([bn], {"x": rand(4, c, 2, 2)}, ["y"], inits, opset=opset)


@pytest.mark.parametrize("opset", [9, 13, 15])
def test_training_mode_batchnorm_updates_running_statistics_as_pytorch(opset):
    model = _bn_model(opset, training=True)
    imported = import_onnx(model)
    (bn,) = [n for n in imported.graph.nodes if n.op == "BatchNorm"]
    assert bn.attrs["training"] and bn.attrs["momentum"] == pytest.approx(0.1)
    x = rand(4, 3, 2, 2)
    params = imported.params()
    values = run(imported.graph, {"x": x}, params)
    mean, var = x.mean(axis=(0, 2, 3)), x.var(axis=(0, 2, 3), ddof=1)  # unbiased, as torch
    np.testing.assert_allclose(values[bn.outputs[1]], 0.9 * params["m"] + 0.1 * mean, rtol=1e-5)
    np.testing.assert_allclose(values[bn.outputs[2]], 0.9 * params["v"] + 0.1 * var, rtol=1e-5)
    graph = make_training_graph(attach_loss(imported.graph, "mse"), Optimizer(kind="sgd"))
    assert {t.updates for t in graph.tensors if t.updates} >= {"m", "v"}


@pytest.mark.parametrize("opset", [9, 15])
def test_inference_mode_batchnorm_keeps_running_statistics(opset):
    (bn,) = [n for n in load_onnx(_bn_model(opset, training=False)).nodes]
    assert bn.attrs["training"] is False


def _dropout_model(training: bool | None, ratio: float = 0.25, opset: int = 13):
    inputs = ["x", "r"] + (["t"] if training is not None else [])
    inits = {"r": np.array(ratio, np.float32)}
    if training is not None:
        inits["t"] = np.array(training)
    return make_model([node("Dropout", inputs, ["y"])], {"x": rand(8, 4)}, ["y"], inits,
                      opset=opset)


def test_training_mode_dropout_keeps_its_ratio():
    (d,) = load_onnx(_dropout_model(True)).nodes
    assert d.op == "Dropout" and d.attrs["rate"] == pytest.approx(0.25)


@pytest.mark.parametrize("training", [False, None])
def test_inference_dropout_vanishes(training):
    assert load_onnx(_dropout_model(training)).nodes == ()


def test_dropout_before_opset_12_is_inference():
    d = node("Dropout", ["x"], ["y", "mask"], ratio=0.5)
    assert load_onnx(make_model([d], {"x": rand(2, 3)}, ["y"], opset=11)).nodes == ()


def test_softmax_cross_entropy_loss_is_the_graphs_loss():
    n = node("SoftmaxCrossEntropyLoss", ["z", "labels"], ["loss"], reduction="mean",
             ignore_index=-100)
    mm = node("MatMul", ["x", "w"], ["z"])
    labels = np.array([1, 0, 3], np.int64)
    model = make_model([mm, n], {"x": rand(3, 5), "labels": labels}, ["loss"],
                       {"w": rand(5, 4, seed=1)}, opset=13)
    graph = check_against_onnx(model, {"x": rand(3, 5), "labels": labels})
    assert graph.tensor("labels").role == "label"
    trained = make_training_graph(graph, Optimizer(kind="sgd"))
    assert any(t.updates == "w" for t in trained.tensors)


def test_nll_of_log_softmax_over_image_rows():
    # (N, C, H) scores: classes moved last, rows flattened; the gradient is checked against
    # the analytic softmax - onehot through the LogSoftmax.
    nodes = [node("LogSoftmax", ["x"], ["lp"], axis=1),
             node("NegativeLogLikelihoodLoss", ["lp", "t"], ["loss"])]
    t = np.array([[0, 2], [1, 1]], np.int64)
    model = make_model(nodes, {"x": rand(2, 3, 2), "t": t}, ["loss"], opset=13)
    check_against_onnx(model, {"x": rand(2, 3, 2), "t": t})


def test_nll_of_anything_else_is_unsupported():
    nll = node("NegativeLogLikelihoodLoss", ["x", "t"], ["loss"])
    model = make_model([nll], {"x": rand(2, 3), "t": np.array([0, 1])}, ["loss"], opset=13)
    with pytest.raises(OnnxImportError, match="NegativeLogLikelihoodLoss"):
        load_onnx(model)


def _logits_model(shape=(4, 3)):
    return make_model([node("MatMul", ["x", "w"], ["logits"])], {"x": rand(shape[0], 6)},
                      ["logits"], {"w": rand(6, shape[1], seed=1)})


def test_attach_loss_then_train_one_step_moves_the_loss():
    imported = import_onnx(_logits_model())
    graph = make_training_graph(attach_loss(imported.graph), Optimizer(kind="sgd", lr=0.5))
    state = {**init_params(graph), **imported.params()}
    feeds = {"x": rand(4, 6), "labels": np.array([0, 1, 2, 0])}
    first, state = train_step(graph, feeds, state)
    second, _ = train_step(graph, feeds, state)
    assert second["loss"] < first["loss"]


def test_attach_loss_takes_sequence_logits_with_classes_last_when_told():
    b = load_onnx(make_model([node("Reshape", ["x", "s"], ["logits"])], {"x": rand(6, 4)},
                             ["logits"], {"s": np.array([2, 3, 4])}))
    with pytest.raises(LossError, match=r"'logits' has shape \[2, 3, 4\]: are the classes on "
                                        r"axis 1 .* or last .*\?axis=-1"):
        attach_loss(b, "cross-entropy", "logits")
    g = attach_loss(b, "cross-entropy", "logits", axis=-1)
    assert g.tensor("labels").shape == (2, 3)
    x, labels = rand(6, 4), np.array([[0, 1, 2], [3, 0, 1]])
    loss = run(g, {"x": x, "labels": labels}, {})["loss"]
    logp = x - np.log(np.exp(x).sum(1, keepdims=True))
    assert loss == pytest.approx(-logp[np.arange(6), labels.reshape(-1)].mean(), rel=1e-6)


@pytest.mark.parametrize(("kind", "output", "message"), [
    ("hinge", None, "unknown loss 'hinge'"),
    ("cross-entropy", "nope", "'nope' is not an output"),
])
def test_attach_loss_errors_name_the_problem(kind, output, message):
    with pytest.raises(LossError, match=message):
        attach_loss(load_onnx(_logits_model()), kind, output)


def test_cli_trains_an_onnx_model_with_a_loss(capsys, tmp_path):
    path = tmp_path / "m.onnx"
    path.write_bytes(_logits_model().SerializeToString())
    out = tmp_path / "train.json"
    code = main(["graph", str(path), "--train", "adam", "--loss", "cross-entropy:logits",
                 "-o", str(out)])
    assert code == 0, capsys.readouterr().err
    assert '"SoftmaxCrossEntropy"' in out.read_text() and '"ApplyAdam"' in out.read_text()
    assert main(["graph", str(path), "--train", "sgd", "--loss", "cross-entropy:x"]) == 2
    assert "'x' is not an output" in capsys.readouterr().err
    plan = tmp_path / "p.plan.json"
    assert main(["plan", str(path), "--train", "sgd", "--loss", "mse", "--target", "xeon-8180",
                 "-o", str(plan)]) == 0, capsys.readouterr().err
    assert '"MSEGrad"' in plan.read_text()


def test_integer_shape_arithmetic_is_folded():
    # chunk's Shape -> Gather -> Div, and a Mod, all on int64: folded into one Reshape.
    nodes = [node("Shape", ["x"], ["s"]),
             node("Gather", ["s", "one"], ["c"], axis=0),
             node("Div", ["c", "two"], ["half"]),
             node("Mod", ["c", "four"], ["rest"]),
             node("Add", ["half", "rest"], ["h"]),            # 6 // 2 + 6 % 4 = 5
             node("Unsqueeze", ["h", "zero"], ["hu"]),
             node("Concat", ["lead", "hu", "neg"], ["shape"], axis=0),
             node("Reshape", ["x", "shape"], ["y"])]
    inits = {"one": np.array(1), "two": np.array(2), "four": np.array(4),
             "lead": np.array([2]), "neg": np.array([-1]), "zero": np.array([0])}
    graph = check_against_onnx(make_model(nodes, {"x": rand(2, 6, 5)}, ["y"], inits),
                               {"x": rand(2, 6, 5)})
    assert [(n.op, n.attrs["shape"]) for n in graph.nodes] == [("Reshape", [2, 5, 6])]


def test_huge_range_is_refused_before_anything_is_made():
    r = node("Range", ["a", "b", "c"], ["r"], name="big")
    model = make_model([r, node("Cast", ["r"], ["y"], to=TensorProto.FLOAT)], {}, ["y"],
                       {"a": np.array(0), "b": np.array(10**12), "c": np.array(1)})
    with pytest.raises(OnnxImportError, match=r"node 'big' \(Range\): 1000000000000 values"):
        load_onnx(model)


def test_huge_folded_expand_is_refused():
    e = node("Expand", ["a", "s"], ["y"], name="wide")
    model = make_model([e, node("Equal", ["y", "a"], ["z"])], {}, ["z"],
                       {"a": np.array(1), "s": np.array([1 << 12, 1 << 12])})
    with pytest.raises(OnnxImportError, match=f"node 'wide'.*{FOLD_OUTPUT_LIMIT}"):
        load_onnx(model)


def test_where_of_a_folded_causal_mask():
    # A causal mask as exporters write it: Range, compare, Where, added to attention scores.
    nodes = [node("Range", ["zero", "t", "one"], ["r"]),
             node("Unsqueeze", ["r", "ax0"], ["row"]),
             node("Unsqueeze", ["r", "ax1"], ["col"]),
             node("Greater", ["row", "col"], ["future"]),
             node("Where", ["future", "ninf", "fzero"], ["mask"]),
             node("Add", ["x", "mask"], ["masked"]),
             node("Softmax", ["masked"], ["y"], axis=-1)]
    inits = {"zero": np.array(0), "t": np.array(4), "one": np.array(1),
             "ax0": np.array([0]), "ax1": np.array([1]),
             "ninf": np.array(-1e9, np.float32), "fzero": np.array(0, np.float32)}
    check_against_onnx(make_model(nodes, {"x": rand(2, 4, 4)}, ["y"], inits),
                       {"x": rand(2, 4, 4)})


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("layout", [0, 1])
def test_lstm_matches_onnx_reference(direction, layout):
    d, t, n, i, h = (2 if direction == "bidirectional" else 1), 3, 2, 4, 5
    x = rand(*((n, t, i) if layout else (t, n, i)))
    inits = {"w": rand(d, 4 * h, i, seed=1), "r": rand(d, 4 * h, h, seed=2),
             "b": rand(d, 8 * h, seed=3), "h0": rand(*((n, d, h) if layout else (d, n, h)),
                                                     seed=4)}
    lstm = node("LSTM", ["x", "w", "r", "b", "", "h0"], ["y", "yh", "yc"], hidden_size=h,
                direction=direction, layout=layout)
    check_against_onnx(make_model([lstm], {"x": x}, ["y", "yh", "yc"], inits, opset=14),
                       {"x": x}, rtol=1e-4)


@pytest.mark.parametrize("before_reset", [0, 1])
def test_gru_matches_onnx_reference(before_reset):
    t, n, i, h = 3, 2, 4, 5
    x = rand(t, n, i)
    inits = {"w": rand(1, 3 * h, i, seed=1), "r": rand(1, 3 * h, h, seed=2),
             "b": rand(1, 6 * h, seed=3)}
    gru = node("GRU", ["x", "w", "r", "b"], ["y", "yh"], hidden_size=h,
               linear_before_reset=before_reset)
    check_against_onnx(make_model([gru], {"x": x}, ["y", "yh"], inits), {"x": x}, rtol=1e-4)


def test_lstm_peepholes_are_unsupported():
    x = rand(2, 1, 3)
    inits = {"w": rand(1, 8, 3), "r": rand(1, 8, 2), "p": rand(1, 6)}
    lstm = node("LSTM", ["x", "w", "r", "", "", "", "", "p"], ["y"], hidden_size=2)
    with pytest.raises(OnnxImportError, match="LSTM \\(peepholes\\)"):
        load_onnx(make_model([lstm], {"x": x}, ["y"], inits))


def test_layer_normalization_and_gelu():
    nodes = [node("LayerNormalization", ["x", "s", "b"], ["n"], axis=-1, epsilon=1e-5),
             node("Gelu", ["n"], ["y"], approximate="tanh")]
    x = rand(2, 3, 8)
    graph = check_against_onnx(make_model(nodes, {"x": x}, ["y"],
                                          {"s": rand(8, seed=1), "b": rand(8, seed=2)},
                                          opset=20), {"x": x})
    assert [n.op for n in check_graph(graph).nodes] == ["LayerNorm", "Gelu"]


def test_overlong_sequence_is_refused_not_unrolled():
    from planner.importers.onnx.rules_rnn import MAX_STEPS

    x = (["T", 1, 2], TensorProto.FLOAT)
    inits = {"w": rand(1, 8, 2), "r": rand(1, 8, 2)}
    lstm = node("LSTM", ["x", "w", "r"], ["y"], hidden_size=2, name="long")
    model = make_model([lstm], {"x": x}, ["y"], inits)
    with pytest.raises(OnnxImportError, match=f"node 'long' \\(LSTM\\): {MAX_STEPS + 1} steps"):
        load_onnx(model, input_shapes={"x": [MAX_STEPS + 1, 1, 2]})


_X = rand(3, 2, 4)
BAD = [
    ("LSTM", dict(hidden_size=5), {"w": rand(1, 19, 4), "r": rand(1, 20, 5)}, "cannot reshape"),
    ("GRU", dict(hidden_size=5, direction="sideways"), {"w": rand(1, 15, 4), "r": rand(1, 15, 5)},
     "unknown direction 'sideways'"),
    ("GRU", dict(hidden_size=0), {"w": rand(1, 15, 4), "r": rand(1, 15, 5)}, "hidden_size > 0"),
    ("LSTM", dict(hidden_size=5, direction="bidirectional"),
     {"w": rand(1, 20, 4), "r": rand(1, 20, 5)}, "has no direction 1"),
    ("Celu", dict(alpha=0.0), {}, "alpha is 0"),
]


@pytest.mark.parametrize(("op", "attrs", "inits", "message"), BAD)
def test_bad_nodes_get_one_line_errors_naming_them(op, attrs, inits, message):
    inputs = ["x", *inits]
    model = make_model([node(op, inputs, ["y"], name="bad", **attrs)], {"x": _X}, ["y"], inits)
    with pytest.raises(OnnxImportError, match=f"node 'bad' \\({op}\\): .*{message}"):
        load_onnx(model)


@pytest.mark.parametrize(("shape", "axis", "ids"), [
    ((5,), 0, [[1, 4], [0, 0]]),
    ((2, 5, 3), 1, [4, 0, 2]),
    ((2, 3, 4), 2, [[3], [1]]),
    ((4, 3), 0, [2, 2, 1]),
])
def test_gather_with_computed_indices_on_any_axis(shape, axis, ids):
    ids = np.array(ids, np.int64)
    model = make_model([node("Gather", ["x", "i"], ["y"], axis=axis)], {"x": rand(*shape),
                                                                      "i": ids}, ["y"])
    check_against_onnx(model, {"x": rand(*shape), "i": ids})


def test_training_without_a_loss_says_how_to_attach_one(capsys, tmp_path):
    path = tmp_path / "m.onnx"
    path.write_bytes(_logits_model().SerializeToString())
    assert main(["graph", str(path), "--train", "sgd"]) == 2
    assert "--loss cross-entropy[:OUTPUT]" in capsys.readouterr().err
