"""MaxPool, AvgPool, GlobalAvgPool and their backward ops: references vs torch (float32 forward,
float64 autograd, ties included), gradient rules vs finite differences, and shape errors."""

import numpy as np
import pytest

from planner.ops import OpError, TensorType, get_op
from tests.ops.onnx_cases import onnx_case
from tests.ops.opcheck import apply_rule, check_gradient, reference, rel_error, torch_gradients

# (x shape, attrs) accepted by torch's own padding argument: symmetric pads <= kernel / 2.
MAX_CASES = [
    ((2, 3, 6, 6), {"kernel": [2, 2], "strides": [2, 2]}),
    ((1, 2, 7, 7), {"kernel": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ((1, 2, 7, 8), {"kernel": [3, 2], "strides": [2, 3], "pads": [1, 1, 1, 1],
                    "ceil_mode": True}),
    ((2, 1, 8, 7), {"kernel": [2, 3], "strides": [1, 2], "dilations": [2, 1],
                    "pads": [0, 1, 0, 1]}),
    ((1, 2, 6, 5), {"kernel": [3, 3], "strides": [2, 2], "dilations": [1, 2],
                    "ceil_mode": True}),
    ((1, 1, 5, 5), {"kernel": [2, 2], "strides": [2, 2], "pads": [1, 1, 1, 1],
                    "ceil_mode": True}),
]
AVG_CASES = [
    ((2, 3, 6, 6), {"kernel": [2, 2], "strides": [2, 2]}),
    ((1, 2, 7, 7), {"kernel": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ((1, 2, 7, 8), {"kernel": [3, 2], "strides": [2, 3], "pads": [1, 1, 1, 1],
                    "ceil_mode": True}),
    ((1, 1, 5, 5), {"kernel": [2, 2], "strides": [2, 2], "pads": [1, 1, 1, 1],
                    "ceil_mode": True}),
    ((2, 2, 5, 6), {"kernel": [3, 3], "strides": [1, 1], "pads": [1, 1, 1, 1]}),
]
# Asymmetric pads (torch has none: the test pads explicitly), floor mode.
ASYMMETRIC = [
    ((1, 2, 6, 7), {"kernel": [3, 3], "strides": [2, 2], "pads": [0, 2, 1, 0]}),
    ((2, 1, 5, 5), {"kernel": [2, 3], "strides": [1, 2], "pads": [1, 0, 0, 2]}),
]


def _random(shape, dtype, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def _full(op, attrs):
    return get_op(op).normalize_attrs(dict(attrs))


def torch_maxpool(x, attrs):
    import torch.nn.functional as F

    a = _full("MaxPool", attrs)
    t, l, b, r = a["pads"]
    if (t, l) != (b, r):
        x, (t, l) = F.pad(x, (l, r, t, b), value=float("-inf")), (0, 0)
    return F.max_pool2d(x, a["kernel"], a["strides"], (t, l), a["dilations"], a["ceil_mode"])


def torch_avgpool(x, attrs):
    """F.avg_pool2d; asymmetric pads by F.pad, divisors from pooling a padded mask of ones."""
    import torch
    import torch.nn.functional as F

    a = _full("AvgPool", attrs)
    t, l, b, r = a["pads"]
    if (t, l) == (b, r):
        return F.avg_pool2d(x, a["kernel"], a["strides"], (t, l), a["ceil_mode"],
                            a["count_include_pad"])
    sums = F.avg_pool2d(F.pad(x, (l, r, t, b)), a["kernel"], a["strides"])
    if a["count_include_pad"]:
        return sums
    return sums / F.avg_pool2d(F.pad(torch.ones_like(x), (l, r, t, b)), a["kernel"], a["strides"])


# ---- forward references vs torch (float32) ---------------------------------------------------


@pytest.mark.parametrize("xs, attrs", MAX_CASES + ASYMMETRIC)
def test_maxpool_matches_torch(xs, attrs):
    torch = pytest.importorskip("torch")
    x = _random(xs, np.float32, 0)
    (y,) = reference("MaxPool", [x], attrs)
    expected = torch_maxpool(torch.tensor(x), attrs).numpy()
    (declared,) = get_op("MaxPool").infer([TensorType(xs)], _full("MaxPool", attrs))
    assert y.shape == declared.shape == expected.shape
    assert y.dtype == np.float32
    assert rel_error(y, expected) < 1e-5


@pytest.mark.parametrize("count_include_pad", [False, True])
@pytest.mark.parametrize("xs, attrs", AVG_CASES + ASYMMETRIC)
def test_avgpool_matches_torch(xs, attrs, count_include_pad):
    torch = pytest.importorskip("torch")
    attrs = {**attrs, "count_include_pad": count_include_pad}
    x = _random(xs, np.float32, 0)
    (y,) = reference("AvgPool", [x], attrs)
    expected = torch_avgpool(torch.tensor(x), attrs).numpy()
    (declared,) = get_op("AvgPool").infer([TensorType(xs)], _full("AvgPool", attrs))
    assert y.shape == declared.shape == expected.shape
    assert y.dtype == np.float32
    assert rel_error(y, expected) < 1e-5


def test_global_avgpool_matches_torch():
    torch = pytest.importorskip("torch")
    x = _random((2, 3, 5, 4), np.float32, 0)
    (y,) = reference("GlobalAvgPool", [x])
    expected = torch.nn.functional.adaptive_avg_pool2d(torch.tensor(x), 1).numpy()
    assert y.shape == (2, 3, 1, 1) and y.dtype == np.float32
    assert rel_error(y, expected) < 1e-5


@pytest.mark.parametrize("name", ["test_MaxPool2d", "test_MaxPool2d_stride_padding_dilation",
                                  "test_AvgPool2d", "test_AvgPool2d_stride"])
def test_onnx_conformance_cases(name):
    op_type, attrs, inputs, expected = onnx_case(name)
    op = {"MaxPool": "MaxPool", "AveragePool": "AvgPool"}[op_type]
    (y,) = reference(op, inputs, attrs)
    assert rel_error(y, expected) < 1e-5


# ---- backward ops vs torch autograd (float64) -------------------------------------------------


@pytest.mark.parametrize("xs, attrs", MAX_CASES + ASYMMETRIC)
def test_maxpool_grad_matches_torch_with_ties(xs, attrs):
    # Few distinct values, so most windows hold several maxima: the first one gets dy.
    pytest.importorskip("torch")
    x = np.random.default_rng(0).integers(0, 3, xs).astype(np.float64)
    (dx,), dys, emitted = apply_rule("MaxPool", [x], attrs)
    (expected,) = torch_gradients(lambda t: torch_maxpool(t, attrs), [x], dys, [0])
    assert emitted == ["MaxPoolGrad"]
    assert rel_error(dx, expected) < 1e-12


@pytest.mark.parametrize("count_include_pad", [False, True])
@pytest.mark.parametrize("xs, attrs", AVG_CASES + ASYMMETRIC)
def test_avgpool_grad_matches_torch(xs, attrs, count_include_pad):
    pytest.importorskip("torch")
    attrs = {**attrs, "count_include_pad": count_include_pad}
    x = _random(xs, np.float64, 0)
    (dx,), dys, emitted = apply_rule("AvgPool", [x], attrs)
    (expected,) = torch_gradients(lambda t: torch_avgpool(t, attrs), [x], dys, [0])
    assert emitted == ["AvgPoolGrad"]
    assert rel_error(dx, expected) < 1e-12


def test_global_avgpool_grad_matches_torch():
    pytest.importorskip("torch")
    import torch.nn.functional as F

    x = _random((2, 3, 4, 5), np.float64, 0)
    (dx,), dys, emitted = apply_rule("GlobalAvgPool", [x])
    (expected,) = torch_gradients(lambda t: F.adaptive_avg_pool2d(t, 1), [x], dys, [0])
    assert emitted == ["AvgPoolGrad"]
    assert rel_error(dx, expected) < 1e-12


# ---- gradient rules vs finite differences (float64) -------------------------------------------


@pytest.mark.parametrize("xs, attrs", [MAX_CASES[2], MAX_CASES[3], ASYMMETRIC[0]])
def test_maxpool_rule_matches_finite_differences(xs, attrs):
    check_gradient("MaxPool", [_random(xs, np.float64, 3)], attrs)


@pytest.mark.parametrize("count_include_pad", [False, True])
@pytest.mark.parametrize("xs, attrs", [AVG_CASES[2], ASYMMETRIC[1]])
def test_avgpool_rule_matches_finite_differences(xs, attrs, count_include_pad):
    attrs = {**attrs, "count_include_pad": count_include_pad}
    check_gradient("AvgPool", [_random(xs, np.float64, 3)], attrs)


def test_global_avgpool_rule_matches_finite_differences():
    check_gradient("GlobalAvgPool", [_random((1, 2, 3, 4), np.float64, 3)])


# ---- FLOPs and shape errors -------------------------------------------------------------------


def test_flops_count_window_taps():
    x = TensorType((2, 3, 8, 8))
    attrs = _full("MaxPool", {"kernel": [3, 2], "strides": [2, 2]})
    (y,) = get_op("MaxPool").infer([x], attrs)
    assert y.shape == (2, 3, 3, 4)
    assert get_op("MaxPool").flops([x], [y], attrs) == y.size * 3 * 2
    avg = _full("AvgPool", {"kernel": [3, 2], "strides": [2, 2]})
    assert get_op("AvgPool").flops([x], [y], avg) == y.size * (3 * 2 + 1)
    g = TensorType((2, 3, 1, 1))
    assert get_op("GlobalAvgPool").flops([x], [g], {}) == x.size + g.size


def test_ceil_mode_keeps_a_partial_window_unless_it_starts_in_the_padding():
    def rows(h, k, pad, ceil_mode):
        attrs = _full("MaxPool", {"kernel": [k, k], "strides": [2, 2], "pads": [pad] * 4,
                                  "ceil_mode": ceil_mode})
        return get_op("MaxPool").infer([TensorType((1, 1, h, h))], attrs)[0].shape[2]

    # 6 rows + 2 padding, kernel 3: windows start at padded rows 0, 2, 4 and, partial, 6.
    assert (rows(6, 3, 1, False), rows(6, 3, 1, True)) == (3, 4)
    # 5 rows + 2 padding, kernel 2: a partial 4th window would start at padded row 6, which is
    # the bottom padding, so ceil_mode adds nothing.
    assert (rows(5, 2, 1, False), rows(5, 2, 1, True)) == (3, 3)


def test_pool_shape_errors():
    def infer(op, shape, attrs):
        return get_op(op).infer([TensorType(shape)], _full(op, attrs))

    with pytest.raises(OpError, match=r"MaxPool: kernel 5x5 .* larger than the padded input 4x4"):
        infer("MaxPool", (1, 1, 4, 4), {"kernel": [5, 5]})
    with pytest.raises(OpError, match=r"AvgPool: input x \(N,C,H,W\) must have rank 4"):
        infer("AvgPool", (1, 4, 4), {"kernel": [2, 2]})
    with pytest.raises(OpError, match=r"pads \[0, 2, 0, 0\] must be smaller than the kernel "
                                      r"extent \[2, 2\]"):
        infer("MaxPool", (1, 1, 4, 4), {"kernel": [2, 2], "pads": [0, 2, 0, 0]})
    with pytest.raises(OpError, match=r"'kernel' must be 2 integers >= 1, got \[3\]"):
        infer("MaxPool", (1, 1, 4, 4), {"kernel": [3]})
    with pytest.raises(OpError, match="GlobalAvgPool: input x .* must have rank 4"):
        infer("GlobalAvgPool", (2, 3), {})
    with pytest.raises(OpError, match=r"MaxPoolGrad: gradient dy is float32\[1, 1, 3, 3\] but "
                                      r"the pool output is float32\[1, 1, 2, 2\]"):
        get_op("MaxPoolGrad").infer([TensorType((1, 1, 3, 3)), TensorType((1, 1, 4, 4))],
                                    _full("MaxPoolGrad", {"kernel": [2, 2], "strides": [2, 2]}))
    with pytest.raises(OpError, match="AvgPoolGrad: attribute 'input_shape' must be 4"):
        get_op("AvgPoolGrad").infer([TensorType((1, 1, 2, 2))],
                                    _full("AvgPoolGrad", {"kernel": [2, 2],
                                                          "input_shape": [4, 4]}))
