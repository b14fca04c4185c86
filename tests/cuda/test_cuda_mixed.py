"""Mixed precision on the GPU (bf16-mixed, fp16-mixed): the generated CUDA executor's low-type
kernels (cuDNN convolutions and cuBLAS GEMMs in bfloat16 / float16 with float32 compute, batch
norm with float32 statistics, pooling, the generated pointwise kernels, Cast, the loss-scaling
ops) against the reference interpreter's emulated low-type step, with the CPU executor's checks
and tolerances (tests/codegen/mixed_cases.py, mixed_kernel_cases.py, loss_scale_check.py):
each value within 2u|want| + 2^-16 max|want| (kernels), the loss within 4u and every update
within 4u of its largest element (steps), u = 2^-8 for bfloat16 and 2^-11 for float16.
Marked gpu: skipped without one; bench/device/gpu_tests.sh runs them on a lent GPU."""

from __future__ import annotations

import numpy as np
import pytest

from tests.codegen.loss_scale_check import check_loss_scaling
from tests.codegen.mixed_cases import CASES, check_casts, check_mixed_step
from tests.codegen.mixed_kernel_cases import OPS, check_kernel, kernel_results

pytestmark = pytest.mark.gpu

UNIT = {"bfloat16": 2.0 ** -8, "float16": 2.0 ** -11}


@pytest.mark.parametrize(("model", "precision"), CASES)
def test_mixed_step_matches_emulated_reference(model, precision, tmp_path_factory):
    ex = check_mixed_step(model, precision, tmp_path_factory.mktemp("mixed") / model, "cuda")
    # every convolution runs a cuDNN algorithm of the low type (stats() names it)
    algos = {d["name"]: d.get("algorithm", "") for d in ex.stats()["ops"]
             if d["op"].startswith("Conv2D")}
    assert all(algos.values()), algos


@pytest.fixture(scope="module", params=sorted(UNIT))
def low_results(request, tmp_path_factory):
    low = request.param
    return low, kernel_results(tmp_path_factory.mktemp(f"k_{low}") / "k", "cuda", low)


@pytest.mark.parametrize("op", OPS)
def test_low_kernel_matches_emulated_reference(op, low_results):
    low, results = low_results
    check_kernel(op, results, low, UNIT[low])


def test_casts_round_as_ml_dtypes(tmp_path):
    check_casts(tmp_path / "casts", "cuda")


def test_loss_scaling_skips_the_overflowing_step(tmp_path):
    check_loss_scaling(tmp_path / "loss_scale", "cuda")


def test_bfloat16_feeds_from_torch_cuda_tensors(tmp_path):
    """A torch.bfloat16 CUDA tensor feeds a bfloat16 input over DLPack (no host copy), and a
    bfloat16 result comes back as an ml_dtypes.bfloat16 numpy array of the same bits."""
    import ml_dtypes
    torch = pytest.importorskip("torch")

    from planner.graph.builder import GraphBuilder
    from tests.codegen.helpers import build_module

    b = GraphBuilder("bf16_feed")
    x = b.input("x", (3, 5), "bfloat16")
    y = b.op("Relu", [x], name="y")
    module = build_module(b.build(outputs=[y, b.op("Cast", [x], {"to": "float32"}, name="f")]),
                          tmp_path / "feed", "cuda")
    t = torch.randn(3, 5, device="cuda").to(torch.bfloat16)
    got = module.Executor().forward({"x": t})
    assert got["y"].dtype == ml_dtypes.bfloat16
    assert np.array_equal(got["y"].view(np.uint16),
                          torch.relu(t).cpu().view(torch.int16).numpy().view(np.uint16))
    assert np.array_equal(got["f"], t.float().cpu().numpy())
