"""fold_norm_relus: which BatchNorm -> Relu and ReluGrad -> BatchNormGrad pairs of a training
graph become one op, that the reference interpreter gives every kept tensor the unfolded
graph's bits, and that CPU steps fold them (planning's choice, re-derived by `verify --graph`)
while GPU steps do not."""

from __future__ import annotations

import json

import numpy as np
import pytest

from planner.frontend.autodiff import make_training_graph
from planner.graph import GraphBuilder, Optimizer, check_graph
from planner.ir.graph import Graph
from planner.step.fold_norm_relu import fold_norm_relus
from planner.zoo import build
from planner.zoo.layers import batch_norm, conv2d, head
from tests.helpers.folds import assert_same_values

SGD = Optimizer(kind="sgd", lr=0.1)


def _layer(image=(2, 3, 4, 4), precision="fp32", read_norm=False, output_norm=False,
           read_relu_grad=False, training=True) -> Graph:
    """x -> Conv2D -> BatchNorm -> Relu -> the head, trained; with the asked-for extra reader or
    graph output of the BatchNorm's y, or a second reader of the Relu's gradient."""
    b = GraphBuilder("layer")
    x = b.input("x", image)
    h = conv2d(b, x, 4, 3, name="conv") if len(image) == 4 else \
        b.op("MatMul", [x, b.param("w", (image[1], 4))], name="fc0")
    if training:
        y = batch_norm(b, h, name="bn")
    else:
        stats = [b.param(f"bn/{n}", (4,)) for n in ("scale", "bias", "mean", "var")]
        y = b.op("BatchNorm", [h, *stats], {"training": False}, name="bn")
    r = b.op("Relu", [y], name="relu")
    if read_relu_grad:  # the Relu's input gradient also reaches the loss through a Tanh
        r = b.op("Add", [r, b.op("Tanh", [y], name="other")], name="sum")
    elif read_norm:
        r = b.op("Add", [r, y], name="sum")
    outs = head(b, b.op("Flatten", [r], {"axis": 1}, name="flat") if len(image) == 4 else r,
                3, True)
    return make_training_graph(b.build(outputs=outs + ([y] if output_norm else [])), SGD,
                               precision=precision)


def _folded_ops(graph: Graph) -> list[tuple[str, int, str | None]]:
    return [(n.op, len(n.inputs), n.attrs.get("activation")) for n in graph.nodes
            if n.op in ("BatchNorm", "BatchNormGrad")]


def test_a_layer_folds_forward_and_backward_and_keeps_the_bits():
    plain = _layer()
    folded = check_graph(fold_norm_relus(plain))
    assert _folded_ops(folded) == [("BatchNorm", 5, "relu"), ("BatchNormGrad", 6, "relu")]
    ops = [n.op for n in folded.nodes]
    assert "Relu" not in ops and "ReluGrad" not in ops
    norm = folded.producer["relu"]
    assert norm.name == "bn" and "bn:0" not in folded.tensor_map
    # BatchNormGrad reads the BatchNorm's bias (to evaluate the Relu's output again), its dy
    # the Relu's dy; not the Relu's output
    grad = next(n for n in folded.nodes if n.op == "BatchNormGrad")
    relu_grad = next(n for n in plain.nodes if n.op == "ReluGrad")
    assert grad.inputs[0] == relu_grad.inputs[0] and grad.inputs[5] == norm.inputs[2]
    assert "relu" not in grad.inputs
    assert relu_grad.outputs[0] not in folded.tensor_map
    assert_same_values(plain, folded, seeds=(3, 4), fewer=True)
    assert fold_norm_relus(folded) == folded


@pytest.mark.parametrize("case, folds", [
    (dict(read_norm=True), []),                # y read by the Relu and an Add: both stay
    (dict(output_norm=True),                   # y a graph output: its gradient's pair folds
     [("BatchNormGrad", 6, "relu")]),
    (dict(read_relu_grad=True), []),           # y read by a Tanh too: the Relu stays
    (dict(precision="bf16-mixed"), []),        # float32 only
    (dict(image=(6, 5)), []),                  # BatchNorm1d: one element per channel run
    (dict(training=False), []),                # eval(): its gradient is no training one
])
def test_what_is_not_folded(case, folds):
    g = _layer(**case)
    assert [f for f in _folded_ops(fold_norm_relus(g)) if f[2]] == folds
    assert folds or fold_norm_relus(g) == g


