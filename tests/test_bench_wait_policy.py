"""bench/bench_wait_policy.py runs end to end at its tiniest (wide_deep's twin, and its
executors at two spin counts, one round of one step each), and bad arguments are one-line
errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from codegen.backends import CPU_LOAD_ENVIRONMENT

pytest.importorskip("torch")

BENCH = Path(__file__).resolve().parents[1] / "bench" / "bench_wait_policy.py"
PACKAGE_SPINS = CPU_LOAD_ENVIRONMENT["GOMP_SPINCOUNT"]


@pytest.mark.slow
def test_tiny_run():
    run = subprocess.run([sys.executable, str(BENCH), "--models", "wide_deep", "--rounds", "1",
                          "--steps", "1"], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    row = next(line for line in run.stdout.splitlines() if line.startswith("| wide_deep"))
    unset, passive, ratio = (float(c) for c in row.strip("| ").split(" | ")[1:])
    assert min(unset, passive) > 0
    # Times rounded to 0.1 ms (steps of a few ms: up to ~3% each), the ratio to 0.01.
    assert ratio == pytest.approx(passive / unset, rel=0.06, abs=0.01)


@pytest.mark.slow
def test_tiny_executor_run():
    run = subprocess.run([sys.executable, str(BENCH), "--engine", "executor", "--models",
                          "wide_deep", "--spins", f"0,{PACKAGE_SPINS}", "--rounds", "1",
                          "--steps", "1"],
                         capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-2000:]
    rows = [line for line in run.stdout.splitlines() if line.startswith("| wide_deep")]
    assert [r.split(" | ")[1] for r in rows] == ["uniform", "optimized"]
    for row in rows:
        assert all(float(c) > 0 for c in row.strip("| ").split(" | ")[2:])
    assert f"| model | plan | 0 ms | {PACKAGE_SPINS}* ms |" in run.stdout


def test_bad_spin_counts_are_a_one_line_error():
    run = subprocess.run([sys.executable, str(BENCH), "--engine", "executor", "--spins", "a,1"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode != 0
    assert run.stderr.strip().splitlines() == [
        "--spins: whole numbers separated by commas, got 'a,1'"]


def test_an_unknown_model_is_a_one_line_error():
    run = subprocess.run([sys.executable, str(BENCH), "--models", "nope"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode != 0
    assert run.stderr.strip().splitlines() == [
        "unknown model 'nope'; known: lstm, dcgan, inception_v3, resnet-50, wide_deep"]
