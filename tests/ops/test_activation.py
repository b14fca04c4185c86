"""Activations: references vs torch, gradient rules (and so the *Grad ops) vs finite differences
and torch autograd, shape and dtype errors."""

import warnings

import numpy as np
import pytest

from planner.ops import OpError, TensorType, get_op
from tests.ops.opcheck import apply_rule, check_gradient, reference, rel_error, torch_gradients

# (op, attrs, its gradient op)
CASES = [
    ("Relu", {}, "ReluGrad"),
    ("LeakyRelu", {}, "LeakyReluGrad"),
    ("LeakyRelu", {"alpha": 0.2}, "LeakyReluGrad"),
    ("LeakyRelu", {"alpha": -0.5}, "LeakyReluGrad"),  # y's sign no longer tells x's
    ("Tanh", {}, "TanhGrad"),
    ("Sigmoid", {}, "SigmoidGrad"),
    ("Softmax", {}, "SoftmaxGrad"),
    ("Softmax", {"axis": 1}, "SoftmaxGrad"),
    ("Softmax", {"axis": 0}, "SoftmaxGrad"),
]
IDS = [f"{op}-{attrs}" for op, attrs, _ in CASES]


def _torch_fn(op, attrs):
    import torch
    f = torch.nn.functional
    full = get_op(op).normalize_attrs(attrs)
    return {
        "Relu": torch.relu,
        "LeakyRelu": lambda x: f.leaky_relu(x, full.get("alpha", 0.0)),
        "Tanh": torch.tanh,
        "Sigmoid": torch.sigmoid,
        "Softmax": lambda x: torch.softmax(x, dim=full.get("axis", -1)),
    }[op]


def _x(dtype, seed=0):
    return np.random.default_rng(seed).standard_normal((3, 4, 2)).astype(dtype)


@pytest.mark.parametrize("op,attrs,grad_op", CASES, ids=IDS)
def test_reference_matches_torch(op, attrs, grad_op):
    torch = pytest.importorskip("torch")
    x = _x(np.float32)
    ours = reference(op, [x], attrs)[0]
    assert ours.dtype == np.float32 and ours.shape == x.shape
    assert rel_error(ours, _torch_fn(op, attrs)(torch.tensor(x)).numpy()) < 1e-5


@pytest.mark.parametrize("op,attrs,grad_op", CASES, ids=IDS)
def test_gradient_finite_differences(op, attrs, grad_op):
    _, _, emitted = apply_rule(op, [_x(np.float64)], attrs)
    assert emitted == [grad_op]
    check_gradient(op, [_x(np.float64, seed=1)], attrs)


@pytest.mark.parametrize("op,attrs,grad_op", CASES, ids=IDS)
def test_gradient_matches_torch(op, attrs, grad_op):
    pytest.importorskip("torch")
    x = _x(np.float64, seed=2)
    grads, dys, _ = apply_rule(op, [x], attrs)
    expected = torch_gradients(_torch_fn(op, attrs), [x], dys, [0])[0]
    assert rel_error(grads[0], expected) < 1e-12


@pytest.mark.parametrize("op,attrs,grad_op", CASES, ids=IDS)
def test_gradient_op_in_float32_matches_torch(op, attrs, grad_op):
    torch = pytest.importorskip("torch")
    x = _x(np.float32, seed=3)
    dy = _x(np.float32, seed=4)
    tx = torch.tensor(x, requires_grad=True)
    y = _torch_fn(op, attrs)(tx)
    (y * torch.tensor(dy)).sum().backward()
    second = x if grad_op == "LeakyReluGrad" else y.detach().numpy()
    ours = reference(grad_op, [dy, second], attrs)[0]
    assert ours.dtype == np.float32
    assert rel_error(ours, tx.grad.numpy()) < 1e-5


def test_sigmoid_and_softmax_do_not_overflow():
    torch = pytest.importorskip("torch")
    x = np.array([[-1000.0, -30.0, 0.0, 30.0, 1000.0]], dtype=np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        s = reference("Sigmoid", [x])[0]
        p = reference("Softmax", [x])[0]
    assert np.allclose(s, torch.sigmoid(torch.tensor(x)).numpy(), rtol=1e-6, atol=0)
    assert np.allclose(p, torch.softmax(torch.tensor(x), dim=-1).numpy(), rtol=1e-6, atol=0)


def test_errors():
    with pytest.raises(OpError, match="Relu: input must be a float tensor, got int64"):
        get_op("Relu").infer([TensorType((2,), "int64")], {})
    with pytest.raises(OpError, match="Softmax: axis 2 out of range for rank 2"):
        get_op("Softmax").infer([TensorType((2, 3))], {"axis": 2})
    with pytest.raises(OpError, match=r"TanhGrad: dy is float32 \[2, 3\] but y is float32 "
                                      r"\[3, 2\]"):
        get_op("TanhGrad").infer([TensorType((2, 3)), TensorType((3, 2))], {})
    with pytest.raises(OpError, match="LeakyReluGrad: dy is float32.*but x is float64"):
        get_op("LeakyReluGrad").infer([TensorType((2,)), TensorType((2,), "float64")],
                                      {"alpha": 0.01})


def test_flops_scale_with_elements():
    t = TensorType((3, 5))
    for op, _, grad_op in CASES:
        per = get_op(op).flops([t], [t], {}) / t.size
        assert per >= 1 and per == int(per)
        assert get_op(grad_op).flops([t, t], [t], {}) % t.size == 0
