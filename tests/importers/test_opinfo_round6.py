"""The OpInfos issue 86's last round made clean, each against torch in float64 (forward and
backward on the reference interpreter, tests/importers/opinfo_cases.py): a real tensor's
angle, antialiased resizing (planner/importers/torch/rules_resample.py), fractional max
pooling, pinv of a symmetric matrix, logsumexp over no elements, prelu of a 0-d input, the
margin losses with a broadcast target, and complex outputs (given as their planes: convert's
complex_outputs, the trainer's), with polar's and torch.complex's own fixes; the OpInfos
themselves (sample or held-out
reference inputs), which the fast subset may not draw, run here too."""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("expecttest")  # op_db's module needs it
F = torch.nn.functional

from planner.importers.torch.rules_resample import aa_weights  # noqa: E402
from tests.importers.opinfo_cases import by_name, check_call, check_opinfo  # noqa: E402

FIXED = [("angle", "sample"), ("angle", "reference"),
         ("_upsample_bilinear2d_aa", "sample"),
         ("nn.functional.interpolate.bilinear", "reference"),
         ("nn.functional.interpolate.bicubic", "reference"),
         ("nn.functional.fractional_max_pool2d", "sample"),
         ("nn.functional.fractional_max_pool3d", "sample"),
         ("linalg.pinv.hermitian", "sample"),
         ("logsumexp", "reference"), ("nn.functional.prelu", "reference"),
         ("nn.functional.margin_ranking_loss", "reference"),
         ("nn.functional.hinge_embedding_loss", "reference"),
         ("fft.rfft2", "sample"), ("fft.ihfft", "sample"), ("stft", "sample"),
         ("complex", "sample"), ("polar", "reference"), ("addcdiv", "reference")]


@pytest.mark.parametrize(("name", "inputs"), FIXED)
def test_the_fixed_opinfos_match_torch(name, inputs):
    got = check_opinfo(by_name()[name], inputs=inputs)
    assert got.status == "pass", got.detail


# ---- antialiased resize: torch's weights, in float64 ------------------------------------------

def _torch_weights(size_in, size_out, mode, align, scale):
    """torch's [out, in] matrix of one axis: its resize of each unit vector (the other axis, of
    size 2 kept 2, by the identity)."""
    eye = torch.eye(size_in, dtype=torch.float64).reshape(size_in, 1, size_in, 1).repeat(
        1, 1, 1, 2)
    if scale is None:
        y = F.interpolate(eye, size=(size_out, 2), mode=mode, align_corners=align,
                          antialias=True)
    else:
        y = F.interpolate(eye, scale_factor=(scale, 1.0), mode=mode, align_corners=align,
                          antialias=True, recompute_scale_factor=False)
    return y[:, 0, :, 0].T.numpy()


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
@pytest.mark.parametrize(("size_in", "size_out", "align", "scale"), [
    (9, 4, False, None), (10, 3, True, None), (4, 9, False, None), (5, 5, False, None),
    (7, 1, False, None), (7, 1, True, None), (12, 5, False, 0.45), (3, 8, True, None)])
def test_aa_weights_are_torchs(mode, size_in, size_out, align, scale):
    want = _torch_weights(size_in, size_out, mode, align, scale)
    got = aa_weights(size_in, size_out, mode, align, scale)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
def test_antialiased_interpolate_matches_torch(mode):
    x = torch.randn(2, 3, 11, 7, generator=torch.Generator().manual_seed(0))
    for size in ((4, 3), (15, 5)):
        assert check_call(lambda x, size=size: F.interpolate(x, size=size, mode=mode,
                                                             antialias=True),
                          x) == ("pass", "")


def test_a_resize_to_width_1_with_the_height_resized_is_refused_in_one_line():
    """torch's CPU kernel gives every row the first one's value there (torch 2.9): refused,
    not answered otherwise than torch; width 1 with the height kept is torch's and the
    planner's alike."""
    from tests.importers.opinfo_cases import check_call as check

    x = torch.randn(1, 2, 9, 3, generator=torch.Generator().manual_seed(4))
    status, line = check(lambda x: F.interpolate(x, size=(4, 1), mode="bilinear",
                                                 antialias=True), x)
    assert status == "refused" and "width 1" in line and "\n" not in line
    assert check(lambda x: F.interpolate(x, size=(9, 1), mode="bicubic", antialias=True),
                 x) == ("pass", "")


# ---- fractional max pooling, its random samples given -----------------------------------------

def _fractional(op, kernel, out):
    return lambda x, u: op(x, kernel, out, u.detach())


