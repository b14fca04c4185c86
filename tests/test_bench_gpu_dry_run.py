"""bench_gpu.py --modules, without a GPU: a module a PyTorch user has (the GPT block of
bench/torch_modules.py) is exported through ONNX, imported, given its loss and planned, and
the dry run says what it would time, measuring nothing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _dry_run(*args: str) -> list[str]:
    """The lines bench_gpu.py prints with `args` and --dry-run (it must exit 0)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "bench_gpu.py"), *args,
                          "--dry-run"], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.splitlines()


def test_dry_run_plans_an_exported_module_and_lists_the_runs():
    lines = _dry_run("--modules", "gpt_block")
    assert lines[0] == "dry run for target h100-80gb: nothing is measured"
    assert lines[1].startswith("gpt_block input [8, 128, 768], loss mse: ")
    # Six in the forward (qkv, scores, weighted values, proj, fc, out), two each backward.
    assert "MatMul x18" in lines[1] and "plan predicts" in lines[1]
    assert lines[2] == ("  would time: ours streams, ours 1 stream, ours graph, torch eager, "
                        "torch graph, torch.compile max-autotune")


def test_dry_run_plans_a_mixed_precision_zoo_model():
    """--precision: our graph gets the policy's casts (and fp16's loss scaling), PyTorch's side
    runs under autocast of the same type."""
    lines = _dry_run("--models", "wide_deep", "--precision", "fp16-mixed", "--no-compile")
    assert lines[0] == "dry run for target h100-80gb, precision fp16-mixed: nothing is measured"
    assert lines[1].startswith("wide_deep {'batch': 256}: ") and " float16 tensors" in lines[1]
    assert lines[2] == ("  would time: ours streams, ours 1 stream, ours graph, ours graph 1 "
                        "stream, ours host feeds, torch eager under autocast(float16)")


def test_dry_run_plans_a_tf32_zoo_model():
    """--precision tf32: float32 tensors with the graph's math marked, PyTorch with TF32 on."""
    lines = _dry_run("--models", "wide_deep", "--precision", "tf32", "--no-compile")
    assert lines[0] == "dry run for target h100-80gb, precision tf32: nothing is measured"
    assert lines[1].startswith("wide_deep {'batch': 256}: ")
    assert " ops (0 casts; float32 tensors; TF32 math); plan predicts " in lines[1]
    assert lines[2] == ("  would time: ours streams, ours 1 stream, ours graph, ours graph 1 "
                        "stream, ours host feeds, torch eager with allow_tf32")
