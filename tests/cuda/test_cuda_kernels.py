"""Every CUDA kernel against its op's numpy reference, on clean inputs and on inputs holding
NaN, +inf and -inf (tests/codegen/op_cases.py, run by the CUDA executor)."""

from __future__ import annotations

import numpy as np
import pytest

from codegen import support
from codegen.backends import RUNTIMES
from planner.ops.collective import COLLECTIVE_OPS
from tests.codegen.op_cases import CASES, VARIANTS, check_variant, nodes_graph, run_variants

# float32 kernels: a few ulps per element; CUDA's expf / erff / tanhf are within 2 ulps and
# cuDNN's convolution and pooling sums run in another order than numpy's (still float32,
# TF32 off), so the same bound as the CPU's oneDNN kernels.
CUDA_TOL = 2e-6 * 8

# Inputs whose infinities may come out as NaN, and why: cuDNN's batch norm folds the scale into
# one multiply-add per element (x * (scale * invstd) + (bias - mean * scale * invstd)), so an
# infinite scale meets inf - inf where the reference's scale * (x - mean) * invstd gives +-inf.
# Every training-mode case with its scale poisoned (BatchNorm's input 1, BatchNormGrad's 2).
INF_OR_NAN = {f"{v[0]}.nan{1 if v[1] == 'BatchNorm' else 2}" for v in VARIANTS
              if v[1] in ("BatchNorm", "BatchNormGrad") and ".nan" not in v[0]
              and v[2].get("training", True)}

# Inputs whose non-finite outputs may be any of NaN, +inf and -inf: cuFFT's butterflies and
# twiddles meet a poisoned point in another order than pocketfft's (the reference's), which
# decides where inf * 0 or inf - inf gives NaN; finite outputs stay where the reference's are.
ANY_NONFINITE = {v[0] for v in VARIANTS if v[1] == "FFT" and ".nan" in v[0]}

# The cases of the ops the CUDA runtime has (gradient accumulation is the CPU executor's;
# SGD's dampening and Adam's amsgrad, an update of another arity, are the CPU's too:
# codegen.backends refuses them on CUDA; so are a sum's and a batch norm gradient's folded
# Relu and ReluGrad, which only CPU steps make and the CUDA runtime refuses, and an update
# whose momentum or beta1 is a run-time input (a cycled one, planner/torch/optimizers.py).
CUDA_VARIANTS = [v for v in VARIANTS if v[1] in RUNTIMES["cuda"].ops
                 and not (v[2].get("dampening") or v[2].get("amsgrad")
                          or v[2].get("momentum_input"))
                 and not (v[1] in ("Add", "AddN", "BatchNormGrad") and v[2].get("activation"))]


def test_the_cases_cover_every_cuda_op():
    # The collectives need a process group: tests/cuda/test_cuda_data_parallel.py runs them.
    ops = RUNTIMES["cuda"].ops - COLLECTIVE_OPS
    assert set(ops) <= set(CASES), sorted(set(ops) - set(CASES))


def test_the_cuda_executor_takes_every_case():
    # Device-free: the one graph the GPU test builds passes the CUDA runtime's own admission
    # check (a case of an arity its generated kernel lacks stopped the whole GPU run once).
    graph, _, _ = nodes_graph("op_kernels", CUDA_VARIANTS)
    support.check(graph, RUNTIMES["cuda"], "9.0")


# The kernels never run on a GPU yet (codegen.backends' not_yet_run_ops: cuFFT's, cuSOLVER's)
# run in an executor of their own: one that fails at load (a library call at plan or
# workspace time) takes only their cases with it, not every kernel's.
NOT_YET_RUN = RUNTIMES["cuda"].not_yet_run_ops


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    return run_variants(tmp_path_factory.mktemp("ops") / "cuda_op_kernels", "cuda",
                        [v for v in CUDA_VARIANTS if v[1] not in NOT_YET_RUN])


@pytest.fixture(scope="module")
def executed_new(tmp_path_factory):
    return run_variants(tmp_path_factory.mktemp("ops") / "cuda_new_kernels", "cuda",
                        [v for v in CUDA_VARIANTS if v[1] in NOT_YET_RUN])


@pytest.mark.gpu
@pytest.mark.parametrize("label,op,attrs,xs", CUDA_VARIANTS, ids=[v[0] for v in CUDA_VARIANTS])
def test_kernel_matches_reference(label, op, attrs, xs, request):
    got = request.getfixturevalue("executed_new" if op in NOT_YET_RUN else "executed")[label]
    if op == "Cast" and np.dtype(attrs["to"]).kind == "i" and xs[0].dtype.kind == "f":
        # A float NaN or infinity cast to an integer is undefined behaviour in C++, and PyTorch's
        # own CPU and CUDA backends give different integers for it: those elements (as zeros,
        # whose cast is 0) are left out.
        finite = np.isfinite(xs[0])
        xs, got = [np.where(finite, xs[0], 0).astype(xs[0].dtype)], [np.where(finite, got[0], 0)]
    check_variant(op, attrs, xs, got, CUDA_TOL, inf_or_nan=label in INF_OR_NAN,
                  any_nonfinite=label in ANY_NONFINITE)
