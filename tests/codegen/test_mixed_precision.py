"""bf16-mixed and fp16-mixed training steps of the generated CPU executor against the reference
interpreter's emulated low-type step, within the bounds tests/codegen/mixed_cases.py derives;
the float32 fallback where the CPU has no bf16 instructions; the Cast kernels; bfloat16 feeds
from torch.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.codegen.helpers import build_module
from tests.codegen.mixed_cases import CASES, check_casts, check_mixed_step


@pytest.mark.parametrize(("model", "precision"), CASES)
def test_bf16_mixed_step_matches_emulated_reference(model, precision, tmp_path_factory):
    """(and fp16-mixed, with float16's unit roundoff in the same bounds)"""
    ex = check_mixed_step(model, precision, tmp_path_factory.mktemp("mixed") / model)
    # stats() names what oneDNN runs for each low-precision op (a bf16 kernel, or the float32
    # fallback's reorders around a float32 one)
    impls = {d["name"]: d.get("impl", "") for d in ex.stats()["ops"]
             if d["op"] in ("Conv2D", "MatMul")}
    assert impls and all(impls.values()), impls
    if os.environ.get("ONEDNN_MAX_CPU_ISA") == "AVX2":  # the fallback below: no bf16 kernels
        assert not any("bf16" in v or "amx" in v for v in impls.values()), impls


def test_float32_fallback_where_the_isa_has_no_bf16(tmp_path):
    """On a CPU without bf16 or f16 support (oneDNN limited to AVX2 here, as on an AVX2-only or
    older AMD machine), the same steps still match the emulated references: the convolutions and
    matmuls (attention's over permuted views too) compute in float32 between converting
    reorders (templates/cpu/runtime/kernels)."""
    env = {**os.environ, "ONEDNN_MAX_CPU_ISA": "AVX2"}
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--basetemp",
         str(tmp_path / "t"), f"{Path(__file__)}::test_bf16_mixed_step_matches_emulated_reference",
         "-k", "lenet or gpt"], cwd=root, env=env, capture_output=True, text=True,
        timeout=1200)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "4 passed" in done.stdout  # bf16-mixed and fp16-mixed; gpt: permuted views too


def test_cast_kernels_round_as_ml_dtypes(tmp_path):
    """Cast float32 -> bfloat16 / float16 -> float32 through the CPU executor: bit-identical to
    ml_dtypes' rounding (check_casts); the bfloat16 value comes back to Python as a numpy
    bfloat16 array. A float32 subnormal (below 2^-126) may become a zero of its sign, as the
    AVX512_BF16 conversion instruction (VCVTNEPS2BF16) flushes denormal inputs where ml_dtypes
    keeps a bfloat16 subnormal; training never meets values that small."""
    check_casts(tmp_path / "casts")


def test_bfloat16_feeds_from_torch_over_dlpack(tmp_path):
    """A bfloat16 input takes a torch.bfloat16 tensor (DLPack); a numpy bfloat16 array cannot
    cross (numpy exports no bfloat16 over DLPack or the buffer protocol) and is refused, naming
    the feed, rather than misread (pass torch tensors, or feed float32 and cast in the graph)."""
    import ml_dtypes
    torch = pytest.importorskip("torch")

    from planner.graph.builder import GraphBuilder

    b = GraphBuilder("bf16_feed")
    x = b.input("x", (3, 5), "bfloat16")
    module = build_module(b.build(outputs=[b.op("Cast", [x], {"to": "float32"}, name="y")]),
                          tmp_path / "feed")
    t = torch.randn(3, 5).to(torch.bfloat16)
    got = module.Executor().forward({"x": t})["y"]
    assert np.array_equal(got, t.float().numpy())
    with pytest.raises(ValueError, match="feed 'x'"):
        module.Executor().forward({"x": np.zeros((3, 5), ml_dtypes.bfloat16)})