def test_fractional_max_pool_matches_torch_for_given_samples():
    """Values, indices and the gradient (to each window's argmax: torch's NaN and tie rule)
    against torch's own kernel for the same random samples."""
    g = torch.Generator().manual_seed(1)
    op2 = torch.ops.aten.fractional_max_pool2d.default
    op3 = torch.ops.aten.fractional_max_pool3d.default
    x, u = torch.randn(2, 3, 9, 8, generator=g), torch.rand(2, 3, 2, generator=g)
    x[0, 0, 1, 1] = math.nan
    x[1, 2, 3:5, 2:4] = 1.0  # a tie
    for kernel, out in (([2, 3], [4, 3]), ([2, 2], [5, 6]), ([3, 1], [1, 8])):
        assert check_call(_fractional(op2, kernel, out), x, u) == ("pass", ""), (kernel, out)
    x3, u3 = torch.randn(1, 2, 6, 5, 7, generator=g), torch.rand(1, 2, 3, generator=g)
    for kernel, out in (([2, 3, 2], [3, 2, 4]), ([2, 1, 2], [1, 4, 2])):
        assert check_call(_fractional(op3, kernel, out), x3, u3) == ("pass", ""), (kernel, out)


# ---- the rest ---------------------------------------------------------------------------------

def test_angle_of_a_real_tensor_is_torchs():
    """pi below 0, 0 at -0.0 and above, NaN kept; its gradient 0 everywhere, as torch's."""
    x = torch.tensor([-2.0, -0.0, 0.0, 3.0, -math.inf, math.inf, math.nan])
    assert check_call(torch.angle, x) == ("pass", "")


def test_logsumexp_over_no_elements_is_minus_infinity():
    assert check_call(lambda x: torch.logsumexp(x, 0), torch.empty(0, 3)) == ("pass", "")
    assert check_call(lambda x: torch.logsumexp(x, 1), torch.empty(2, 0)) == ("pass", "")
    assert check_call(lambda x: torch.logsumexp(x, 1), torch.empty(0, 4)) == ("pass", "")


def test_prelu_of_a_0d_input_keeps_its_rank():
    for v in (-2.0, 3.0):
        assert check_call(F.prelu, torch.tensor(v), torch.tensor([0.25])) == ("pass", "")


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_margin_losses_broadcast_their_target(reduction):
    g = torch.Generator().manual_seed(2)
    x1, x2 = torch.randn(5, 2, generator=g), torch.randn(5, 2, generator=g)
    y = torch.tensor([[1.0], [-1.0], [1.0], [-1.0], [1.0]])
    assert check_call(lambda a, b, t: F.margin_ranking_loss(a, b, t, margin=0.3,
                                                            reduction=reduction),
                      x1, x2, y) == ("pass", "")
    x = torch.randn(5, 5, generator=g)
    t = torch.tensor([[1.0, -1.0, 1.0, -1.0, 1.0]])
    assert check_call(lambda a, t: F.hinge_embedding_loss(a, t, margin=0.5,
                                                          reduction=reduction),
                      x, t) == ("pass", "")


def test_pinv_of_a_symmetric_matrix_is_torchs():
    """Full rank, rank-deficient (an eigenvalue under the tolerance) and with atol given; the
    gradient is torch's pinv_backward, defined where the rank holds."""
    g = torch.Generator().manual_seed(3)
    a = torch.randn(5, 5, generator=g)
    full = a + a.T
    v = torch.linalg.qr(torch.randn(5, 5, generator=g))[0]
    low = v @ torch.diag(torch.tensor([3.0, -2.0, 1.5, 0.0, 0.0])) @ v.T
    assert check_call(lambda m: torch.linalg.pinv(m, hermitian=True), full) == ("pass", "")
    assert check_call(lambda m: torch.linalg.pinv(m, hermitian=True), low) == ("pass", "")
    assert check_call(lambda m: torch.linalg.pinv(m, atol=1.6, hermitian=True), low) == \
        ("pass", "")


# ---- complex outputs ------------------------------------------------------------------------

def test_a_complex_output_matches_torch_forward_and_gradient():
    """The planes of torch.fft's complex results against view_as_real of torch's, and the
    gradient for the planes' cotangent against torch's for the complex cotangent."""
    x = torch.randn(3, 10, generator=torch.Generator().manual_seed(5))
    for fn in (torch.fft.rfft, torch.fft.fft, lambda x: torch.fft.ifft2(x, norm="ortho")):
        assert check_call(fn, x) == ("pass", "")


def test_polar_gradient_is_torchs_at_zero_and_negative_abs():
    """torch's polar_backward gives abs the derivative times sign(abs): 0 at 0, negated
    below."""
    r = torch.tensor([-2.0, 0.0, 1.5, -0.5])
    theta = torch.tensor([0.3, -1.2, 2.0, 0.0])
    assert check_call(torch.polar, r, theta) == ("pass", "")


def test_torch_complex_broadcasts_its_parts():
    re, im = torch.randn(5, 1), torch.randn(5)
    assert check_call(torch.complex, re, im) == ("pass", "")
    assert check_call(torch.complex, torch.randn(2, 3), torch.tensor(0.5)) == ("pass", "")
