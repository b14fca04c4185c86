"""3-D convolutions, plain and transposed, through the torch front end (planner/torch/
rules_conv.py: one 2-D convolution per depth tap): forward, data and filter gradients against
PyTorch in float64 on the numpy reference, then on the CPU executor."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from torch.nn import functional as F  # noqa: E402

from tests.importers.torch_op_check import (  # noqa: E402
    assert_close,
    assert_cpu_executor_matches,
    imported_case,
    reference_outputs,
)

G = torch.Generator().manual_seed(5)


def randn(*shape):
    return torch.randn(shape, generator=G, dtype=torch.float64)


CASES = {
    "plain": (lambda x, w, b: F.conv3d(x, w, b), [randn(2, 3, 5, 4, 4), randn(4, 3, 3, 2, 2),
                                                  randn(4)]),
    "stride_pad_dilation": (lambda x, w: F.conv3d(x, w, stride=(2, 1, 2), padding=(1, 1, 0),
                                                  dilation=(2, 1, 1)),
                            [randn(1, 2, 7, 5, 6), randn(3, 2, 2, 3, 3)]),
    "groups": (lambda x, w: F.conv3d(x, w, padding=1, groups=2),
               [randn(1, 4, 3, 4, 4), randn(6, 2, 3, 3, 3)]),
    "one_tap": (lambda x, w: F.conv3d(x, w, stride=2),
                [randn(2, 2, 5, 4, 4), randn(3, 2, 1, 2, 2)]),
    "transposed": (lambda x, w, b: F.conv_transpose3d(x, w, b), [randn(2, 3, 3, 4, 4),
                                                                  randn(3, 2, 2, 3, 3), randn(2)]),
    "transposed_stride_pad": (lambda x, w: F.conv_transpose3d(
        x, w, stride=(2, 1, 2), padding=(1, 0, 1), output_padding=(1, 0, 1), dilation=(2, 1, 1)),
                              [randn(1, 2, 3, 4, 3), randn(2, 3, 3, 2, 3)]),
    "transposed_groups": (lambda x, w: F.conv_transpose3d(x, w, stride=3, groups=2),
                          [randn(1, 4, 2, 3, 3), randn(4, 1, 2, 2, 2)]),
}


@pytest.fixture(scope="module")
def cases():
    return {k: imported_case(fn, xs) for k, (fn, xs) in CASES.items()}


@pytest.mark.parametrize("case", sorted(CASES))
def test_conv3d_matches_torch(case, cases):
    """Forward and the gradients of image, filter and bias; 1e-4 of the largest value covers
    float32 sums of up to 54 products per output (a few dozen ulps)."""
    c = cases[case]
    got = reference_outputs(c)
    assert len(c.want) == 1 + len(CASES[case][1])  # y and a gradient per input
    for name, want in c.want.items():
        assert_close(got[name], want, f"{case}: {name}")


def test_cpu_executor_runs_every_case(cases, tmp_path):
    assert_cpu_executor_matches(cases, tmp_path / "torch_conv3d")
