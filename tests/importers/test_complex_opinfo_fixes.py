"""What the complex64 OpInfo sweep (issue 86) found silently wrong or crashing in the complex
import (planner/importers/torch/rules_complex.py), each case held to torch forward and
backward as the sweep holds an OpInfo (tests/importers/opinfo_cases.py, dtype complex64: the
complex arguments parameters of their planes, the gradients view_as_real of torch's complex128
ones): the modulus and the quotient past float32's squares (|z|^2 overflows past 1.8e19 and
underflows below 1e-19), a / 0, the bool of an imaginary number, sgn's gradient at 0, a 0-d
value's cumsum and flip (which ran over its real and imaginary parts), and a real tensor times
a complex number (torch's complex convolution decomposes to it; it crashed).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from tests.importers.opinfo_cases import check_call  # noqa: E402

C64 = torch.complex64


def _z(*values: complex) -> torch.Tensor:
    return torch.tensor(values, dtype=C64)


EXTREMES = _z(3e30 + 4e30j, 1e-30 - 2e-30j, 3 + 4j, -2e19 + 1e19j, 5e-39j, 1.5 - 0.5j)


@pytest.mark.parametrize("fn", [torch.abs, torch.reciprocal, torch.sgn, torch.angle],
                         ids=lambda f: f.__name__)
def test_unary_ops_hold_at_float32s_extremes(fn):
    assert check_call(fn, EXTREMES, dtype="complex64") == ("pass", "")


def test_a_quotient_holds_at_float32s_extremes():
    assert check_call(torch.div, EXTREMES, EXTREMES.flip(0) * (1 + 2j),
                      dtype="complex64") == ("pass", "")


def test_division_by_zero_gives_c10s_infinities():
    """(1 + 1j) / 0 is inf + inf j in torch (c10's a / |c|), 0 / 0 NaN: forward only (the
    gradient there is torch's 0 / 0 too)."""
    a, b = _z(1 + 1j, -2 + 0j, 0j, 1 + 1j), _z(0j, 0j, 0j, 2 - 1j)
    assert check_call(torch.div, a, b) == ("pass", "")


def test_the_bool_of_an_imaginary_number_is_true():
    assert check_call(lambda z: z.bool(), _z(0j, 2j, 3 + 0j, 0 - 0j), dtype="complex64") == \
        ("pass", "")


def test_sgn_at_zero_has_torchs_zero_gradient():
    assert check_call(torch.sgn, _z(0j, 3 + 4j, -1e-3j), dtype="complex64") == ("pass", "")


@pytest.mark.parametrize("fn", [lambda z: torch.cumsum(z, 0), lambda z: torch.flip(z, [0]),
                                lambda z: z.sum(-1), lambda z: z.mean()],
                         ids=["cumsum", "flip", "sum", "mean"])
def test_a_0d_values_dims_are_not_its_planes(fn):
    assert check_call(fn, torch.tensor(1 + 2j, dtype=C64), dtype="complex64") == ("pass", "")


def test_a_real_tensor_times_a_complex_number():
    x = torch.linspace(-1.0, 1.0, 6).reshape(2, 3)
    assert check_call(lambda t: torch.view_as_real(t * (2 - 1j)), x) == ("pass", "")


@pytest.mark.parametrize("mode", ["reflect", "replicate"])
def test_a_complex_signal_padded_by_reflection_or_its_edge(mode):
    """F.pad of a complex tensor in reflect and replicate modes (stft's centred frames pad a
    complex signal so): the planes padded, both parts alike."""
    z = torch.randn(2, 3, 9, dtype=C64)
    assert check_call(lambda x: torch.nn.functional.pad(x, (3, 2), mode=mode), z,
                      dtype="complex64") == ("pass", "")


def test_a_complex_signals_frames_and_its_stft():
    """Tensor.unfold of a complex tensor (stft's frames: the windows' axis last, after the
    planes' in the real unfold) and torch.stft of a complex signal with its default centred,
    reflection-padded frames."""
    z = torch.randn(2, 20, dtype=C64)
    assert check_call(lambda x: x.unfold(1, 5, 3), z, dtype="complex64") == ("pass", "")
    window = torch.hann_window(8)
    assert check_call(lambda x: torch.stft(x, 8, hop_length=2, window=window,
                                           return_complex=True), z,
                      dtype="complex64") == ("pass", "")
