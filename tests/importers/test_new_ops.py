"""The ops added for the ONNX importer (planner/ops/unary_math.py, binary_math.py,
log_softmax.py, pad.py): references against torch, gradient rules against finite differences,
dtypes kept, shape errors named."""

from __future__ import annotations

import numpy as np
import pytest

from planner.ops import OpError, TensorType, get_op
from tests.ops.opcheck import apply_rule, check_gradient, reference, rel_error


def _x(*shape, seed=0, dtype=np.float64, positive=False):
    x = np.random.default_rng(seed).standard_normal(shape)
    return (np.abs(x) + 0.5 if positive else x).astype(dtype)


def _torch_unary(op, attrs):
    import torch
    f = torch.nn.functional
    return {
        "Exp": torch.exp, "Log": torch.log, "Sqrt": torch.sqrt, "Abs": torch.abs,
        "Sign": torch.sign, "Softplus": f.softplus,
        "Elu": lambda x: f.elu(x, attrs.get("alpha", 1.0)),
        "Selu": torch.selu,
        "Clip": lambda x: torch.clamp(x, attrs.get("min"), attrs.get("max")),
        "LogSoftmax": lambda x: torch.log_softmax(x, attrs.get("axis", -1)),
    }[op]


# (op, attrs, needs positive inputs, the ops its gradient rule emits)
UNARY = [
    ("Exp", {}, False, ["Mul"]),
    ("Log", {}, True, ["Div"]),
    ("Sqrt", {}, True, ["Div", "Scale"]),
    ("Abs", {}, False, ["Sign", "Mul"]),
    ("Softplus", {}, False, ["Sigmoid", "Mul"]),
    ("Elu", {"alpha": 0.7}, False, ["EluGrad"]),
    ("Selu", {}, False, ["SeluGrad"]),
    ("Clip", {"min": -0.5, "max": 0.8}, False, ["ClipGrad"]),
    ("Clip", {"min": -0.3}, False, ["ClipGrad"]),
    ("Clip", {"max": 0.1}, False, ["ClipGrad"]),
    ("LogSoftmax", {"axis": 1}, False, ["ReduceSum", "Exp", "Mul", "Sub"]),
    ("LogSoftmax", {}, False, ["ReduceSum", "Exp", "Mul", "Sub"]),
]
IDS = [f"{op}-{attrs}" for op, attrs, _, _ in UNARY]


@pytest.mark.parametrize("op,attrs,positive,emitted", UNARY, ids=IDS)
def test_unary_reference_matches_torch(op, attrs, positive, emitted):
    torch = pytest.importorskip("torch")
    x = _x(3, 4, 2, dtype=np.float32, positive=positive)
    ours = reference(op, [x], attrs)[0]
    assert ours.dtype == np.float32 and ours.shape == x.shape
    assert rel_error(ours, _torch_unary(op, attrs)(torch.tensor(x)).numpy()) < 1e-6


@pytest.mark.parametrize("op,attrs,positive,emitted", UNARY, ids=IDS)
def test_unary_gradient(op, attrs, positive, emitted):
    x = _x(3, 4, 2, seed=1, positive=positive)
    _, _, ops = apply_rule(op, [x], attrs)
    assert ops == emitted
    check_gradient(op, [x], attrs)


def test_sign_has_no_gradient_and_keeps_integers():
    assert reference("Sign", [np.array([-3, 0, 2])])[0].tolist() == [-1, 0, 1]
    assert reference("Abs", [np.array([-3, 2])])[0].dtype == np.int64
    grads, _, _ = apply_rule("Sign", [_x(3)], wrt=[0])
    assert grads == [None]


def test_float64_stays_float64():
    x = _x(2, 3, positive=True)
    for op in ("Exp", "Log", "Sqrt", "Softplus", "Elu", "Selu", "LogSoftmax"):
        assert reference(op, [x])[0].dtype == np.float64, op


def test_clip_and_unary_errors():
    clip = get_op("Clip")
    with pytest.raises(OpError, match="min 1.0 is greater than max 0.0"):
        clip.infer([TensorType((2,))], clip.normalize_attrs({"min": 1.0, "max": 0.0}))
    with pytest.raises(OpError, match="Exp: input must be a float tensor"):
        get_op("Exp").infer([TensorType((2,), "int64")], {})
    assert get_op("Softplus").flops([TensorType((5,))], [TensorType((5,))], {}) == 20


# ---- binary ops and PRelu ---------------------------------------------------------------------

@pytest.mark.parametrize("op,fn", [("Pow", "pow"), ("Max", "maximum"), ("Min", "minimum")])
def test_binary_references_broadcast_like_torch(op, fn):
    torch = pytest.importorskip("torch")
    a, b = _x(2, 1, 3, dtype=np.float32, positive=True), _x(4, 1, seed=1, dtype=np.float32)
    ours = reference(op, [a, b])[0]
    assert ours.shape == (2, 4, 3) and ours.dtype == np.float32
    assert rel_error(ours, getattr(torch, fn)(torch.tensor(a), torch.tensor(b)).numpy()) < 1e-6
    assert get_op(op).infer([TensorType((2, 1, 3)), TensorType((4, 1))], {})[0].shape == (2, 4, 3)


