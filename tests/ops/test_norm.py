"""BatchNorm and LRN with their backward ops: references vs torch (float32 forward, float64
autograd) and ONNX's reference (even LRN sizes), gradient rules vs finite differences, a conv
stack differentiated by autodiff vs torch, and shape errors."""

import numpy as np
import pytest

from planner.graph import GraphBuilder, check_graph
from planner.graph.interpret import run
from planner.ops import OpError, TensorType, get_op
from tests.ops.onnx_cases import onnx_case
from tests.ops.opcheck import (
    RuleBuilder,
    apply_rule,
    check_gradient,
    numeric_gradient,
    reference,
    rel_error,
    torch_gradients,
)

SHAPES = [(4, 3), (2, 3, 5), (2, 3, 4, 5)]
BN = {"epsilon": 1e-3, "momentum": 0.2}


def _random(shape, dtype, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def _bn_inputs(shape, dtype, seed=0):
    """x with a per-channel offset, scale, bias, running mean, and a positive running var."""
    rng = np.random.default_rng(seed)
    c = shape[1]
    offset = rng.standard_normal(c).reshape(1, c, *[1] * (len(shape) - 2))
    x = rng.standard_normal(shape) * 2.0 + offset
    stats = [rng.standard_normal(c), rng.standard_normal(c), rng.standard_normal(c),
             rng.uniform(0.5, 2.0, c)]
    return [np.asarray(v, dtype=dtype) for v in (x, *stats)]


# ---- BatchNorm forward vs torch (float32) ----------------------------------------------------


@pytest.mark.parametrize("shape", SHAPES)
def test_batchnorm_training_matches_torch(shape):
    torch = pytest.importorskip("torch")
    x, scale, bias, mean, var = _bn_inputs(shape, np.float32)
    outs = reference("BatchNorm", [x, scale, bias, mean, var], BN)
    rm, rv = torch.tensor(mean), torch.tensor(var)
    y, saved_mean, saved_invstd = torch.native_batch_norm(
        torch.tensor(x), torch.tensor(scale), torch.tensor(bias), rm, rv, True, BN["momentum"],
        BN["epsilon"])
    expected = [y, rm, rv, saved_mean, saved_invstd]  # running stats updated in place
    assert [o.dtype for o in outs] == [np.float32] * 5
    for got, want in zip(outs, expected, strict=True):
        assert rel_error(got, want.numpy()) < 1e-5


@pytest.mark.parametrize("shape", SHAPES)
def test_batchnorm_inference_matches_torch(shape):
    torch = pytest.importorskip("torch")
    x, scale, bias, mean, var = _bn_inputs(shape, np.float32)
    (y,) = reference("BatchNorm", [x, scale, bias, mean, var], {**BN, "training": False})
    expected = torch.nn.functional.batch_norm(
        torch.tensor(x), torch.tensor(mean), torch.tensor(var), torch.tensor(scale),
        torch.tensor(bias), training=False, eps=BN["epsilon"]).numpy()
    assert y.dtype == np.float32
    assert rel_error(y, expected) < 1e-5


@pytest.mark.parametrize("name", ["test_BatchNorm1d_3d_input_eval", "test_BatchNorm2d_eval",
                                  "test_BatchNorm2d_momentum_eval"])
def test_batchnorm_onnx_conformance_cases(name):
    # is_test=1: inference with the running statistics (ONNX's momentum is 1 - PyTorch's).
    _, attrs, inputs, expected = onnx_case(name)
    (y,) = reference("BatchNorm", inputs, {**attrs, "training": False})
    assert rel_error(y, expected) < 1e-5


# ---- BatchNorm backward: torch autograd and finite differences (float64) -----------------------


def _bn_training_rule(inputs, seed=0):
    """The training-mode rule with dy fed for y only: the statistics outputs take no gradient
    (they feed state updates and BatchNormGrad), so opcheck.apply_rule, which feeds every
    output, does not fit. Returns (dx, dscale, dbias, the two stat gradients), dy."""
    b = GraphBuilder("bn_grad")
    names = [b.input(f"x{k}", v.shape, str(v.dtype)) for k, v in enumerate(inputs)]
    b.op_n("BatchNorm", names, BN)
    node = b.build().nodes[-1]
    dy = _random(inputs[0].shape, inputs[0].dtype, seed + 1)
    dy_name = b.input("dy", dy.shape, str(dy.dtype))
    grads = get_op("BatchNorm").gradient(RuleBuilder(b, set(names[:3])), node,
                                         [dy_name, None, None, None, None])
    graph = check_graph(b.build(outputs=[g for g in grads if g is not None]))
    assert [n.op for n in graph.nodes] == ["BatchNorm", "BatchNormGrad"]
    values = run(graph, {**dict(zip(names, inputs, strict=True)), dy_name: dy}, {})
    return [values[g] if g is not None else None for g in grads], dy


@pytest.mark.parametrize("shape", SHAPES)
def test_batchnorm_training_rule_matches_torch_and_finite_differences(shape):
    pytest.importorskip("torch")
    import torch.nn.functional as F

    inputs = _bn_inputs(shape, np.float64)
    grads, dy = _bn_training_rule(inputs)
    assert grads[3:] == [None, None]

    def bn(x, scale, bias):
        return F.batch_norm(x, None, None, scale, bias, training=True, eps=BN["epsilon"])

    expected = torch_gradients(bn, inputs[:3], [dy], [0, 1, 2])
    zeros = [np.zeros(s.shape) for s in inputs[1:]]
    for k in range(3):
        assert rel_error(grads[k], expected[k]) < 1e-10
        numeric = numeric_gradient("BatchNorm", inputs, BN, [dy, *zeros], k)
        assert rel_error(grads[k], numeric) < 1e-4


@pytest.mark.parametrize("shape", SHAPES[1:])
def test_batchnorm_inference_rule_matches_torch_and_finite_differences(shape):
    pytest.importorskip("torch")
    import torch.nn.functional as F

    inputs = _bn_inputs(shape, np.float64)
    attrs = {**BN, "training": False}
    grads, dys = check_gradient("BatchNorm", inputs, attrs)
    assert grads[3:] == [None, None]

    def bn(x, scale, bias):
        return F.batch_norm(x, torch_tensor(inputs[3]), torch_tensor(inputs[4]), scale, bias,
                            training=False, eps=BN["epsilon"])

    for got, want in zip(grads, torch_gradients(bn, inputs[:3], dys, [0, 1, 2]), strict=False):
        assert rel_error(got, want) < 1e-10


def torch_tensor(a):
    import torch

    return torch.tensor(a)


def test_batchnorm_rule_refuses_gradients_of_its_statistics():
    with pytest.raises(OpError, match="no gradient rule for its statistics output 'batchnorm:1'"):
        apply_rule("BatchNorm", _bn_inputs((4, 2), np.float64), BN)


# ---- LRN --------------------------------------------------------------------------------------

LRN_CASES = [
    ((2, 7, 3, 3), {}),
    ((1, 6, 4, 2), {"size": 3, "alpha": 0.5, "beta": 0.6, "bias": 2.0}),
    ((2, 4, 5), {"size": 5, "alpha": 0.3, "beta": 0.9, "bias": 1.5}),
    ((1, 3, 2, 2), {"size": 7, "alpha": 1.0, "beta": 0.75, "bias": 1.0}),
]
EVEN_LRN = [((1, 6, 2, 3), {"size": 4, "alpha": 0.5, "beta": 0.75, "bias": 1.0}),
            ((2, 5, 3, 2), {"size": 2, "alpha": 0.8, "beta": 0.5, "bias": 2.0})]


def torch_lrn(x, attrs):
    import torch.nn.functional as F

    a = get_op("LRN").normalize_attrs(dict(attrs))
    return F.local_response_norm(x, a["size"], a["alpha"], a["beta"], a["bias"])


@pytest.mark.parametrize("shape, attrs", LRN_CASES)
def test_lrn_matches_torch(shape, attrs):
    torch = pytest.importorskip("torch")
    x = _random(shape, np.float32, 0) * 3
    (y,) = reference("LRN", [x], attrs)
    assert y.dtype == np.float32
    assert rel_error(y, torch_lrn(torch.tensor(x), attrs).numpy()) < 1e-5


@pytest.mark.parametrize("shape, attrs", EVEN_LRN)
def test_lrn_even_size_follows_onnx(shape, attrs):
    # ONNX's window for channel c is [c - (size-1)//2, c + size//2], torch's is
    # [c - size//2, c + (size-1)//2]: one is the other with the channel order reversed.
    # (onnx.reference's LRN cannot serve: it loops over the batch axis instead of channels.)
    torch = pytest.importorskip("torch")
    x = _random(shape, np.float32, 0) * 3
    (y,) = reference("LRN", [x], attrs)
    flipped = torch_lrn(torch.tensor(x[:, ::-1].copy()), attrs).numpy()[:, ::-1]
    assert rel_error(y, flipped) < 1e-5
    assert rel_error(y, torch_lrn(torch.tensor(x), attrs).numpy()) > 1e-2


@pytest.mark.parametrize("shape, attrs", LRN_CASES)
def test_lrn_rule_matches_torch_autograd(shape, attrs):
    pytest.importorskip("torch")
    x = _random(shape, np.float64, 0) * 3
    (dx,), dys, emitted = apply_rule("LRN", [x], attrs)
    (expected,) = torch_gradients(lambda t: torch_lrn(t, attrs), [x], dys, [0])
    assert emitted == ["LRNGrad"]
    assert rel_error(dx, expected) < 1e-10


@pytest.mark.parametrize("shape, attrs", LRN_CASES[1:3] + EVEN_LRN)
def test_lrn_rule_matches_finite_differences(shape, attrs):
    check_gradient("LRN", [_random(shape, np.float64, 0) * 3], attrs)


# ---- a conv stack through autodiff vs torch ----------------------------------------------------


def test_conv_stack_gradients_through_autodiff_match_torch():
    """Conv2D -> BatchNorm -> MaxPool -> LRN -> ConvTranspose2D -> AvgPool -> GlobalAvgPool,
    differentiated by planner.frontend.autodiff (a vector-Jacobian product) vs torch autograd."""
    pytest.importorskip("torch")
    import torch.nn.functional as F

    from planner.frontend.autodiff import gradients

    shapes = {"x": (2, 3, 8, 8), "w1": (4, 3, 3, 3), "scale": (4,), "bias": (4,),
              "mean": (4,), "var": (4,), "w2": (4, 2, 2, 2)}
    rng = np.random.default_rng(0)
    vals = {k: rng.standard_normal(s) for k, s in shapes.items()}
    vals["var"] = np.abs(vals["var"]) + 0.5
    b = GraphBuilder("stack")
    t = {k: b.input(k, s, "float64") for k, s in shapes.items()}
    h = b.op("Conv2D", [t["x"], t["w1"]], {"pads": [1, 1, 1, 1]})
    h = b.op_n("BatchNorm", [h, t["scale"], t["bias"], t["mean"], t["var"]])[0]
    h = b.op("MaxPool", [h], {"kernel": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]})
    h = b.op("LRN", [h], {"size": 3, "alpha": 0.5})
    h = b.op("ConvTranspose2D", [h, t["w2"]], {"strides": [2, 2]})
    h = b.op("AvgPool", [h], {"kernel": [2, 2], "strides": [2, 2]})
    y = b.op("GlobalAvgPool", [h])
    wrt = ["x", "w1", "scale", "bias", "w2"]
    graph, grads = gradients(b.build(outputs=[y]), wrt=wrt, of=[y])
    dy = rng.standard_normal((2, 2, 1, 1))
    values = run(graph, {**vals, f"grad/{y}": dy}, {})

    def stack(x, w1, scale, bias, w2):
        h = F.conv2d(x, w1, padding=1)
        h = F.batch_norm(h, None, None, scale, bias, training=True)
        h = F.max_pool2d(h, 3, 2, 1)
        h = F.local_response_norm(h, 3, alpha=0.5)
        h = F.conv_transpose2d(h, w2, stride=2)
        return F.adaptive_avg_pool2d(F.avg_pool2d(h, 2, 2), 1)

    expected = torch_gradients(stack, [vals[k] for k in wrt], [dy], range(5))
    for name, want in zip(wrt, expected, strict=True):
        assert rel_error(values[grads[name]], want) < 1e-10, name


