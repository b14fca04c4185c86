"""Pools (planner/ops/pool_nd.py, planner/importers/torch/rules_pool.py) through the torch front
end: 1-D, 2-D and 3-D max pools with their indices, 3-D average pools, adaptive pools of output
sizes that do not divide the input, max_unpool; forward and gradient against PyTorch in
float64 on the numpy reference, then every case at once on the CPU executor."""

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

G = torch.Generator().manual_seed(11)


def randn(*shape):
    return torch.randn(shape, generator=G, dtype=torch.float64)


def unpooled(pool, unpool, x, k, **kw):
    y, i = pool(x, k, return_indices=True, **kw)
    return unpool(y, i, k, output_size=x.shape[2:], **kw)


# id -> (function of the inputs, inputs)
CASES = {
    "max_pool1d_indices": (lambda x: F.max_pool1d(x, 3, 2, 1, return_indices=True),
                           [randn(2, 3, 9)]),
    "max_pool2d_indices": (lambda x: F.max_pool2d(x, 3, 2, 1, dilation=(1, 2),
                                                  return_indices=True), [randn(2, 3, 7, 9)]),
    "max_pool2d_values": (lambda x: F.max_pool2d(x, 2, ceil_mode=True), [randn(2, 3, 5, 5)]),
    "max_pool3d": (lambda x: F.max_pool3d(x, (3, 2, 2), (2, 1, 2), (1, 0, 1),
                                          ceil_mode=True), [randn(2, 2, 7, 5, 6)]),
    "max_pool3d_indices": (lambda x: F.max_pool3d(x, 2, return_indices=True),
                           [randn(1, 2, 4, 4, 6)]),
    "max_pool3d_unbatched": (lambda x: F.max_pool3d(x, 2), [randn(2, 4, 4, 4)]),
    "avg_pool1d": (lambda x: F.avg_pool1d(x, 3, 2, 1, ceil_mode=True), [randn(2, 3, 8)]),
    "avg_pool2d": (lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True), [randn(2, 3, 7, 7)]),
    "avg_pool3d": (lambda x: F.avg_pool3d(x, 3, 2, 1), [randn(2, 2, 7, 5, 6)]),
    "avg_pool3d_no_pad_count": (lambda x: F.avg_pool3d(x, 3, 2, 1, ceil_mode=True,
                                                       count_include_pad=False),
                                [randn(1, 2, 6, 5, 7)]),
    "adaptive_avg1d": (lambda x: F.adaptive_avg_pool1d(x, 4), [randn(2, 3, 7)]),
    "adaptive_avg2d": (lambda x: F.adaptive_avg_pool2d(x, (3, 4)), [randn(2, 3, 7, 5)]),
    "adaptive_avg2d_global": (lambda x: F.adaptive_avg_pool2d(x, 1), [randn(2, 3, 4, 5)]),
    "adaptive_avg3d": (lambda x: F.adaptive_avg_pool3d(x, (3, 2, 4)), [randn(1, 2, 7, 5, 6)]),
    "adaptive_max1d": (lambda x: F.adaptive_max_pool1d(x, 3, return_indices=True),
                       [randn(2, 3, 7)]),
    "adaptive_max2d": (lambda x: F.adaptive_max_pool2d(x, (4, 3), return_indices=True),
                       [randn(2, 3, 7, 5)]),
    "adaptive_max2d_values": (lambda x: F.adaptive_max_pool2d(x, 5), [randn(1, 2, 7, 9)]),
    "adaptive_max3d": (lambda x: F.adaptive_max_pool3d(x, (2, 3, 3)), [randn(1, 2, 5, 7, 4)]),
    "max_unpool1d": (lambda x: unpooled(F.max_pool1d, F.max_unpool1d, x, 2), [randn(2, 3, 8)]),
    "max_unpool2d": (lambda x: unpooled(F.max_pool2d, F.max_unpool2d, x, 2), [randn(2, 3, 6, 4)]),
    "max_unpool3d": (lambda x: unpooled(F.max_pool3d, F.max_unpool3d, x, 2),
                     [randn(1, 2, 4, 6, 4)]),
    "max_unpool2d_values": (lambda v: F.max_unpool2d(v, torch.tensor([[[[0, 3], [9, 14]]]]), 2,
                                                     output_size=(4, 4)), [randn(1, 1, 2, 2)]),
}


@pytest.fixture(scope="module")
def cases():
    return {k: imported_case(fn, xs) for k, (fn, xs) in CASES.items()}


@pytest.mark.parametrize("case", sorted(CASES))
def test_pool_matches_torch(case, cases):
    c = cases[case]
    got = reference_outputs(c)
    for name, want in c.want.items():
        assert_close(got[name], want, f"{case}: {name}")


def test_2d_pools_stay_the_planners_where_they_agree_with_torch(cases):
    """Existing plans keep oneDNN's pooling; the indices bring MaxPoolND, and so does an
    average whose ceil_mode window overhangs the counted padding (oneDNN's divisor differs)."""
    def ops(case):
        return {n.op for n in cases[case].graph.nodes}

    assert "MaxPool" in ops("max_pool2d_values") and "MaxPoolND" in ops("max_pool2d_indices")
    assert "AvgPool" in ops("avg_pool2d") and "AvgPoolND" in ops("avg_pool1d")


def test_cpu_executor_runs_every_case(cases, tmp_path):
    assert_cpu_executor_matches(cases, tmp_path / "torch_pools")
