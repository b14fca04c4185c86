"""bench/bench_vs_compile.py runs end to end at its tiniest (the encoder, one round of one step,
each engine in a process of its own: ours, eager, Inductor and torch.compile(backend="planner")),
and a bad model name is a one-line error."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

BENCH = Path(__file__).resolve().parents[1] / "bench" / "bench_vs_compile.py"


@pytest.mark.slow  # a minute: five engines, each in a process of its own
def test_tiny_run():
    run = subprocess.run([sys.executable, str(BENCH), "--models", "transformer_encoder",
                          "--rounds", "1", "--steps", "1"],
                         capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-2000:]
    row = next(line.split() for line in run.stdout.splitlines()
               if line.startswith("transformer_encoder"))
    ours, eager, compiled, backend, with_step, eager_ratio, compile_ratio, backend_ratio = \
        map(float, row[1:])
    assert min(ours, eager, compiled, backend, with_step) > 0
    # The table's times are rounded to 0.1 ms (steps of ~10 ms: 1% each), its ratios to 0.01.
    assert eager_ratio == pytest.approx(eager / ours, rel=0.025, abs=0.01)
    assert compile_ratio == pytest.approx(compiled / ours, rel=0.025, abs=0.01)
    assert backend_ratio == pytest.approx(compiled / backend, rel=0.025, abs=0.01)
    rows = [line.split() for line in run.stdout.splitlines()
            if line.startswith("transformer_encoder")]
    # each engine's achieved GFLOP/s: the plan's step FLOPs over that engine's step
    gflop, *figures = rows[1][1:]
    achieved = [float(v) for v in figures[0::2]]
    assert float(gflop) > 0 and all(v.endswith("%") for v in figures[1::2])
    for rate, ms in zip(achieved, (ours, eager, compiled, backend, with_step), strict=True):
        assert rate == pytest.approx(float(gflop) / ms * 1e3, rel=0.05, abs=0.1)
    firsts = rows[2]
    assert len(firsts) == 6 and min(map(float, firsts[1:])) > 0  # each engine's first step


def test_an_unknown_model_is_a_one_line_error():
    run = subprocess.run([sys.executable, str(BENCH), "--models", "nope"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode != 0
    assert run.stderr.strip().splitlines() == [
        "--models: unknown model 'nope' (one of mobilenet_v2, resnet18, transformer_encoder, moe, "
        "gnn, dlrm, mae, stochastic_depth, focal, gpt or fresh)"]


def test_an_unknown_engine_is_a_one_line_error():
    run = subprocess.run([sys.executable, str(BENCH), "--engines", "eager,nope"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode != 0
    assert run.stderr.strip().splitlines() == [
        "--engines: a comma-separated subset of ours, eager, compile, backend, backend+step"]
