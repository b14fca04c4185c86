"""bench/semantics_sweep.py: fresh training programs through planner.torch.trainer and
torch.compile(model, backend="planner"), each held to eager PyTorch float32 with float64 as
the noise floor (the sweep's `compare`: losses to 1e-4 relative, tensors within 10x PyTorch's
own float32 error plus 16 ulps). No program may be WRONG: a result off that bound, or an
error that is not one line. Two representative programs run in CI (a cycled-betas AdamW
schedule, and BatchNorm with an eval() validation), the whole sweep in the slow tier.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from bench import semantics_sweep as sweep  # noqa: E402

FAST = ["adamw_onecycle_betas", "batchnorm_mlp_eval_validation"]


def _check(verdicts):
    wrong = [f"{v.program}/{v.entry}: {v.detail}" for v in verdicts if v.verdict == "WRONG"]
    assert wrong == []
    for v in verdicts:
        assert v.verdict in ("MATCH", "REFUSED")
        if v.verdict == "REFUSED":
            assert v.detail and "\n" not in v.detail


@pytest.mark.ci_sample
def test_two_programs_match_eager_through_both_entry_points(tmp_path):
    verdicts = sweep.sweep(FAST, steps=4, out_dir=tmp_path)
    assert [(v.program, v.entry) for v in verdicts] == [
        (p, e) for p in FAST for e in ("trainer", "compile")]
    _check(verdicts)
    assert all(v.verdict == "MATCH" for v in verdicts), [v.detail for v in verdicts]


def test_the_comparison_tells_a_wrong_result():
    # the sweep's verdict must be able to fail: the same run with a parameter nudged by
    # 1e-4 of its scale (far above float32 noise), or a loss off by 1e-3, is off
    program = sweep.BY_NAME["focal_loss"]
    f32 = sweep.eager(program, 2, torch.float32)
    f64 = sweep.eager(program, 2, torch.float64)
    assert sweep.compare(f32, f32, f64)[0] == []
    nudged = sweep.Outcome(list(f32.losses), dict(f32.state))
    key = next(iter(nudged.state))
    nudged.state[key] = nudged.state[key] + np.float32(1e-4) * np.abs(nudged.state[key]).max()
    assert sweep.compare(nudged, f32, f64)[0]
    off = sweep.Outcome([x * 1.001 for x in f32.losses], f32.state)
    assert sweep.compare(off, f32, f64)[0]


@pytest.mark.slow
def test_every_program_matches_or_is_refused_in_one_line(tmp_path):
    verdicts = sweep.sweep(None, steps=4, out_dir=tmp_path)
    assert len(verdicts) == 2 * len(sweep.PROGRAMS) >= 30
    _check(verdicts)
