"""MatMul, BiasAdd, BiasAddGrad: shape rules and errors, references vs torch, gradient rules vs
finite differences and torch autograd."""

import numpy as np
import pytest

from planner.ops import OpError, TensorType, get_op
from tests.ops.opcheck import apply_rule, check_gradient, reference, rel_error, torch_gradients

# (shape of op(a), shape of op(b)) before transposition: plain, batched, batch x matrix,
# matrix x batch, broadcast batch axes.
PRODUCTS = [((3, 4), (4, 5)), ((2, 3, 4), (2, 4, 5)), ((2, 3, 4), (4, 5)), ((3, 4), (2, 4, 5)),
            ((2, 1, 3, 4), (3, 4, 2))]
FLAGS = [(False, False), (True, False), (False, True), (True, True)]


def _operands(sa, sb, ta, tb, dtype, seed=0):
    """Random a, b whose op(a), op(b) have shapes sa, sb."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(sa).astype(dtype)
    b = rng.standard_normal(sb).astype(dtype)
    a = np.ascontiguousarray(np.swapaxes(a, -1, -2)) if ta else a
    b = np.ascontiguousarray(np.swapaxes(b, -1, -2)) if tb else b
    return a, b


def _torch_matmul(ta, tb):
    import torch

    def fn(a, b):
        return torch.matmul(a.transpose(-1, -2) if ta else a, b.transpose(-1, -2) if tb else b)
    return fn


def _attrs(ta, tb):
    return {"transpose_a": ta, "transpose_b": tb}


# ---- MatMul -----------------------------------------------------------------------------------

@pytest.mark.parametrize("sa,sb", PRODUCTS)
@pytest.mark.parametrize("ta,tb", FLAGS)
def test_matmul_shape_and_flops(sa, sb, ta, tb):
    a, b = _operands(sa, sb, ta, tb, np.float32)
    ins = [TensorType(a.shape), TensorType(b.shape)]
    out = get_op("MatMul").infer(ins, _attrs(ta, tb))[0]
    expected = np.matmul(np.zeros(sa), np.zeros(sb)).shape
    assert out.shape == expected
    k = sa[-1]
    assert get_op("MatMul").flops(ins, [out], _attrs(ta, tb)) == 2 * int(np.prod(expected)) * k


def test_matmul_errors():
    mm = get_op("MatMul")
    with pytest.raises(OpError, match=r"inner dimensions differ: a \[3, 4\].*K=4.*b \[5, 6\]"
                                      r".*K=5"):
        mm.infer([TensorType((3, 4)), TensorType((5, 6))], _attrs(False, False))
    with pytest.raises(OpError, match="inner dimensions differ"):
        mm.infer([TensorType((3, 4)), TensorType((6, 4))], _attrs(True, True))
    with pytest.raises(OpError, match=r"input b must have rank >= 2, got shape \[4\]"):
        mm.infer([TensorType((3, 4)), TensorType((4,))], _attrs(False, False))
    with pytest.raises(OpError, match=r"MatMul: shapes \[2\] and \[3\] do not broadcast"):
        mm.infer([TensorType((2, 3, 4)), TensorType((3, 4, 5))], _attrs(False, False))
    with pytest.raises(OpError, match="input a must be a float tensor"):
        mm.infer([TensorType((3, 4), "int64"), TensorType((4, 5), "int64")], _attrs(False, False))


@pytest.mark.parametrize("sa,sb", PRODUCTS)
@pytest.mark.parametrize("ta,tb", FLAGS)
def test_matmul_reference_matches_torch(sa, sb, ta, tb):
    torch = pytest.importorskip("torch")
    a, b = _operands(sa, sb, ta, tb, np.float32)
    ours = reference("MatMul", [a, b], _attrs(ta, tb))[0]
    theirs = _torch_matmul(ta, tb)(torch.tensor(a), torch.tensor(b)).numpy()
    assert ours.dtype == np.float32
    assert rel_error(ours, theirs) < 1e-5


@pytest.mark.parametrize("sa,sb", PRODUCTS)
@pytest.mark.parametrize("ta,tb", FLAGS)
def test_matmul_gradient_finite_differences(sa, sb, ta, tb):
    a, b = _operands(sa, sb, ta, tb, np.float64, seed=1)
    check_gradient("MatMul", [a, b], _attrs(ta, tb))


@pytest.mark.parametrize("sa,sb", PRODUCTS[1:])
@pytest.mark.parametrize("ta,tb", FLAGS)
def test_matmul_gradient_matches_torch(sa, sb, ta, tb):
    pytest.importorskip("torch")
    a, b = _operands(sa, sb, ta, tb, np.float64, seed=2)
    grads, dys, _ = apply_rule("MatMul", [a, b], _attrs(ta, tb))
    expected = torch_gradients(_torch_matmul(ta, tb), [a, b], dys, [0, 1])
    for ours, theirs in zip(grads, expected, strict=True):
        assert rel_error(ours, theirs) < 1e-10


@pytest.mark.parametrize("sa,sb", [PRODUCTS[0], PRODUCTS[2], PRODUCTS[4]])
@pytest.mark.parametrize("ta,tb", [(False, False), (True, True)])
def test_biased_matmul_reference_and_gradient(sa, sb, ta, tb):
    """The optional bias is added along y's last axis (numpy's broadcast of a (N,) vector);
    its gradient (BiasAddGrad over the last axis) and a, b's agree with central differences."""
    a, b = _operands(sa, sb, ta, tb, np.float64, seed=3)
    bias = np.random.default_rng(4).standard_normal(sb[-1])
    plain = reference("MatMul", [a, b], _attrs(ta, tb))[0]
    assert np.array_equal(reference("MatMul", [a, b, bias], _attrs(ta, tb))[0], plain + bias)
    grads, _ = check_gradient("MatMul", [a, b, bias], _attrs(ta, tb))
    assert len(grads) == 3


