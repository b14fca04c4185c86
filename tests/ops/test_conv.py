"""Conv2D, ConvTranspose2D and their backward ops: references vs torch (float32 forward, float64
autograd) and ONNX's converted PyTorch cases, gradient rules vs finite differences, FLOPs, and
shape errors."""

import numpy as np
import pytest

from planner.graph import GraphBuilder, GraphBuildError
from planner.ops import OpError, TensorType, get_op
from tests.ops.onnx_cases import onnx_case
from tests.ops.opcheck import apply_rule, check_gradient, reference, rel_error, torch_gradients

# (x shape, w shape, attrs): square and non-square kernels, strides that leave rows unused,
# asymmetric pads, dilations, grouped and depthwise convolutions.
CONV_CASES = [
    ((2, 3, 6, 6), (4, 3, 3, 3), {"pads": [1, 1, 1, 1]}),
    ((1, 2, 7, 8), (3, 2, 3, 3), {"strides": [2, 2], "pads": [0, 1, 2, 1]}),
    ((2, 2, 7, 6), (2, 2, 2, 3), {"strides": [3, 2], "pads": [1, 0, 0, 2]}),
    ((1, 3, 8, 7), (2, 3, 3, 2), {"dilations": [2, 1], "pads": [2, 0, 1, 3]}),
    ((2, 4, 5, 6), (6, 2, 3, 3), {"groups": 2, "strides": [1, 2], "pads": [1, 1, 1, 1]}),
    ((1, 4, 6, 6), (4, 1, 3, 3), {"groups": 4, "dilations": [2, 2], "pads": [2, 2, 2, 2]}),
    ((2, 3, 5, 5), (5, 3, 1, 1), {"strides": [2, 2]}),
]

# (x shape, w shape (C, O/groups, kh, kw), attrs) for ConvTranspose2D.
TRANSPOSE_CASES = [
    ((2, 3, 4, 4), (3, 2, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1],
                                  "output_padding": [1, 1]}),
    ((1, 2, 3, 5), (2, 3, 2, 3), {"strides": [3, 2], "pads": [0, 1, 2, 0],
                                  "output_padding": [2, 0]}),
    ((1, 4, 4, 3), (4, 1, 3, 2), {"groups": 2, "dilations": [2, 1], "pads": [1, 0, 2, 1]}),
    ((2, 2, 3, 3), (2, 2, 3, 3), {}),
]


