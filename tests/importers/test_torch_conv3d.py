"""3-D convolutions through the torch front end (planner/torch/rules_conv.py: one Conv2D per
depth tap): forward, data and filter gradients against PyTorch in float64 on the numpy
reference, then on the CPU executor."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch.nn import functional as F  # noqa: E402

from tests.importers.torch_op_check import (  # noqa: E402
    assert_close,
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
    from tests.codegen.helpers import build_module
    from tests.codegen.merged_graph import merge

    merged = merge("torch_conv3d", {f"{k}/": c.graph for k, c in cases.items()})
    ex = build_module(merged, tmp_path / "conv3d").Executor()
    ex.load_params({f"{k}/{n}": v for k, c in cases.items() for n, v in c.params.items()})
    out = ex.forward({f"{k}/{n}": v for k, c in cases.items() for n, v in c.feeds.items()})
    for k, c in cases.items():
        for name, want in c.want.items():
            assert_close(np.asarray(out[f"{k}/{name}"]), want, f"{k}: {name} (CPU executor)")