def test_a_relu_gradient_read_twice_stays_apart():
    """The forward pair folds; the ReluGrad's output also feeds another gradient, so it stays."""
    b = GraphBuilder("twice")
    y = batch_norm(b, conv2d(b, b.input("x", (2, 3, 4, 4)), 4, 3, name="conv"), name="bn")
    r = b.op("Relu", [y], name="relu")
    h = b.op("Add", [conv2d(b, r, 4, 3, name="c2"), conv2d(b, r, 4, 3, name="c3")], name="sum")
    plain = make_training_graph(
        b.build(head(b, b.op("Flatten", [h], {"axis": 1}, name="flat"), 3, True)), SGD)
    folded = fold_norm_relus(plain)
    # r is read by two convolutions: its gradient is their sum (an AddN), read by the ReluGrad
    # alone, whose output the BatchNormGrad alone reads: both pairs fold.
    assert _folded_ops(folded) == [("BatchNorm", 5, "relu"), ("BatchNormGrad", 6, "relu")]
    assert_same_values(plain, folded, fewer=True)


def _leaky_layer(read_grad: bool = False, alpha: float = 0.2) -> Graph:
    """x -> Conv2D -> BatchNorm -> LeakyRelu(0.2) -> the head (DCGAN's discriminator layer);
    with `read_grad` y also reaches the loss through a Tanh (y's gradient is then a sum the
    LeakyReluGrad's output is only one term of)."""
    b = GraphBuilder("leaky")
    y = batch_norm(b, conv2d(b, b.input("x", (2, 3, 4, 4)), 4, 3, name="conv"), name="bn")
    r = b.op("LeakyRelu", [y], {"alpha": alpha}, name="lrelu")
    if read_grad:
        r = b.op("Add", [r, b.op("Tanh", [y], name="other")], name="sum")
    return make_training_graph(
        b.build(head(b, b.op("Flatten", [r], {"axis": 1}, name="flat"), 3, True)), SGD)


def test_a_leaky_relu_folds_with_its_slope_and_keeps_the_bits():
    plain = _leaky_layer()
    folded = check_graph(fold_norm_relus(plain))
    assert _folded_ops(folded) == [("BatchNorm", 5, "leaky_relu"),
                                   ("BatchNormGrad", 6, "leaky_relu")]
    assert {n.attrs["alpha"] for n in folded.nodes if n.op.startswith("BatchNorm")} == {0.2}
    ops = [n.op for n in folded.nodes]
    assert "LeakyRelu" not in ops and "LeakyReluGrad" not in ops
    # y went with both readers (the LeakyRelu and its gradient, which reads y itself)
    assert plain.node_map["bn"].outputs[0] not in folded.tensor_map
    assert_same_values(plain, folded, seeds=(3, 4), fewer=True)
    assert fold_norm_relus(folded) == folded


@pytest.mark.parametrize("alpha", [0.0, -0.2, 1e-40, 5e-324, 1e39])
def test_a_leaky_relu_folds_only_of_a_positive_normal_float32_slope(alpha):
    """One rule for both LeakyRelu folds (fused_activation.foldable_slope), the one `planner
    verify` checks: a slope of 0 or below, or one the runtime's float32 makes subnormal, 0 or
    infinite, stays apart, forward and gradient."""
    plain = _leaky_layer(alpha=alpha)
    assert fold_norm_relus(plain) == plain


def test_a_leaky_relu_whose_gradient_stays_keeps_its_forward_apart():
    """y's gradient sums two terms, so the LeakyReluGrad's output is not the BatchNormGrad's dy:
    that pair stays, the LeakyReluGrad still reads y, so the forward pair stays too."""
    g = _leaky_layer(read_grad=True)
    assert fold_norm_relus(g) == g


