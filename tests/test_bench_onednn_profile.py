"""bench/onednn_profile.py: its sums of oneDNN's verbose lines (only the marked steps, per step,
reorders by layout pair), and, in the slow tier, a real run on the smallest zoo convnet."""

from __future__ import annotations

import doctest
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench" / "onednn_profile.py"


def _module():
    spec = importlib.util.spec_from_file_location("onednn_profile", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_sums_only_the_marked_steps_per_step():
    m = _module()
    assert doctest.testmod(m).failed == 0
    conv = "onednn_verbose,exec,cpu,convolution,jit,backward_data,md,,,p,2.0"
    reorder = ("onednn_verbose,exec,cpu,reorder,jit:uni,undef,src_f32::blocked:aBcd16b::f0 "
               "dst_f32::blocked:abcd::f0,,,4x16x8x8,1.0")
    lines = [conv, m.START, conv, reorder, reorder, "onednn_verbose,info,x", m.END, conv]
    kinds, reorders = m.summed(lines, 2)
    assert kinds == {"convolution backward_data": [1.0, 0.5], "reorder": [1.0, 1.0]}
    assert reorders == {"aBcd16b -> abcd": [1.0, 1.0]}


@pytest.mark.slow
def test_a_real_run():
    run = subprocess.run([sys.executable, str(BENCH), "--models", "resnet18", "--steps", "1"],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "convolution forward_training" in run.stdout and "failed" not in run.stdout
