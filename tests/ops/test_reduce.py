"""ReduceSum / ReduceMean: shape rule and errors, references vs torch, gradient rules vs finite
differences and torch autograd."""

import numpy as np
import pytest

from planner.ops import OpError, TensorType, get_op
from tests.ops.opcheck import apply_rule, check_gradient, reference, rel_error, torch_gradients

OPS = ["ReduceSum", "ReduceMean"]
# (axes, keepdims) on a (2, 3, 4) input: leading, middle, last, negative, several, all.
CASES = [([0], False), ([1], False), ([1], True), ([-1], False), ([0, 2], True), ([2, 0], False),
         ([], False), ([], True), ([0, 1], False)]


def _torch_reduce(op, axes, keepdims, rank):
    import torch
    dims = list(range(rank)) if not axes else axes
    fn = torch.sum if op == "ReduceSum" else torch.mean
    return lambda x: fn(x, dim=dims, keepdim=keepdims)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("axes,keepdims", CASES)
def test_infer_matches_numpy(op, axes, keepdims):
    x = np.zeros((2, 3, 4))
    expected = np.sum(x, axis=tuple(axes) if axes else None, keepdims=keepdims).shape
    out = get_op(op).infer([TensorType(x.shape)], {"axes": axes, "keepdims": keepdims})[0]
    assert out == TensorType(expected, "float32")


def test_axis_errors():
    attrs = {"keepdims": False}
    with pytest.raises(OpError, match="ReduceSum: axis 3 out of range for rank 3"):
        get_op("ReduceSum").infer([TensorType((2, 3, 4))], {**attrs, "axes": [3]})
    with pytest.raises(OpError, match=r"ReduceMean: axis -3 given twice in axes \[0, -3\]"):
        get_op("ReduceMean").infer([TensorType((2, 3, 4))], {**attrs, "axes": [0, -3]})
    with pytest.raises(OpError, match="ReduceMean: input must be a float tensor, got int64"):
        get_op("ReduceMean").infer([TensorType((2,), "int64")], {**attrs, "axes": []})


def test_integer_sum_keeps_dtype():
    x = np.arange(6, dtype=np.int32).reshape(2, 3)
    out = reference("ReduceSum", [x], {"axes": [1]})[0]
    assert out.dtype == np.int32 and out.tolist() == [3, 12]


def test_flops():
    x = TensorType((2, 3, 4))
    out = TensorType((2, 4))
    attrs = {"axes": [1], "keepdims": False}
    assert get_op("ReduceSum").flops([x], [out], attrs) == x.size
    assert get_op("ReduceMean").flops([x], [out], attrs) == x.size + out.size


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("axes,keepdims", CASES)
def test_reference_matches_torch(op, axes, keepdims):
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    ours = reference(op, [x], {"axes": axes, "keepdims": keepdims})[0]
    theirs = _torch_reduce(op, axes, keepdims, 3)(torch.tensor(x)).numpy()
    assert ours.dtype == np.float32
    assert rel_error(ours, theirs) < 1e-5


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("axes,keepdims", CASES)
def test_gradient_finite_differences(op, axes, keepdims):
    x = np.random.default_rng(1).standard_normal((2, 3, 4))
    check_gradient(op, [x], {"axes": axes, "keepdims": keepdims})


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("axes,keepdims", [([1], False), ([0, 2], True), ([], False)])
def test_gradient_matches_torch(op, axes, keepdims):
    pytest.importorskip("torch")
    x = np.random.default_rng(2).standard_normal((2, 3, 4))
    grads, dys, _ = apply_rule(op, [x], {"axes": axes, "keepdims": keepdims})
    expected = torch_gradients(_torch_reduce(op, axes, keepdims, 3), [x], dys, [0])[0]
    assert rel_error(grads[0], expected) < 1e-12


@pytest.mark.parametrize("axes,keepdims,ops", [
    ([0], False, ["Expand"]),               # dropped leading axes broadcast back on their own
    ([1], False, ["Reshape", "Expand"]),    # a dropped middle axis must be re-inserted first
    ([1], True, ["Expand"]),
])
def test_sum_gradient_reinserts_axes_only_when_needed(axes, keepdims, ops):
    x = np.random.default_rng(3).standard_normal((2, 3, 4))
    _, _, emitted = apply_rule("ReduceSum", [x], {"axes": axes, "keepdims": keepdims})
    assert emitted == ops