def test_resnet18_folds_each_norm_a_relu_reads_alone():
    """ResNet-18: the stem's BatchNorm and each basic block's first one are read by a Relu alone
    (9); a block's second one by the residual Add, a downsample's by that Add too. At 16 px the
    last two stages' maps are 1x1 (one element per channel and image): those 4 stay apart. The
    folded step's tensors hold the unfolded step's bits."""
    plain = make_training_graph(build("resnet", batch=2, image=16, depth=18, width=0.25,
                                      classes=5), SGD)
    alone = [n for n in plain.nodes if n.op == "BatchNorm"
             and [r.op for r in plain.consumers[n.outputs[0]]] == ["Relu"]]
    assert len(alone) == 9
    runs = [n for n in alone if int(np.prod(plain.tensor(n.inputs[0]).shape[2:])) >= 2]
    assert len(runs) == 5
    folded = fold_norm_relus(plain)
    assert _folded_ops(folded).count(("BatchNorm", 5, "relu")) == 5
    assert _folded_ops(folded).count(("BatchNormGrad", 6, "relu")) == 5
    assert len(folded.nodes) == len(plain.nodes) - 10
    assert_same_values(plain, folded, fewer=True)


def test_cpu_steps_fold_and_gpu_steps_do_not():
    from planner.pipeline.choices import step_graph
    from planner.target.presets import preset

    plain = _layer()
    assert _folded_ops(step_graph(plain, preset("knl-7250")))[0][2] == "relu"
    assert _folded_ops(step_graph(plain, preset("h100-80gb"))) == _folded_ops(plain)


@pytest.mark.parametrize(("act", "attrs", "folded"), [
    ("Relu", {}, {"activation": "relu"}),
    ("LeakyRelu", {"alpha": 0.2}, {"activation": "leaky_relu", "alpha": 0.2})])
def test_a_folded_norm_differentiates_as_its_parts(act, attrs, folded):
    """A graph written after the fold (planner graph -o, then planner plan --train) trains
    too: BatchNorm with its Relu or LeakyRelu has the gradient of the two ops it replaced
    (the LeakyRelu's read from its output: the same mask for a positive slope)."""
    from planner.frontend.autodiff import gradients
    from planner.graph.interpret import init_params, random_feeds, run

    b = GraphBuilder("layer")
    y = batch_norm(b, b.input("x", (2, 3, 4, 4)), name="bn")
    plain_forward = b.build(outputs=[b.op("Sigmoid", [b.op(act, [y], attrs, name="relu")],
                                          name="out")])
    nodes = [n.model_copy(update={"attrs": {**n.attrs, **folded},
                                  "outputs": ("relu", *n.outputs[1:])})
             if n.op == "BatchNorm" else n for n in plain_forward.nodes if n.op != act]
    folded_forward = check_graph(plain_forward.model_copy(update={
        "nodes": tuple(nodes),
        "tensors": tuple(t for t in plain_forward.tensors if t.name != y)}))
    feeds = random_feeds(plain_forward, seed=3)
    params = init_params(plain_forward, seed=4)
    want = None
    for g in (plain_forward, folded_forward):
        training, grads = gradients(g, wrt=["bn/scale", "bn/bias"], of=["out"])
        seed = {"grad/out": np.ones(training.tensor("out").shape, np.float32)}
        values = run(training, {**feeds, **seed}, params)
        got = [values[grads[p]] for p in ("bn/scale", "bn/bias")]
        want = want or got
        for a, b_ in zip(got, want, strict=True):
            np.testing.assert_array_equal(a, b_)


def test_training_plans_verify_against_their_graph(tmp_path, capsys):
    """A training plan for a CPU target folds the pairs; `verify --graph` re-derives the same
    step graph from the training graph it was made from."""
    import planner.cli as cli

    spec = "zoo:resnet?batch=2&image=64&depth=18&width=0.25&classes=5"  # every map 2x2 or more
    graph, out = str(tmp_path / "g.json"), str(tmp_path / "p.json")
    assert cli.main(["graph", spec, "--train", "sgd", "-o", graph]) == 0
    assert cli.main(["plan", graph, "--target", "knl-7250", "-o", out]) == 0
    nodes = json.load(open(out))["graph"]["nodes"]
    assert sum(n["attrs"].get("activation") == "relu" for n in nodes
               if n["op"] == "BatchNormGrad") == 9
    assert cli.main(["verify", out, "--graph", graph]) == 0
    capsys.readouterr()