def test_biased_matmul_shape_rule():
    mm = get_op("MatMul")
    ins = [TensorType((2, 3, 4)), TensorType((4, 5)), TensorType((5,))]
    out = mm.infer(ins, _attrs(False, False))[0]
    assert out.shape == (2, 3, 5)
    assert mm.flops(ins, [out], _attrs(False, False)) == 2 * 30 * 4 + 30
    with pytest.raises(OpError, match=r"bias must be float32 of shape \[5\].*got float32 \[3\]"):
        mm.infer([*ins[:2], TensorType((3,))], _attrs(False, False))
    with pytest.raises(OpError, match="bias must be float32.*got float64"):
        mm.infer([*ins[:2], TensorType((5,), "float64")], _attrs(False, False))
    with pytest.raises(OpError, match="MatMul takes 2 or 3 inputs"):
        mm.infer([*ins, TensorType((5,))], _attrs(False, False))
    with pytest.raises(OpError, match="at least 2"):
        mm.check_arity(1)


# ---- a folded Relu (planner/frontend/passes/fold_bias.py, planner/ops/fused_activation.py)
# --------------

@pytest.mark.parametrize("sa,sb", [PRODUCTS[0], PRODUCTS[2], PRODUCTS[4]])
@pytest.mark.parametrize("bias", [False, True])
def test_activated_matmul_is_the_unfused_composition(sa, sb, bias):
    """MatMul with an activation is MatMul, BiasAdd (last axis), Relu, to the bit; a NaN
    product stays NaN."""
    a, b = _operands(sa, sb, False, True, np.float32, seed=5)
    a[..., 0, 0] = np.nan
    c = np.random.default_rng(6).standard_normal(sb[-1]).astype(np.float32)
    attrs = _attrs(False, True)
    (y,) = reference("MatMul", [a, b], attrs)
    if bias:
        (y,) = reference("BiasAdd", [y, c], {"axis": -1})
    (y,) = reference("Relu", [y], {})
    (fused,) = reference("MatMul", [a, b, c] if bias else [a, b], {**attrs, "activation": "relu"})
    assert fused.dtype == np.float32 and np.isnan(fused[..., 0, :]).all()
    assert (fused[~np.isnan(fused)] >= 0).all()
    np.testing.assert_array_equal(fused, y)


def test_activated_matmul_flops_and_checks():
    mm = get_op("MatMul")
    ins = [TensorType((2, 3, 4)), TensorType((4, 5)), TensorType((5,))]
    relu = {**_attrs(False, False), "activation": "relu"}
    (y,) = mm.infer(ins, relu)
    assert mm.flops(ins, [y], relu) == mm.flops(ins, [y], _attrs(False, False)) \
        + get_op("Relu").flops([y], [y], {})
    assert mm.bytes_moved(ins, [y], relu) == mm.bytes_moved(ins, [y], _attrs(False, False))
    with pytest.raises(OpError, match=r"MatMul: activation must be one of \['none', 'relu'\], "
                                      r"got 'gelu'"):
        mm.infer(ins, {**relu, "activation": "gelu"})
    low = [TensorType(t.shape, "bfloat16") for t in ins]
    with pytest.raises(OpError, match="MatMul: an activation needs float32 tensors, y is "
                                      "bfloat16"):
        mm.infer(low, relu)
    assert mm.infer(low, {**relu, "activation": "none"})[0].dtype == "bfloat16"


