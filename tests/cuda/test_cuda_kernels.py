"""Every CUDA kernel against its op's numpy reference, on clean inputs and on inputs holding
NaN, +inf and -inf (tests/codegen/op_cases.py, run by the CUDA executor)."""

from __future__ import annotations

import pytest

from codegen.backends import RUNTIMES
from planner.ops.collective import COLLECTIVE_OPS
from tests.codegen.op_cases import CASES, VARIANTS, check_variant, run_variants

# float32 kernels: a few ulps per element; CUDA's expf / erff / tanhf are within 2 ulps and
# cuDNN's convolution and pooling sums run in another order than numpy's (still float32,
# TF32 off), so the same bound as the CPU's oneDNN kernels.
CUDA_TOL = 2e-6 * 8

# Inputs whose infinities may come out as NaN, and why: cuDNN's batch norm folds the scale into
# one multiply-add per element (x * (scale * invstd) + (bias - mean * scale * invstd)), so an
# infinite scale meets inf - inf where the reference's scale * (x - mean) * invstd gives +-inf.
INF_OR_NAN = {"BatchNorm.0.nan1", "BatchNormGrad.0.nan2"}

# The cases of the ops the CUDA runtime has (gradient accumulation is the CPU executor's;
# SGD's dampening and Adam's amsgrad, an update of another arity, are the CPU's too:
# codegen.backends refuses them on CUDA).
CUDA_VARIANTS = [v for v in VARIANTS if v[1] in RUNTIMES["cuda"].ops
                 and not (v[2].get("dampening") or v[2].get("amsgrad"))]


def test_the_cases_cover_every_cuda_op():
    # The collectives need a process group: tests/cuda/test_cuda_data_parallel.py runs them.
    ops = RUNTIMES["cuda"].ops - COLLECTIVE_OPS
    assert set(ops) <= set(CASES), sorted(set(ops) - set(CASES))


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    return run_variants(tmp_path_factory.mktemp("ops") / "cuda_op_kernels", "cuda")


@pytest.mark.gpu
@pytest.mark.parametrize("label,op,attrs,xs", CUDA_VARIANTS, ids=[v[0] for v in CUDA_VARIANTS])
def test_kernel_matches_reference(label, op, attrs, xs, executed):
    check_variant(op, attrs, xs, executed[label], CUDA_TOL, inf_or_nan=label in INF_OR_NAN)
