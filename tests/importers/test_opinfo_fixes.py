"""The silent-wrong and crash cases the OpInfo sweep found (issue 46, deliverable 6), each
through the sweep's own check (tests/importers/opinfo_cases.check_call: exported, imported,
forward and backward on the reference interpreter against torch in float64)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from tests.importers.opinfo_cases import check_call  # noqa: E402


def _rows_with_a_zero_row():
    x = torch.randn(4, 5, generator=torch.Generator().manual_seed(0))
    x[1] = 0.0
    return x


@pytest.mark.parametrize("scale", [1.7, 2.5, 0.6])
def test_bilinear_align_corners_ignores_a_non_integer_scale_as_torch_does(scale):
    # PyTorch maps corner to corner, (in - 1) / (out - 1); the scale only sets out's size
    # (it was used as the sampling ratio: forward off by up to 0.99).
    x = torch.randn(1, 2, 5, 6, generator=torch.Generator().manual_seed(1))
    assert check_call(lambda t: F.upsample_bilinear(t, scale_factor=scale), x) == ("pass", "")
    assert check_call(lambda t: F.interpolate(t, scale_factor=scale, mode="bilinear",
                                              align_corners=True), x) == ("pass", "")


@pytest.mark.parametrize("size", [(1, 2), (1, 1), (3, 1)])
def test_bilinear_to_a_length_of_1_reads_the_middle_as_torch_does(size):
    # PyTorch samples an output of length 1 at (in - 1) / 2 (half_pixel); pytorch_half_pixel
    # reads x[0] there (it was imported so: forward wrong by up to half the axis' range).
    x = torch.randn(1, 2, 4, 5, generator=torch.Generator().manual_seed(2))
    assert check_call(lambda t: F.interpolate(t, size=size, mode="bilinear"), x) == ("pass", "")


@pytest.mark.parametrize("fn", [
    lambda t: torch.linalg.norm(t, dim=1),
    lambda t: torch.linalg.vector_norm(t, dim=1, keepdim=True),
    lambda t: F.normalize(t, dim=1),
    lambda t: torch.linalg.vector_norm(t[1]),
], ids=["linalg.norm", "vector_norm-keepdim", "normalize", "norm-of-zero-vector"])
def test_norm_gradient_at_a_zero_row_is_torch_subgradient_zero(fn):
    assert check_call(fn, _rows_with_a_zero_row()) == ("pass", "")


@pytest.mark.parametrize("fn", [torch.amax, torch.amin, torch.logsumexp, torch.sum, torch.mean])
@pytest.mark.parametrize("dim", [0, -1])
def test_reductions_of_a_0d_tensor_with_dim(fn, dim):
    status, detail = check_call(lambda t: fn(t, dim=dim, keepdim=True), torch.tensor(0.7))
    # logsumexp decomposes to an eq.Scalar the planner may not have: a refusal is allowed,
    # an IndexError (a crash) is not.
    assert status == "pass" or (fn is torch.logsumexp and status == "refused"), detail


def test_unfold_of_an_empty_batch_runs_backward():
    assert check_call(lambda t: F.unfold(t, (2, 2)), torch.randn(0, 2, 4, 4)) == ("pass", "")


def test_a_0d_constant_built_by_slice_assignment_stays_0d():
    def fn(p):
        c = torch.zeros(4)
        c[1:3] = torch.tensor(2.0)
        m = torch.zeros((1, 3, 3, 1))
        m[:, :2, 1:, :] = 3.0
        return p * c[2].clone() + m.sum()

    assert check_call(fn, torch.randn(3)) == ("pass", "")


@pytest.mark.parametrize("fn", [
    lambda t: 1 - t, lambda t: torch.rsub(t, 1), lambda t: 1 / t, lambda t: 2 ** t,
    lambda t: 3 / t, lambda t: 0.5 ** t, lambda t: 2 - 3 * t, lambda t: torch.sub(2, t, alpha=3),
], ids=["1-t", "rsub", "1/t", "2**t", "3/t", "0.5**t", "2-3t", "sub-alpha"])
def test_scalar_first_arithmetic(fn):
    x = torch.rand(3, 4, generator=torch.Generator().manual_seed(2)) + 0.5
    assert check_call(fn, x) == ("pass", "")


def test_safe_softmax_zeroes_masked_rows_with_torchs_gradient_and_dtype():
    """aten._safe_softmax kept whole: a row masked to -inf whole gives zeros and a zero
    gradient (the decomposition's was NaN); its dtype argument computes in that dtype."""
    import numpy as np

    from tests.importers.torch_op_check import imported_case, reference_outputs

    mask = torch.zeros(3, 4, dtype=torch.bool)
    mask[1] = True
    for dtype in (None, torch.float64):
        case = imported_case(lambda w, dtype=dtype: torch.ops.aten._safe_softmax.default(
            w.masked_fill(mask, float("-inf")), -1, dtype=dtype), [torch.randn(3, 4)])
        got = reference_outputs(case)
        for name, want in case.want.items():
            assert np.all(np.isfinite(got[name])), name
            np.testing.assert_allclose(got[name], want, rtol=1e-5, atol=1e-6)
        assert got[case.graph.outputs[0]].dtype == (np.float32 if dtype is None else np.float64)