# ---- FLOPs and shape errors -------------------------------------------------------------------


def test_flops_scale_with_elements():
    x, c = TensorType((2, 3, 4, 4)), TensorType((3,))
    bn = get_op("BatchNorm")
    train = bn.normalize_attrs({})
    assert bn.flops([x, c, c, c, c], [x, c, c, c, c], train) == 6 * x.size
    assert bn.flops([x, c, c, c, c], [x], {**train, "training": False}) == 2 * x.size
    lrn = get_op("LRN").normalize_attrs({"size": 3})
    assert get_op("LRN").flops([x], [x], lrn) == (3 + 5) * x.size


def test_norm_shape_errors():
    def infer(op, shapes, attrs):
        return get_op(op).infer([TensorType(s) for s in shapes],
                                get_op(op).normalize_attrs(attrs))

    c = (3,)
    with pytest.raises(OpError, match=r"BatchNorm: scale must have shape \[3\] \(the channels of "
                                      r"x \[2, 3, 4, 4\]\), got \[4\]"):
        infer("BatchNorm", [(2, 3, 4, 4), (4,), c, c, c], {})
    with pytest.raises(OpError, match=r"input x must have rank >= 2"):
        infer("BatchNorm", [(3,), c, c, c, c], {})
    with pytest.raises(OpError, match="more than one value per channel"):
        infer("BatchNorm", [(1, 3, 1, 1), c, c, c, c], {})
    assert infer("BatchNorm", [(1, 3, 1, 1), c, c, c, c], {"training": False})[0].shape == (
        1, 3, 1, 1)
    with pytest.raises(OpError, match=r"BatchNormGrad: saved_invstd must have shape \[3\]"):
        infer("BatchNormGrad", [(2, 3, 4), (2, 3, 4), c, c, (2,)], {})
    with pytest.raises(OpError, match=r"BatchNormGrad: running_var must have shape \[3\]"):
        infer("BatchNormGrad", [(2, 3, 4), (2, 3, 4), c, c, (2,)], {"training": False})
    with pytest.raises(OpError, match=r"BatchNormGrad: dy is float32\[2, 3\] but x is "):
        infer("BatchNormGrad", [(2, 3), (2, 3, 4), c, c, c], {})
    with pytest.raises(OpError, match="LRN: attribute 'size' must be >= 1, got 0"):
        infer("LRN", [(2, 3, 4)], {"size": 0})
    with pytest.raises(OpError, match=r"LRNGrad: y is float32\[2, 3\] but x is "
                                      r"float32\[2, 3, 4\]"):
        infer("LRNGrad", [(2, 3, 4), (2, 3, 4), (2, 3)], {})