def _random(shape, dtype, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def _full(op, attrs):
    return get_op(op).normalize_attrs(dict(attrs))


def torch_conv2d(x, w, attrs):
    """F.conv2d with pads [top, left, bottom, right] applied as an explicit F.pad."""
    import torch.nn.functional as F

    a = _full("Conv2D", attrs)
    t, l, b, r = a["pads"]
    return F.conv2d(F.pad(x, (l, r, t, b)), w, stride=a["strides"], dilation=a["dilations"],
                    groups=a["groups"])


def torch_conv_transpose2d(x, w, attrs):
    """F.conv_transpose2d; asymmetric pads crop the unpadded result (output_padding rows are
    appended at the bottom/right first, where no input reaches)."""
    import torch.nn.functional as F

    a = _full("ConvTranspose2D", attrs)
    t, l, b, r = a["pads"]
    common = {"stride": a["strides"], "dilation": a["dilations"], "groups": a["groups"]}
    if (t, l) == (b, r):
        return F.conv_transpose2d(x, w, padding=(t, l), output_padding=a["output_padding"],
                                  **common)
    y = F.conv_transpose2d(x, w, **common)
    oh, ow = a["output_padding"]
    y = F.pad(y, (0, ow, 0, oh))
    return y[:, :, t:y.shape[2] - b, l:y.shape[3] - r]


# ---- forward references vs torch (float32) ---------------------------------------------------


@pytest.mark.parametrize("xs, ws, attrs", CONV_CASES)
def test_conv2d_matches_torch(xs, ws, attrs):
    torch = pytest.importorskip("torch")
    x, w = _random(xs, np.float32, 0), _random(ws, np.float32, 1)
    (y,) = reference("Conv2D", [x, w], attrs)
    expected = torch_conv2d(torch.tensor(x), torch.tensor(w), attrs).numpy()
    assert y.dtype == np.float32
    assert rel_error(y, expected) < 1e-5


@pytest.mark.parametrize("xs, ws, attrs", TRANSPOSE_CASES)
def test_conv_transpose2d_matches_torch(xs, ws, attrs):
    torch = pytest.importorskip("torch")
    x, w = _random(xs, np.float32, 0), _random(ws, np.float32, 1)
    (y,) = reference("ConvTranspose2D", [x, w], attrs)
    expected = torch_conv_transpose2d(torch.tensor(x), torch.tensor(w), attrs).numpy()
    (declared,) = get_op("ConvTranspose2D").infer(
        [TensorType(xs), TensorType(ws)], _full("ConvTranspose2D", attrs))
    assert y.shape == declared.shape == expected.shape
    assert y.dtype == np.float32
    assert rel_error(y, expected) < 1e-5


def test_asymmetric_pads_agree_with_torch_padding_when_symmetric():
    # The test's own F.pad construction against torch's padding argument.
    torch = pytest.importorskip("torch")
    x, w = torch.tensor(_random((1, 2, 5, 5), np.float64, 0)), torch.tensor(
        _random((3, 2, 3, 3), np.float64, 1))
    direct = torch.nn.functional.conv2d(x, w, padding=(1, 2), stride=2)
    assert torch.equal(torch_conv2d(x, w, {"pads": [1, 2, 1, 2], "strides": [2, 2]}), direct)


# ---- ONNX conformance cases (onnx/backend/test/data/pytorch-converted) -------------------------

@pytest.mark.parametrize("name", [
    "test_Conv2d", "test_Conv2d_no_bias", "test_Conv2d_depthwise_padded",
    "test_Conv2d_depthwise_with_multiplier", "test_Conv2d_dilated", "test_Conv2d_groups",
    "test_Conv2d_padding", "test_Conv2d_strided", "test_ConvTranspose2d",
    "test_ConvTranspose2d_no_bias"])
def test_onnx_conformance_cases(name):
    op_type, attrs, inputs, expected = onnx_case(name)
    op = {"Conv": "Conv2D", "ConvTranspose": "ConvTranspose2D"}[op_type]
    (y,) = reference(op, inputs[:2], attrs)
    if len(inputs) == 3:  # the bias, a BiasAdd in this planner's graphs
        y = y + inputs[2].reshape(1, -1, 1, 1)
    assert rel_error(y, expected) < 1e-5


# ---- backward ops vs torch autograd (float64) -------------------------------------------------


@pytest.mark.parametrize("xs, ws, attrs", CONV_CASES)
def test_conv2d_backprop_ops_match_torch_autograd(xs, ws, attrs):
    pytest.importorskip("torch")
    x, w = _random(xs, np.float64, 0), _random(ws, np.float64, 1)
    (y,) = reference("Conv2D", [x, w], attrs)
    dy = _random(y.shape, np.float64, 2)
    dx_t, dw_t = torch_gradients(lambda a, b: torch_conv2d(a, b, attrs), [x, w], [dy], [0, 1])
    (dx,) = reference("Conv2DBackpropInput", [dy, w], {**attrs, "input_shape": list(xs)})
    (dw,) = reference("Conv2DBackpropFilter", [x, dy], {**attrs, "filter_shape": list(ws)})
    assert rel_error(dx, dx_t) < 1e-10
    assert rel_error(dw, dw_t) < 1e-10


@pytest.mark.parametrize("xs, ws, attrs", TRANSPOSE_CASES)
def test_conv_transpose2d_rule_matches_torch_autograd(xs, ws, attrs):
    pytest.importorskip("torch")
    x, w = _random(xs, np.float64, 0), _random(ws, np.float64, 1)
    (dx, dw), dys, emitted = apply_rule("ConvTranspose2D", [x, w], attrs)
    dx_t, dw_t = torch_gradients(lambda a, b: torch_conv_transpose2d(a, b, attrs), [x, w], dys,
                                 [0, 1])
    assert emitted == ["Conv2D", "Conv2DBackpropFilter"]
    assert rel_error(dx, dx_t) < 1e-10
    assert rel_error(dw, dw_t) < 1e-10


# ---- gradient rules vs finite differences (float64) -------------------------------------------


@pytest.mark.parametrize("xs, ws, attrs", CONV_CASES[1:6])
def test_conv2d_rule_matches_finite_differences(xs, ws, attrs):
    x, w = _random(xs, np.float64, 0), _random(ws, np.float64, 1)
    check_gradient("Conv2D", [x, w], attrs)


@pytest.mark.parametrize("xs, ws, attrs", TRANSPOSE_CASES[:3])
def test_conv_transpose2d_rule_matches_finite_differences(xs, ws, attrs):
    x, w = _random(xs, np.float64, 0), _random(ws, np.float64, 1)
    check_gradient("ConvTranspose2D", [x, w], attrs)


def test_conv2d_rule_emits_only_the_wanted_gradients():
    x, w = _random((1, 2, 4, 4), np.float64, 0), _random((3, 2, 3, 3), np.float64, 1)
    (dx, dw), _, emitted = apply_rule("Conv2D", [x, w], {"pads": [1, 1, 1, 1]}, wrt=[1])
    assert dx is None and dw.shape == w.shape
    assert emitted == ["Conv2DBackpropFilter"]


# ---- FLOPs ------------------------------------------------------------------------------------


@pytest.mark.parametrize("xs, ws, attrs", CONV_CASES)
def test_forward_and_backward_flops_agree(xs, ws, attrs):
    x, w = TensorType(xs), TensorType(ws)
    conv = get_op("Conv2D")
    (y,) = conv.infer([x, w], _full("Conv2D", attrs))
    macs = y.size * (ws[1] * ws[2] * ws[3])  # one multiply-add per output and kernel tap
    assert conv.flops([x, w], [y], _full("Conv2D", attrs)) == 2 * macs
    bi = {**attrs, "input_shape": list(xs)}
    bf = {**attrs, "filter_shape": list(ws)}
    assert get_op("Conv2DBackpropInput").flops(
        [y, w], [x], _full("Conv2DBackpropInput", bi)) == 2 * macs
    assert get_op("Conv2DBackpropFilter").flops(
        [x, y], [w], _full("Conv2DBackpropFilter", bf)) == 2 * macs


def test_conv_transpose2d_flops_equal_its_adjoint_conv():
    x, w = TensorType((2, 3, 4, 4)), TensorType((3, 2, 3, 3))
    attrs = _full("ConvTranspose2D", {"strides": [2, 2], "pads": [1, 1, 1, 1]})
    (y,) = get_op("ConvTranspose2D").infer([x, w], attrs)
    conv_attrs = {k: v for k, v in attrs.items() if k != "output_padding"}
    (back,) = get_op("Conv2D").infer([y, w], _full("Conv2D", conv_attrs))
    assert back.shape == x.shape
    assert (get_op("ConvTranspose2D").flops([x, w], [y], attrs)
            == get_op("Conv2D").flops([y, w], [x], _full("Conv2D", conv_attrs)))


# ---- shape errors -----------------------------------------------------------------------------


def _infer(op, shapes, attrs):
    return get_op(op).infer([TensorType(s) for s in shapes], _full(op, attrs))


def test_channel_mismatch_names_both_counts():
    with pytest.raises(OpError, match=r"x has 3 channels but weight w \[4, 2, 3, 3\] with "
                                      r"groups=1 expects 2"):
        _infer("Conv2D", [(1, 3, 5, 5), (4, 2, 3, 3)], {})
    with pytest.raises(OpError, match="groups=2 does not divide the 3 output channels"):
        _infer("Conv2D", [(1, 4, 5, 5), (3, 2, 3, 3)], {"groups": 2})


def test_kernel_larger_than_padded_input():
    with pytest.raises(OpError, match=r"kernel 3x3 \(dilated extent 5x5\) is larger than the "
                                      r"padded input 4x6"):
        _infer("Conv2D", [(1, 1, 4, 4), (1, 1, 3, 3)], {"dilations": [2, 2], "pads": [0, 1, 0, 1]})


def test_wrong_rank_and_dtype():
    with pytest.raises(OpError, match=r"input x \(N,C,H,W\) must have rank 4, got shape "
                                      r"\[3, 5, 5\]"):
        _infer("Conv2D", [(3, 5, 5), (1, 3, 3, 3)], {})
    with pytest.raises(OpError, match="weight w .* must have rank 4"):
        _infer("ConvTranspose2D", [(1, 3, 5, 5), (3, 3, 3)], {})
    with pytest.raises(OpError, match="weight w is float64 but input x is float32"):
        get_op("Conv2D").infer([TensorType((1, 1, 3, 3)), TensorType((1, 1, 1, 1), "float64")],
                               _full("Conv2D", {}))


def test_bad_window_attrs():
    with pytest.raises(OpError, match=r"'pads' must be 4 integers >= 0, got \[1, 1\]"):
        _infer("Conv2D", [(1, 1, 5, 5), (1, 1, 3, 3)], {"pads": [1, 1]})
    with pytest.raises(OpError, match=r"'strides' must be 2 integers >= 1, got \[0, 1\]"):
        _infer("Conv2D", [(1, 1, 5, 5), (1, 1, 3, 3)], {"strides": [0, 1]})
    with pytest.raises(OpError, match=r"output_padding \[2, 0\] must be smaller than strides"):
        _infer("ConvTranspose2D", [(1, 2, 3, 3), (2, 1, 3, 3)],
               {"strides": [2, 2], "output_padding": [2, 0]})


def test_backprop_ops_check_their_shape_attrs():
    with pytest.raises(OpError, match=r"gradient dy is float32\[1, 2, 3, 3\] but the forward "
                                      r"output for input_shape \[1, 1, 6, 6\] is "
                                      r"float32\[1, 2, 4, 4\]"):
        _infer("Conv2DBackpropInput", [(1, 2, 3, 3), (2, 1, 3, 3)], {"input_shape": [1, 1, 6, 6]})
    with pytest.raises(OpError, match="'filter_shape' must be 4 positive integers"):
        _infer("Conv2DBackpropFilter", [(1, 1, 5, 5), (1, 2, 3, 3)], {"filter_shape": [2, 1, 3]})


def test_builder_error_names_the_node():
    b = GraphBuilder()
    x = b.input("x", (1, 3, 8, 8))
    w = b.param("w", (8, 4, 3, 3))
    with pytest.raises(GraphBuildError, match="node 'conv1': Conv2D: input x has 3 channels"):
        b.op("Conv2D", [x, w], name="conv1")


# ---- a folded bias and Relu (planner/frontend/passes/fold_conv_bias.py)
# --------------------------------


@pytest.mark.parametrize("xs, ws, attrs", CONV_CASES)
@pytest.mark.parametrize("bias, activation", [(True, "none"), (False, "relu"), (True, "relu")])
def test_fused_conv2d_is_the_unfused_composition(xs, ws, attrs, bias, activation):
    """Conv2D with a bias input and an activation is Conv2D, BiasAdd (axis 1), Relu, to the
    bit: the same float32 operations in the same order."""
    x, w = _random(xs, np.float32, 0), _random(ws, np.float32, 1)
    b = _random((ws[0],), np.float32, 2)
    (y,) = reference("Conv2D", [x, w], attrs)
    if bias:
        (y,) = reference("BiasAdd", [y, b], {"axis": 1})
    if activation == "relu":
        (y,) = reference("Relu", [y], {})
    (fused,) = reference("Conv2D", [x, w, b] if bias else [x, w],
                         {**attrs, "activation": activation})
    assert fused.dtype == np.float32
    np.testing.assert_array_equal(fused, y)


def test_fused_conv2d_flops_count_the_bias_and_relu():
    x, w, b = TensorType((2, 3, 6, 6)), TensorType((4, 3, 3, 3)), TensorType((4,))
    attrs = _full("Conv2D", {"pads": [1, 1, 1, 1]})
    (y,) = get_op("Conv2D").infer([x, w], attrs)
    conv = get_op("Conv2D").flops([x, w], [y], attrs)
    fused = get_op("Conv2D").flops([x, w, b], [y], {**attrs, "activation": "relu"})
    assert fused == conv + get_op("BiasAdd").flops([y, b], [y], {"axis": 1}) \
        + get_op("Relu").flops([y], [y], {})
    assert get_op("Conv2D").bytes_moved([x, w, b], [y], attrs) == \
        get_op("Conv2D").bytes_moved([x, w], [y], attrs) + b.nbytes


def test_fused_conv2d_checks_its_bias_and_activation():
    with pytest.raises(OpError, match=r"bias must be float32 of shape \[4\] \(the output "
                                      r"channels\), got float32 \[3\]"):
        _infer("Conv2D", [(1, 3, 5, 5), (4, 3, 3, 3), (3,)], {})
    with pytest.raises(OpError, match=r"activation must be one of \['none', 'relu', "
                                      r"'leaky_relu'\], got 'gelu'"):
        _infer("Conv2D", [(1, 3, 5, 5), (4, 3, 3, 3)], {"activation": "gelu"})
    with pytest.raises(OpError, match="leaky_relu needs its slope, attr alpha"):
        _infer("Conv2D", [(1, 3, 5, 5), (4, 3, 3, 3)], {"activation": "leaky_relu"})
    with pytest.raises(OpError, match="Conv2D takes 2 or 3 inputs"):
        _infer("Conv2D", [(1, 3, 5, 5), (4, 3, 3, 3), (4,), (4,)], {})