def test_binary_errors_name_the_shapes():
    with pytest.raises(OpError, match=r"Max: shapes \[2, 3\] and \[4\] do not broadcast"):
        get_op("Max").infer([TensorType((2, 3)), TensorType((4,))], {})
    with pytest.raises(OpError, match="Pow: input must be a float tensor"):
        get_op("Pow").infer([TensorType((2,), "int64"), TensorType((2,), "int64")], {})
    with pytest.raises(OpError, match="dtypes differ"):
        get_op("Min").infer([TensorType((2,)), TensorType((2,), "float64")], {})


@pytest.mark.parametrize("slope_shape", [(1,), (3, 1, 1), (4, 5), (2, 3, 4, 5)])
def test_prelu_reference_and_gradient(slope_shape):
    torch = pytest.importorskip("torch")
    x, slope = _x(2, 3, 4, 5), _x(*slope_shape, seed=1)
    expected = torch.where(torch.tensor(x) < 0, torch.tensor(slope) * torch.tensor(x),
                           torch.tensor(x)).numpy()
    assert rel_error(reference("PRelu", [x, slope])[0], expected) < 1e-12
    grads, _ = check_gradient("PRelu", [x, slope])
    assert grads[1].shape == slope_shape


def test_prelu_slope_must_broadcast_to_x():
    with pytest.raises(OpError, match=r"slope shape \[3\] does not broadcast to x's shape"):
        get_op("PRelu").infer([TensorType((2, 3, 4)), TensorType((3,))], {})
    with pytest.raises(OpError, match="broadcast"):
        get_op("PRelu").infer([TensorType((2, 3)), TensorType((2, 2, 3))], {})


# ---- Pad --------------------------------------------------------------------------------------

# torch pads any dims with a constant, only the last two of a 4-D tensor otherwise.
SPATIAL, ANY = [0, 0, 1, 2, 0, 0, 2, 1], [0, 1, 0, 3, 1, 0, 2, 0]


@pytest.mark.parametrize("mode,torch_mode,pads", [
    ("constant", "constant", SPATIAL), ("constant", "constant", ANY),
    ("reflect", "reflect", SPATIAL), ("edge", "replicate", SPATIAL),
])
def test_pad_matches_torch(mode, torch_mode, pads):
    torch = pytest.importorskip("torch")
    x = _x(2, 3, 4, 5, dtype=np.float32)
    ours = reference("Pad", [x], {"pads": pads, "mode": mode, "value": 0.5})[0]
    # torch lists (before, after) per dim from the last one backwards.
    torch_pads = [v for axis in reversed(range(4)) for v in (pads[axis], pads[4 + axis])]
    if torch_mode == "constant":
        expected = torch.nn.functional.pad(torch.tensor(x), torch_pads, value=0.5)
    else:
        expected = torch.nn.functional.pad(torch.tensor(x), torch_pads[:4], mode=torch_mode)
    assert ours.dtype == np.float32
    np.testing.assert_array_equal(ours, expected.numpy())


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
def test_pad_gradient(mode):
    x = _x(2, 4, 3, seed=2)
    attrs = {"pads": [1, 2, 0, 0, 3, 2], "mode": mode, "value": 1.0}
    _, _, ops = apply_rule("Pad", [x], attrs)
    assert ops == ["PadGrad"]
    check_gradient("Pad", [x], attrs)


def test_pad_errors_name_the_field():
    pad = get_op("Pad")
    with pytest.raises(OpError, match=r"pads \[1, 1\] must hold 2 \* rank = 4"):
        pad.infer([TensorType((2, 3))], pad.normalize_attrs({"pads": [1, 1]}))
    with pytest.raises(OpError, match="reflect padding of 3 on axis 1 needs a dimension larger"):
        pad.infer([TensorType((2, 3))], pad.normalize_attrs({"pads": [0, 3, 0, 0],
                                                            "mode": "reflect"}))
    with pytest.raises(OpError, match="mode 'wrap' is not one of"):
        pad.infer([TensorType((2, 3))], pad.normalize_attrs({"pads": [0] * 4, "mode": "wrap"}))
    with pytest.raises(OpError, match="must be >= 0"):
        pad.infer([TensorType((2, 3))], pad.normalize_attrs({"pads": [0, -1, 0, 0]}))
    grad = get_op("PadGrad")
    with pytest.raises(OpError, match="PadGrad: dy has shape"):
        grad.infer([TensorType((4, 4))], grad.normalize_attrs({"pads": [1, 1, 1, 1],
                                                               "input_shape": [3, 2]}))
