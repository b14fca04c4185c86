"""The reductions (planner/ops/reductions.py, planner/importers/torch/rules_reduce.py) and cumprod
through the torch front end, forward and gradient against PyTorch in float64 on the numpy reference;
then every case at once on the CPU executor (one graph, one build)."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from planner.torch import TorchImportError  # noqa: E402
from tests.importers.torch_op_check import (  # noqa: E402
    assert_close,
    assert_cpu_executor_matches,
    imported_case,
    reference_outputs,
)

LA = torch.linalg
G = torch.Generator().manual_seed(7)


def randn(*shape):
    return torch.randn(shape, generator=G, dtype=torch.float64)


WITH_ZEROS = torch.tensor([[1.5, 0.0, -2.0, 0.5], [0.0, 3.0, 0.0, 1.0], [2.0, -1.0, 0.5, 1.5]])
TIES = torch.tensor([[1.0, 3.0, 3.0, -2.0], [0.5, 0.5, 0.5, 0.5]])
NANS = torch.tensor([[1.0, math.nan, 2.0], [math.nan, math.nan, math.nan], [0.5, -1.0, 3.0]])
ZERO_ROW = torch.tensor([[0.0, 0.0, 0.0], [3.0, -4.0, 1.0]])
INFS = torch.tensor([[-math.inf, -math.inf], [math.inf, 1.0], [0.5, -math.inf]])

# id -> (function of the inputs, inputs)
CASES = {
    "sum_0d_dim0_keepdim": (lambda x: torch.sum(x, 0, keepdim=True), [randn()]),
    "sum_dim_none": (lambda x: torch.sum(x, dim=None), [randn(2, 3)]),
    "sum_dim_empty": (lambda x: torch.sum(x, dim=()), [randn(2, 3)]),
    "sum_dims_keepdim": (lambda x: torch.sum(x, (0, -1), keepdim=True), [randn(2, 3, 4)]),
    "mean_dim": (lambda x: x.mean(-2), [randn(2, 3, 4)]),
    "mean_0d": (lambda x: x.mean(-1), [randn()]),
    "amax_0d_keepdim": (lambda x: torch.amax(x, 0, keepdim=True), [randn()]),
    "amin_0d": (lambda x: torch.amin(x, -1), [randn()]),
    "amax_dims": (lambda x: torch.amax(x, (0, 2)), [randn(2, 3, 4)]),
    "amax_ties": (lambda x: torch.amax(x, 1), [TIES]),
    "amin_ties_keepdim": (lambda x: torch.amin(x, -1, keepdim=True), [TIES]),
    "max_all": (lambda x: torch.max(x), [randn(3, 4)]),
    "min_dim_values": (lambda x: torch.min(x, 1).values, [randn(3, 4)]),
    "prod_dim": (lambda x: torch.prod(x, 1), [randn(3, 4)]),
    "prod_all": (lambda x: torch.prod(x), [randn(2, 3)]),
    "prod_zeros": (lambda x: torch.prod(x, 1, keepdim=True), [WITH_ZEROS]),
    "prod_zeros_dim0": (lambda x: torch.prod(x, 0), [WITH_ZEROS]),
    "prod_0d": (lambda x: torch.prod(x, 0), [randn()]),
    "var_correction0": (lambda x: torch.var(x, (0, 2), correction=0), [randn(2, 3, 4)]),
    "std_dim": (lambda x: torch.std(x, 1), [randn(3, 5)]),
    "var_mean": (lambda x: torch.var_mean(x, 1), [randn(3, 5)]),
    "std_mean_keepdim": (lambda x: torch.std_mean(x, 0, keepdim=True, correction=2),
                         [randn(4, 3)]),
    "var_all": (lambda x: torch.var(x), [randn(3, 4)]),
    "nansum": (lambda x: torch.nansum(x, 1), [NANS]),
    "nansum_all": (lambda x: torch.nansum(x), [NANS]),
    "nanmean": (lambda x: torch.nanmean(x, 1, keepdim=True), [NANS]),
    "logsumexp": (lambda x: torch.logsumexp(x, 1), [randn(3, 5) * 10]),
    "logsumexp_dims": (lambda x: torch.logsumexp(x, (0, 2), keepdim=True), [randn(2, 3, 4)]),
    "logsumexp_infinite": (lambda x: torch.logsumexp(x, 1), [INFS]),
    "logsumexp_0d": (lambda x: torch.logsumexp(x, 0), [randn()]),
    "any": (lambda x: torch.any(x, 1), [WITH_ZEROS]),
    "any_all_axes": (lambda x: torch.any(x), [WITH_ZEROS]),
    "all_dim": (lambda x: torch.all(x, 1), [WITH_ZEROS]),
    "all_dims_keepdim": (lambda x: torch.all(x, 0, keepdim=True), [WITH_ZEROS]),
    "norm_2": (lambda x: LA.vector_norm(x, dim=1), [randn(3, 4)]),
    "norm_2_zero_row": (lambda x: LA.vector_norm(x, dim=1), [ZERO_ROW]),
    "norm_1": (lambda x: LA.vector_norm(x, 1, dim=(0, 1)), [WITH_ZEROS]),
    "norm_0": (lambda x: LA.vector_norm(x, 0, dim=1), [WITH_ZEROS]),
    "norm_inf": (lambda x: LA.vector_norm(x, math.inf, dim=1), [WITH_ZEROS]),
    "norm_minus_inf": (lambda x: LA.vector_norm(x, -math.inf, dim=1, keepdim=True), [TIES]),
    "norm_3_5": (lambda x: LA.vector_norm(x, 3.5), [randn(3, 4)]),
    "norm_3_zero_row": (lambda x: LA.vector_norm(x, 3, dim=1), [ZERO_ROW]),
    "norm_1_5": (lambda x: LA.vector_norm(x, 1.5, dim=0), [randn(3, 4)]),
    "norm_0_5": (lambda x: LA.vector_norm(x, 0.5, dim=1), [randn(3, 4)]),
    "norm_minus_1": (lambda x: LA.vector_norm(x, -1, dim=1), [randn(3, 4)]),
    "norm_0d": (lambda x: LA.vector_norm(x), [randn()]),
    "torch_norm_p1": (lambda x: torch.norm(x, p=1, dim=1), [randn(3, 4)]),
    "cumprod": (lambda x: torch.cumprod(x, 1), [randn(3, 5)]),
    "cumprod_zeros": (lambda x: torch.cumprod(x, 1), [WITH_ZEROS]),
    "cumprod_zeros_dim0": (lambda x: torch.cumprod(x, -2), [WITH_ZEROS]),
    "cumprod_0d": (lambda x: torch.cumprod(x, 0), [randn()]),
    "normalize": (lambda x: torch.nn.functional.normalize(x, dim=1), [ZERO_ROW]),
}


@pytest.fixture(scope="module")
def cases():
    return {k: imported_case(fn, xs) for k, (fn, xs) in CASES.items()}


@pytest.mark.parametrize("case", sorted(CASES))
def test_reduction_matches_torch(case, cases):
    c = cases[case]
    got = reference_outputs(c)
    for name, want in c.want.items():
        assert_close(got[name], want, f"{case}: {name}")


def test_the_ops_are_the_family_rows(cases):
    """Each reduction is one planner op, not a decomposition (logsumexp is no
    max-exp-sum-log chain, all no logical_not of any)."""
    ops = {k: {n.op for n in c.graph.nodes} for k, c in cases.items()}
    assert "ReduceLogSumExp" in ops["logsumexp"] and "Exp" not in ops["logsumexp"]
    assert "ReduceAll" in ops["all_dim"]
    assert "ReduceProd" in ops["prod_zeros"] and "ReduceGrad" in ops["prod_zeros"]
    assert "ReduceNanSum" in ops["nansum"]


@pytest.mark.parametrize(("fn", "message"), [
    (lambda x: torch.prod(x, 1, dtype=torch.float64), r"aten.prod.dim_int \(to float64"),
    (lambda x: torch.var(x[:1], 0), "variance of 1 elements with correction 1.0"),
])
def test_refusals_name_the_node(fn, message):
    with pytest.raises(TorchImportError, match=message):
        imported_case(fn, [torch.randn(3, 4)])


def test_cpu_executor_runs_every_case(cases, tmp_path):
    """All cases as one graph on the CPU executor, held to torch as the reference is."""
    assert_cpu_executor_matches(cases, tmp_path / "torch_reductions")