@pytest.mark.parametrize("tb", [False, True])
def test_shared_weight_gradient_is_one_gemm(tb):
    a, b = _operands((2, 3, 4), (4, 5), False, tb, np.float64)
    _, _, emitted = apply_rule("MatMul", [a, b], _attrs(False, tb), wrt=[1])
    assert emitted == ["Reshape", "Reshape", "MatMul"]


# ---- MatMul over permuted views (perm_a / perm_b / perm_y) -----------------------------------

# (a's shape, perm_a, transpose_a, b's shape, perm_b, transpose_b, perm_y); None: absent.
PERMUTED = [
    # attention scores q k^T over split heads: (batch, seq, heads, width) read as
    # (batch, heads, seq, width)
    ((2, 5, 3, 4), [0, 2, 1, 3], False, (2, 5, 3, 4), [0, 2, 1, 3], True, None),
    # context p v, merged back to (batch, seq, heads, width)
    ((2, 3, 5, 5), None, False, (2, 5, 3, 4), [0, 2, 1, 3], False, [0, 2, 1, 3]),
    # a permuted batch under a rank-2 weight, the result permuted back
    ((3, 2, 4), [1, 0, 2], False, (4, 5), None, False, [1, 0, 2]),
    # broadcast batch axes with a permuted, transposed a
    ((3, 1, 2, 4), [1, 0, 3, 2], True, (5, 3, 4, 6), None, False, [1, 0, 2, 3]),
    # the batch axes and the matrix axes of a mixed, b permuted and transposed
    ((3, 4, 2, 5), [2, 0, 3, 1], True, (2, 6, 3, 5), [0, 2, 1, 3], True, [2, 0, 1, 3]),
]


def _perm_attrs(pa, ta, pb, tb, py):
    attrs = _attrs(ta, tb)
    attrs.update({k: v for k, v in (("perm_a", pa), ("perm_b", pb), ("perm_y", py))
                  if v is not None})
    return attrs


def _torch_permuted(pa, ta, pb, tb, py):
    def view(x, perm, t):
        x = x if perm is None else x.permute(*perm)
        return x.transpose(-1, -2) if t else x

    def fn(a, b):
        y = view(a, pa, ta) @ view(b, pb, tb)
        return y if py is None else y.permute(*py)
    return fn


