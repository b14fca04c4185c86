"""Dropout: the counter-based mask (SplitMix64 against a plain-integer implementation and its
published outputs), the forward scaling, DropoutGrad recomputing the same mask, errors."""

from __future__ import annotations

import numpy as np
import pytest

from planner.ops import OpError, TensorType, get_op
from planner.ops.dropout import GOLDEN_GAMMA, dropout_mask, splitmix64
from tests.ops.opcheck import check_gradient, checked_reference

M64 = (1 << 64) - 1


def splitmix64_int(state: int) -> int:
    """SplitMix64's next output from `state` on Python ints, as Vigna's splitmix64.c does it."""
    z = (state + 0x9E3779B97F4A7C15) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def keep_int(seed: int, index: int, rate: float) -> bool:
    u = splitmix64_int((seed * 0x9E3779B97F4A7C15 + index) & M64)
    return (u >> 11) * 2.0**-53 >= rate


def test_splitmix64_published_outputs():
    # The first outputs of SplitMix64 seeded with 0 (splitmix64.c): output k is the generator
    # stepped from state k * gamma, which is the dropout hash of (seed=k, index=0).
    published = [0xE220A8397B1DCDAF, 0x6E789E6AA1B965F4, 0x06C45D188009454F, 0xF88BB8A8724C81EC]
    states = np.array([(k * GOLDEN_GAMMA) & M64 for k in range(4)], dtype=np.uint64)
    assert [int(u) for u in splitmix64(states)] == published
    assert [splitmix64_int(int(s)) for s in states] == published


def test_splitmix64_vectorised_matches_integer_arithmetic():
    rng = np.random.default_rng(0)
    states = [0, 1, M64, M64 - GOLDEN_GAMMA + 1, 1 << 63,
              *(int(s) for s in rng.integers(0, 2**63, 20, dtype=np.uint64) * 2 + 1)]
    got = splitmix64(np.array(states, dtype=np.uint64))
    assert got.dtype == np.uint64
    assert [int(u) for u in got] == [splitmix64_int(s) for s in states]
    assert int(splitmix64(M64)) == splitmix64_int(M64)          # scalar in, no overflow warning


@pytest.mark.parametrize("seed, rate", [(0, 0.5), (3, 0.1), (2**64 - 1, 0.9), (12345, 0.0)])
def test_mask_matches_integer_reference(seed, rate):
    mask = dropout_mask(seed, 300, rate)
    assert mask.dtype == bool and mask.shape == (300,)
    assert mask.tolist() == [keep_int(seed, i, rate) for i in range(300)]


def test_mask_is_deterministic_differs_across_seeds_and_keeps_one_minus_rate():
    n = 100_000
    assert np.array_equal(dropout_mask(5, n, 0.5), dropout_mask(5, n, 0.5))
    assert np.mean(dropout_mask(5, n, 0.5) != dropout_mask(6, n, 0.5)) > 0.4
    for rate in (0.1, 0.5, 0.8):
        assert abs(dropout_mask(11, n, rate).mean() - (1 - rate)) < 0.01
    # The mask of a prefix does not depend on n: element i's bit is a function of (seed, i).
    assert np.array_equal(dropout_mask(5, 1000, 0.3), dropout_mask(5, n, 0.3)[:1000])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_dropout_forward_scales_kept_elements(dtype):
    x = np.random.default_rng(1).standard_normal((4, 3, 5)).astype(dtype)
    (y,) = checked_reference("Dropout", [x], rate=0.25, seed=9)
    keep = dropout_mask(9, x.size, 0.25).reshape(x.shape)
    assert y.dtype == dtype
    assert np.array_equal(y[keep], x[keep] / dtype(0.75)) and not y[~keep].any()
    # As torch.nn.functional.dropout: kept elements are x / (1 - p), the rest 0.
    (identity,) = checked_reference("Dropout", [x], rate=0.0, seed=9)
    assert np.array_equal(identity, x)


def test_dropout_grad_recomputes_the_forward_mask():
    x = np.random.default_rng(2).standard_normal((6, 7)).astype(np.float32)
    (y,) = checked_reference("Dropout", [x], rate=0.5, seed=77)
    (dx,) = checked_reference("DropoutGrad", [np.ones_like(x)], rate=0.5, seed=77)
    assert np.array_equal(dx != 0, y != 0) and np.all(dx[dx != 0] == 2.0)


def test_dropout_gradient_rule_by_finite_differences():
    x = np.random.default_rng(3).standard_normal((3, 4))
    check_gradient("Dropout", [x], {"rate": 0.4, "seed": 2})


def test_dropout_flops_and_errors():
    x = TensorType((2, 8))
    assert get_op("Dropout").flops([x], [x], {}) == 2 * 16
    dropout = get_op("Dropout")
    with pytest.raises(OpError, match=r"rate must lie in \[0, 1\), got 1.0"):
        dropout.infer([x], dropout.normalize_attrs({"rate": 1.0}))
    with pytest.raises(OpError, match="seed must lie"):
        dropout.infer([x], dropout.normalize_attrs({"seed": -1}))
    with pytest.raises(OpError, match="must be a float tensor"):
        dropout.infer([TensorType((2,), "int64")], dropout.normalize_attrs({}))
    with pytest.raises(ValueError, match="seed"):
        dropout_mask(2**64, 4, 0.5)


def test_step_input_moves_the_seed_and_grad_follows():
    x = np.random.default_rng(4).standard_normal((8, 9)).astype(np.float32)
    at = {step: checked_reference("Dropout", [x, np.int64(step)], rate=0.5, seed=3)[0]
          for step in (0, 1, 2)}
    # step 0 is the step-less mask; later steps are seed + step * 2**32, each a fresh mask
    assert np.array_equal(at[0], checked_reference("Dropout", [x], rate=0.5, seed=3)[0])
    assert np.array_equal(at[2] != 0, dropout_mask(3 + 2 * 2**32, x.size, 0.5).reshape(x.shape))
    assert np.mean((at[1] != 0) != (at[2] != 0)) > 0.3
    (dx,) = checked_reference("DropoutGrad", [np.ones_like(x), np.int64(2)], rate=0.5, seed=3)
    assert np.array_equal(dx != 0, at[2] != 0)


def test_step_input_errors():
    dropout = get_op("Dropout")
    x = TensorType((2, 8))
    with pytest.raises(OpError, match="step must be an int64 scalar"):
        dropout.infer([x, TensorType((1,), "int64")], dropout.normalize_attrs({}))
    with pytest.raises(OpError, match="1 or 2 inputs"):
        dropout.infer([x, TensorType((), "int64"), x], dropout.normalize_attrs({}))
