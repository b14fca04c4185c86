"""fold_conv_leakies: which Conv2D -> LeakyRelu pairs of a training graph become one op (the
LeakyRelu's gradient then reading its output), that the reference interpreter gives every kept
tensor the unfolded graph's bits, that CPU steps fold them while GPU steps do not, and that a
Conv2D's leaky activation has a gradient only for a positive slope."""

from __future__ import annotations

import pytest

from planner.frontend.autodiff import make_training_graph
from planner.graph import GraphBuilder, Optimizer, check_graph
from planner.ir.graph import Graph
from planner.ops.base import OpError
from planner.step.fold_conv_leaky import fold_conv_leakies
from planner.zoo import build
from planner.zoo.layers import conv2d, head
from tests.helpers.folds import assert_same_values

SGD = Optimizer(kind="sgd", lr=0.1)


def _layer(alpha=0.2, precision="fp32", read_conv=False, output_conv=False,
           trained_input=True) -> Graph:
    """x -> Conv2D -> LeakyRelu(alpha) -> Conv2D -> the head, trained (x too, as a GAN's
    discriminator's fake images are); with the asked-for extra reader or graph output of the
    first Conv2D's output."""
    b = GraphBuilder("layer")
    x = b.param("x", (2, 3, 6, 6)) if trained_input else b.input("x", (2, 3, 6, 6))
    h = conv2d(b, x, 4, 3, pad=1, name="conv")
    r = b.op("LeakyRelu", [h], {"alpha": alpha}, name="lrelu")
    if read_conv:
        r = b.op("Add", [r, b.op("Tanh", [h], name="other")], name="sum")
    z = conv2d(b, r, 4, 3, pad=1, name="conv2")
    outs = head(b, b.op("Flatten", [z], {"axis": 1}, name="flat"), 3, True)
    return make_training_graph(b.build(outputs=outs + ([h] if output_conv else [])), SGD,
                               precision=precision)


def test_a_layer_folds_and_keeps_the_bits():
    plain = _layer()
    folded = check_graph(fold_conv_leakies(plain))
    conv = folded.producer["lrelu"]
    assert (conv.name, conv.op, conv.attrs["activation"], conv.attrs["alpha"]) == \
        ("conv", "Conv2D", "leaky_relu", 0.2)
    assert "LeakyRelu" not in [n.op for n in folded.nodes] and "conv" not in folded.tensor_map
    (grad,) = [n for n in folded.nodes if n.op == "LeakyReluGrad"]
    assert grad.inputs[1] == "lrelu"
    assert_same_values(plain, folded, seeds=(3, 4), fewer=True)
    assert fold_conv_leakies(folded) == folded


@pytest.mark.parametrize("case", [
    dict(alpha=0.0),                 # a slope of 0: oneDNN's post-op would lose a NaN
    dict(alpha=-0.5),                # a negative slope: y > 0 where x < 0, not the mask
    dict(alpha=1e-40),               # float32 subnormal: oneDNN flushes it to 0
    dict(alpha=5e-324),              # 0 as the runtime's float32
    dict(alpha=1e39),                # inf as the runtime's float32
    dict(read_conv=True),            # the convolution's output read by a Tanh too
    dict(output_conv=True),          # ... or a graph output
    dict(precision="bf16-mixed"),    # float32 only
])
def test_what_is_not_folded(case):
    plain = _layer(**case)
    assert fold_conv_leakies(plain) == plain


def test_cpu_steps_fold_gpu_steps_do_not():
    from planner.pipeline.choices import step_graph
    from planner.target.presets import preset

    graph = make_training_graph(build("dcgan", batch=4, image=16, nz=8, width=0.125), SGD)
    cpu = step_graph(graph, preset("knl-7250"))
    assert [(n.name, n.attrs["alpha"]) for n in cpu.nodes
            if n.op == "Conv2D" and n.attrs.get("activation") == "leaky_relu"] == \
        [("discriminator/conv1", 0.2)]
    gpu = step_graph(graph, preset("h100-80gb"))
    assert not any(n.attrs.get("activation") == "leaky_relu" for n in gpu.nodes)


@pytest.mark.parametrize("alpha", [0.2, 0.0, -0.5])
def test_a_leaky_conv2d_has_a_gradient_for_a_positive_slope_alone(alpha):
    """A graph written with the fold made (as `planner graph -o` writes a step's): its
    gradient is LeakyReluGrad of y for a positive slope, refused otherwise."""
    b = GraphBuilder("written")
    x = b.param("x", (2, 3, 6, 6))
    y = b.op("Conv2D", [x, b.param("w", (4, 3, 3, 3))],
             {"pads": [1, 1, 1, 1], "activation": "leaky_relu", "alpha": alpha}, name="conv")
    graph = b.build(head(b, b.op("Flatten", [y], {"axis": 1}, name="flat"), 3, True))
    if alpha <= 0:
        with pytest.raises(OpError, match="no gradient for a folded activation"):
            make_training_graph(graph, SGD)
        return
    trained = make_training_graph(graph, SGD)
    (grad,) = [n for n in trained.nodes if n.op == "LeakyReluGrad"]
    assert grad.inputs[1] == "conv" and grad.attrs["alpha"] == alpha