def _permuted_operands(sa, sb, dtype, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal(sa).astype(dtype), rng.standard_normal(sb).astype(dtype)


@pytest.mark.parametrize("sa,pa,ta,sb,pb,tb,py", PERMUTED)
def test_permuted_matmul_reference_shape_and_flops_match_torch(sa, pa, ta, sb, pb, tb, py):
    torch = pytest.importorskip("torch")
    a, b = _permuted_operands(sa, sb, np.float32)
    attrs = _perm_attrs(pa, ta, pb, tb, py)
    theirs = _torch_permuted(pa, ta, pb, tb, py)(torch.tensor(a), torch.tensor(b)).numpy()
    ours = reference("MatMul", [a, b], attrs)[0]
    assert ours.shape == theirs.shape and ours.flags.c_contiguous
    assert rel_error(ours, theirs) < 1e-5
    ins = [TensorType(sa), TensorType(sb)]
    out = get_op("MatMul").infer(ins, get_op("MatMul").normalize_attrs(attrs))[0]
    assert out.shape == theirs.shape
    k = np.transpose(a, pa).shape[-2 if ta else -1] if pa else sa[-2 if ta else -1]
    assert get_op("MatMul").flops(ins, [out], attrs) == 2 * out.size * k


@pytest.mark.parametrize("sa,pa,ta,sb,pb,tb,py", PERMUTED)
def test_permuted_matmul_gradient_is_matmuls_matching_fd_and_torch(sa, pa, ta, sb, pb, tb, py):
    a, b = _permuted_operands(sa, sb, np.float64, seed=3)
    attrs = _perm_attrs(pa, ta, pb, tb, py)
    grads, dys = check_gradient("MatMul", [a, b], attrs)
    _, _, emitted = apply_rule("MatMul", [a, b], attrs)
    # no Transpose: the permutations are folded into the gradient GEMMs
    assert set(emitted) <= {"MatMul", "ReduceSum", "Reshape"} and "MatMul" in emitted
    pytest.importorskip("torch")
    expected = torch_gradients(_torch_permuted(pa, ta, pb, tb, py), [a, b], dys, [0, 1])
    for ours, theirs in zip(grads, expected, strict=True):
        assert rel_error(ours, theirs) < 1e-10


def test_permutations_are_optional_attrs_left_out_when_absent():
    """Graphs and plans made before the attrs existed stay byte-identical."""
    assert get_op("MatMul").normalize_attrs({}) == _attrs(False, False)


def test_permuted_matmul_errors():
    mm = get_op("MatMul")
    x = TensorType((2, 5, 3, 4))
    with pytest.raises(OpError, match=r"perm_a \[0, 2, 1, 1\] is not a permutation of 0..3"):
        mm.infer([x, x], {**_attrs(False, True), "perm_a": [0, 2, 1, 1]})
    with pytest.raises(OpError, match=r"perm_b \[0, 3, 1, 2\] leaves the operand's last axis "
                                      r"out of the matrix axes: one of its last two entries "
                                      r"must be 3"):
        mm.infer([x, x], {**_attrs(False, True), "perm_b": [0, 3, 1, 2]})
    with pytest.raises(OpError, match=r"perm_y \[0, 1, 3, 2\] moves the last axis"):
        mm.infer([x, x], {**_attrs(False, True), "perm_y": [0, 1, 3, 2]})
    with pytest.raises(OpError, match=r"inner dimensions differ.*perm_a \[0, 2, 1, 3\]"):
        mm.infer([x, x], {**_attrs(False, False), "perm_a": [0, 2, 1, 3]})


# ---- BiasAdd / BiasAddGrad --------------------------------------------------------------------

BIAS_CASES = [((4, 3), 1), ((2, 3, 4, 5), 1), ((2, 3, 4), -1), ((2, 3, 4), 2)]


def _bias_inputs(shape, axis, dtype, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(dtype)
    return x, rng.standard_normal(shape[axis]).astype(dtype)


def _torch_bias_add(axis):
    def fn(x, b):
        view = [1] * x.dim()
        view[axis] = -1
        return x + b.reshape(view)
    return fn


@pytest.mark.parametrize("shape,axis", BIAS_CASES)
def test_bias_add_reference_matches_torch(shape, axis):
    torch = pytest.importorskip("torch")
    x, b = _bias_inputs(shape, axis, np.float32)
    ours = reference("BiasAdd", [x, b], {"axis": axis})[0]
    assert rel_error(ours, _torch_bias_add(axis)(torch.tensor(x), torch.tensor(b)).numpy()) < 1e-5
    db = reference("BiasAddGrad", [x], {"axis": axis})[0]
    dims = [d for d in range(len(shape)) if d != axis % len(shape)]
    assert db.dtype == np.float32
    assert rel_error(db, torch.tensor(x).sum(dim=dims).numpy()) < 1e-5


def test_bias_add_errors():
    with pytest.raises(OpError, match=r"bias has 4 elements but axis 1 of input \[2, 3, 5, 5\] "
                                      r"has 3"):
        get_op("BiasAdd").infer([TensorType((2, 3, 5, 5)), TensorType((4,))], {"axis": 1})
    with pytest.raises(OpError, match=r"bias must have rank 1, got shape \[1, 3\]"):
        get_op("BiasAdd").infer([TensorType((2, 3)), TensorType((1, 3))], {"axis": 1})
    with pytest.raises(OpError, match="axis 4 out of range for rank 2"):
        get_op("BiasAddGrad").infer([TensorType((2, 3))], {"axis": 4})


@pytest.mark.parametrize("shape,axis", BIAS_CASES)
def test_bias_add_gradient(shape, axis):
    x, b = _bias_inputs(shape, axis, np.float64, seed=1)
    grads, dys = check_gradient("BiasAdd", [x, b], {"axis": axis})
    pytest.importorskip("torch")
    expected = torch_gradients(_torch_bias_add(axis), [x, b], dys, [0, 1])
    for ours, theirs in zip(grads, expected, strict=True):
        assert rel_error(ours, theirs) < 1e-12
