"""Losses: references vs torch, gradient rules (and the *Grad ops) vs finite differences and
torch autograd, numerical stability, and the label / shape errors."""

import warnings

import numpy as np
import pytest

from planner.graph import GraphBuilder, GraphBuildError
from planner.ops import OpError, TensorType, get_op
from tests.ops.opcheck import apply_rule, check_gradient, reference, rel_error, torch_gradients


def _sce_inputs(dtype, n=4, c=5, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, c)).astype(dtype), rng.integers(0, c, n).astype(np.int64)


def _pair_inputs(op, dtype, shape=(3, 4), seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(dtype)
    t = rng.uniform(0, 1, shape) if op == "SigmoidBCE" else rng.standard_normal(shape)
    return x, t.astype(dtype)


def _torch_loss(op):
    import torch
    f = torch.nn.functional
    return {"SoftmaxCrossEntropy": f.cross_entropy,
            "SigmoidBCE": f.binary_cross_entropy_with_logits,
            "MSE": f.mse_loss}[op]


def _inputs(op, dtype, seed=0):
    return _sce_inputs(dtype, seed=seed) if op == "SoftmaxCrossEntropy" else _pair_inputs(
        op, dtype, seed=seed)


LOSSES = ["SoftmaxCrossEntropy", "SigmoidBCE", "MSE"]


@pytest.mark.parametrize("op", LOSSES)
def test_reference_matches_torch(op):
    torch = pytest.importorskip("torch")
    xs = _inputs(op, np.float32)
    ours = reference(op, xs)[0]
    assert ours.shape == () and ours.dtype == np.float32
    theirs = _torch_loss(op)(*(torch.tensor(x) for x in xs)).numpy()
    assert rel_error(ours, theirs) < 1e-5


@pytest.mark.parametrize("op", LOSSES)
def test_gradient_finite_differences(op):
    xs = _inputs(op, np.float64, seed=1)
    grads, _ = check_gradient(op, xs)
    if op == "SoftmaxCrossEntropy":
        assert grads[1] is None  # labels are integers


@pytest.mark.parametrize("op", LOSSES)
def test_gradient_matches_torch(op):
    pytest.importorskip("torch")
    xs = _inputs(op, np.float64, seed=2)
    grads, dys, _ = apply_rule(op, xs)
    wrt = [0] if op == "SoftmaxCrossEntropy" else [0, 1]
    expected = torch_gradients(_torch_loss(op), xs, dys, wrt)
    for k, theirs in zip(wrt, expected, strict=True):
        assert rel_error(grads[k], theirs) < 1e-12


@pytest.mark.parametrize("op,grad_op", [("SoftmaxCrossEntropy", "SoftmaxCrossEntropyGrad"),
                                        ("SigmoidBCE", "SigmoidBCEGrad"), ("MSE", "MSEGrad")])
def test_gradient_op_in_float32_matches_torch(op, grad_op):
    torch = pytest.importorskip("torch")
    xs = _inputs(op, np.float32, seed=3)
    dloss = np.asarray(0.7, dtype=np.float32)
    tx = torch.tensor(xs[0], requires_grad=True)
    (_torch_loss(op)(tx, torch.tensor(xs[1])) * 0.7).backward()
    ours = reference(grad_op, [dloss, *xs])[0]
    assert ours.dtype == np.float32
    assert rel_error(ours, tx.grad.numpy()) < 1e-5


def test_rule_builds_only_what_is_needed():
    z, t = _pair_inputs("SigmoidBCE", np.float64)
    assert apply_rule("SigmoidBCE", [z, t], wrt=[0])[2] == ["SigmoidBCEGrad"]
    grads, _, emitted = apply_rule("MSE", [z, t], wrt=[0])
    assert emitted == ["MSEGrad"] and grads[1] is None
    logits, labels = _sce_inputs(np.float64)
    assert apply_rule("SoftmaxCrossEntropy", [logits, labels])[2] == ["SoftmaxCrossEntropyGrad"]


def test_bce_is_stable_for_large_logits():
    torch = pytest.importorskip("torch")
    z = np.array([-1000.0, -50.0, 0.0, 50.0, 1000.0], dtype=np.float32)
    t = np.array([1.0, 0.0, 0.5, 1.0, 0.0], dtype=np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loss = reference("SigmoidBCE", [z, t])[0]
        grad = reference("SigmoidBCEGrad", [np.asarray(1, dtype=np.float32), z, t])[0]
    tz = torch.tensor(z, requires_grad=True)
    expected = _torch_loss("SigmoidBCE")(tz, torch.tensor(t))
    expected.backward()
    assert rel_error(loss, expected.detach().numpy()) < 1e-6
    assert rel_error(grad, tz.grad.numpy()) < 1e-6


def test_cross_entropy_is_stable_for_large_logits():
    torch = pytest.importorskip("torch")
    logits = np.array([[1000.0, 0.0, -1000.0], [0.0, 500.0, 499.0]], dtype=np.float32)
    labels = np.array([2, 1], dtype=np.int64)
    ours = reference("SoftmaxCrossEntropy", [logits, labels])[0]
    theirs = _torch_loss("SoftmaxCrossEntropy")(torch.tensor(logits), torch.tensor(labels))
    assert np.isfinite(ours) and rel_error(ours, theirs.numpy()) < 1e-6


def test_label_errors():
    sce = get_op("SoftmaxCrossEntropy")
    with pytest.raises(OpError, match="SoftmaxCrossEntropy: labels must be int64 class ids, "
                                      "got float32"):
        sce.infer([TensorType((4, 5)), TensorType((4,), "float32")], sce.normalize_attrs({}))
    with pytest.raises(OpError, match=r"labels must have shape \[4\] to match logits \[4, 5\] "
                                      r"with classes on axis 1, got \[3\]"):
        sce.infer([TensorType((4, 5)), TensorType((3,), "int64")], sce.normalize_attrs({}))
    with pytest.raises(OpError, match=r"logits must have shape \(N, C\) or \(N, C, d1, ...\), "
                                      r"got \[4\]"):
        sce.infer([TensorType((4,)), TensorType((4,), "int64")], sce.normalize_attrs({}))
    with pytest.raises(OpError, match=r"label 5 out of range \[0, 5\)"):
        reference("SoftmaxCrossEntropy", [np.zeros((2, 5)), np.array([0, 5])])
    b = GraphBuilder()
    logits, labels = b.input("logits", (4, 5)), b.input("labels", (4,), "int32", role="label")
    with pytest.raises(GraphBuildError, match="node 'loss'.*labels must be int64.*int32"):
        b.op("SoftmaxCrossEntropy", [logits, labels], name="loss")


def test_pair_and_dloss_errors():
    with pytest.raises(OpError, match=r"MSE: target is float32 \[3, 2\] but pred is float32 "
                                      r"\[2, 3\]"):
        get_op("MSE").infer([TensorType((2, 3)), TensorType((3, 2))], {})
    with pytest.raises(OpError, match="SigmoidBCE: logits must be a float tensor, got int64"):
        get_op("SigmoidBCE").infer([TensorType((2,), "int64")] * 2, {})
    with pytest.raises(OpError, match=r"MSEGrad: dloss must be a float32 scalar \(shape \[\]\), "
                                      r"got float32 \[1\]"):
        get_op("MSEGrad").infer([TensorType((1,)), TensorType((2,)), TensorType((2,))], {})
    with pytest.raises(OpError, match="SoftmaxCrossEntropyGrad: dloss must be a float32 scalar"):
        get_op("SoftmaxCrossEntropyGrad").infer(
            [TensorType((), "float64"), TensorType((4, 5)), TensorType((4,), "int64")],
            get_op("SoftmaxCrossEntropyGrad").normalize_attrs({}))


def test_flops_scale_with_elements():
    logits, labels = TensorType((8, 10)), TensorType((8,), "int64")
    scalar = TensorType(())
    assert get_op("SoftmaxCrossEntropy").flops([logits, labels], [scalar], {}) == 5 * 80
    assert get_op("SoftmaxCrossEntropyGrad").flops([scalar, logits, labels], [logits], {}) == 480
    assert get_op("MSE").flops([logits, logits], [scalar], {}) == 3 * 80
