"""ScaledSoftmax (planner/ops/scaled_softmax.py): its reference is the composition Scale ->
CausalMask -> Softmax bit for bit, NaN rows included, agrees with PyTorch's attention softmax,
and its gradient rule with finite differences and torch autograd."""

import numpy as np
import pytest

from planner.ops import OpError, TensorType, get_op
from tests.ops.opcheck import apply_rule, check_gradient, reference, rel_error

INF = np.inf


def _composition(x, scale, causal):
    s = reference("Scale", [x], {"factor": scale})[0]
    if causal:
        s = reference("CausalMask", [s])[0]
    return reference("Softmax", [s], {"axis": -1})[0]


def _poisoned_rows():
    """(2, 4, 4) scores: clean rows and rows with NaN, +inf, -inf in the unmasked and in the
    masked part (row i of a causal matrix reads columns 0..i)."""
    x = np.random.default_rng(3).standard_normal((2, 4, 4)).astype(np.float32)
    x[0, 1, 0] = np.nan          # unmasked NaN: the row is NaN
    x[0, 2, 3] = np.nan          # masked NaN: causal ignores it
    x[0, 3, :] = -INF            # all -inf: NaN
    x[1, 0, 0] = -INF            # the only unmasked score -inf: NaN when causal
    x[1, 1, 1] = INF             # +inf: NaN
    x[1, 2, 0] = -INF            # one -inf among finite scores: probability 0
    return x


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("scale", [0.125, -1.5])
def test_reference_is_the_composition_bit_for_bit(scale, causal):
    x = _poisoned_rows()
    with np.errstate(all="ignore"):
        got = reference("ScaledSoftmax", [x], {"scale": scale, "causal": causal})[0]
        want = _composition(x, scale, causal)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, want)  # NaN where NaN
    if causal and scale > 0:
        assert np.isnan(got[0, 1]).all() and np.isnan(got[0, 3]).all()
        assert np.isnan(got[1, 0]).all() and np.isnan(got[1, 1]).all()
        assert not np.isnan(got[0, 2]).any() and got[1, 2, 0] == 0
        assert (got[~np.isnan(got[..., :1]).repeat(4, -1)].reshape(-1, 4) >= 0).all()


def test_reference_matches_torch_attention_softmax():
    torch = pytest.importorskip("torch")
    x = _poisoned_rows()
    future = torch.ones(4, 4, dtype=torch.bool).triu(1)
    theirs = (torch.tensor(x) * 0.125).masked_fill(future, -INF).softmax(-1).numpy()
    with np.errstate(all="ignore"):
        ours = reference("ScaledSoftmax", [x], {"scale": 0.125, "causal": True})[0]
    assert (np.isnan(ours) == np.isnan(theirs)).all()
    ok = ~np.isnan(ours)
    assert np.abs(ours[ok] - theirs[ok]).max() < 4e-7  # a few float32 roundings of values <= 1


@pytest.mark.parametrize("causal", [True, False])
def test_gradient_reference_is_the_composition(causal):
    rng = np.random.default_rng(4)
    dy, y = rng.standard_normal((2, 3, 3)), rng.uniform(0, 1, (2, 3, 3))
    dy[0, 0, 2] = np.nan  # masked when causal, but in the row's sum: the row is NaN anyway
    g = reference("SoftmaxGrad", [dy, y], {"axis": -1})[0]
    if causal:
        g = reference("CausalMask", [g], {"value": 0.0})[0]
    want = reference("Scale", [g], {"factor": 0.3})[0]
    got = reference("ScaledSoftmaxGrad", [dy, y], {"scale": 0.3, "causal": causal})[0]
    np.testing.assert_array_equal(got, want)
    assert np.isnan(got[0, 0, 0]) and (got[0, 0, 1:] == 0).all() == causal


@pytest.mark.parametrize("attrs", [{"scale": 0.7, "causal": True}, {"scale": -2.0},
                                   {"causal": True}])
def test_gradient_matches_finite_differences_and_torch(attrs):
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(5).standard_normal((2, 3, 4))
    grads, dys, emitted = apply_rule("ScaledSoftmax", [x], attrs)
    assert emitted == ["ScaledSoftmaxGrad"]
    check_gradient("ScaledSoftmax", [x], attrs)
    scale, causal = attrs.get("scale", 1.0), attrs.get("causal", False)
    t = torch.tensor(x, requires_grad=True)
    s = t * scale
    if causal:
        s = s.masked_fill(torch.ones(3, 4, dtype=torch.bool).triu(1), -INF)
    (s.softmax(-1) * torch.tensor(dys[0])).sum().backward()
    assert rel_error(grads[0], t.grad.numpy()) < 1e-12
    if causal:
        assert (grads[0][:, 0, 1:] == 0).all()


def test_shape_errors_name_the_op_and_the_rule():
    op = get_op("ScaledSoftmax")
    with pytest.raises(OpError, match=r"ScaledSoftmax: input must have rank >= 2 \(causal"):
        op.infer([TensorType((4,))], op.normalize_attrs({"causal": True}))
    with pytest.raises(OpError, match="ScaledSoftmax: input must be a float tensor"):
        op.infer([TensorType((2, 4), "int64")], op.normalize_attrs({}))
    grad = get_op("ScaledSoftmaxGrad")
    with pytest.raises(OpError, match="ScaledSoftmaxGrad: dy is float32 \\[2, 4\\] but y"):
        grad.infer([TensorType((2, 4)), TensorType((4, 2))], grad.normalize_attrs({}))


@pytest.mark.parametrize("causal", [True, False])
def test_flops_are_those_of_the_chain_it_fuses(causal):
    """The fused op does the work of Scale -> CausalMask -> Softmax (and its gradient that of
    SoftmaxGrad -> CausalMask -> Scale), each counted by its own op's definition."""
    t = TensorType((2, 3, 4))

    def flops(name: str, attrs: dict, arity: int = 1) -> int:
        op = get_op(name)
        return op.flops([t] * arity, [t], op.normalize_attrs(attrs))

    scale = flops("Scale", {"factor": 0.5})
    mask = flops("CausalMask", {"value": 0.0}) if causal else 0
    assert flops("ScaledSoftmax", {"causal": causal}) == (
        scale + mask + flops("Softmax", {"axis": -1}))
    assert flops("ScaledSoftmaxGrad", {"causal": causal}, 2) == (
        flops("SoftmaxGrad", {"axis": -1}, 2) + mask + scale)
