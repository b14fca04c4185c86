"""planner show's roofline: each family's FLOPs, achieved FLOP/s and share of peak, and the step's
roofline bound, against figures counted here from the graph's shapes (planner.report.roofline)."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest

from planner.pipeline import plan
from planner.report.roofline import family_of, format_roofline, roofline
from planner.target import preset
from planner.zoo import build


@pytest.fixture(scope="module")
def mlp_plan():
    target = preset("xeon-8180")
    return plan(build("mlp", batch=8, hidden=[64, 32], in_features=48, classes=10), target), target


def test_gemm_flops_and_shares_are_the_shapes_and_times(mlp_plan):
    p, target = mlp_plan
    types = {t.name: t.shape for t in p.graph.tensors}
    gemms = [n for n in p.graph.nodes if n.op == "MatMul"]
    assert gemms
    # 2 M K N per (M, K) x (K, N) product, from the shapes alone.
    counted = sum(2 * math.prod(types[n.inputs[0]]) * types[n.inputs[1]][-1] for n in gemms)
    r = roofline(p, target)
    [fam] = [f for f in r.families if f.family == "GEMMs"]
    assert fam.ops == len(gemms) and fam.flops == counted
    ops = {op.name: op for op in p.ops}
    seconds = sum(ops[n.name].end - ops[n.name].start for n in gemms)
    assert fam.seconds == pytest.approx(seconds, rel=1e-12)
    assert fam.achieved_flops == pytest.approx(counted / seconds, rel=1e-12)
    reachable = sum((ops[n.name].end - ops[n.name].start) * target.cpu.peak_flops
                    * ops[n.name].threads / target.cores for n in gemms)
    assert fam.peak_share == pytest.approx(counted / reachable, rel=1e-12)
    assert 0 < fam.peak_share <= 1.0


def test_the_roofline_bounds_the_step(mlp_plan):
    p, target = mlp_plan
    r = roofline(p, target)
    assert r.compute_seconds == pytest.approx(r.flops / target.cpu.peak_flops, rel=1e-12)
    assert r.memory_seconds == pytest.approx(r.bytes / target.cpu.memory_bandwidth, rel=1e-12)
    assert r.bound_seconds == max(r.compute_seconds, r.memory_seconds)
    assert r.bound_seconds <= p.summary.step_seconds
    assert r.peak_share == pytest.approx(r.flops / target.cpu.peak_flops / r.step_seconds)
    assert sum(f.ops for f in r.families) == len(p.ops)
    text = format_roofline(r)
    assert "roofline" in text and "GEMMs" in text and "of peak" in text


def test_families_by_cost_class():
    assert [family_of(o) for o in ("Conv2D", "MatMul", "Relu", "NoSuchOp")] == \
        ["convs", "GEMMs", "pointwise", "other"]


def test_show_prints_the_share_of_peak(tmp_path, mlp_plan):
    p, _ = mlp_plan
    path = tmp_path / "p.json"
    path.write_text(p.to_json())
    out = subprocess.run([sys.executable, "-m", "planner.cli", "show", str(path)],
                         capture_output=True, text=True, check=True).stdout
    assert "of peak" in out and "roofline" in out


def test_measured_times_replace_the_predicted_ones(mlp_plan):
    # A run's op seconds (an executor's stats()) and step: each op taking twice its predicted
    # time halves every achieved rate; the FLOPs and the bound stay the graph's.
    p, target = mlp_plan
    predicted = roofline(p, target)
    slower = {op.name: 2 * (op.end - op.start) for op in p.ops}
    r = roofline(p, target, measured=slower, step_seconds=2 * p.summary.step_seconds)
    assert r.flops == predicted.flops and r.bound_seconds == predicted.bound_seconds
    assert r.achieved_flops == pytest.approx(predicted.achieved_flops / 2, rel=1e-12)
    for f, g in zip(r.families, predicted.families, strict=True):
        assert f.peak_share == pytest.approx(g.peak_share / 2, rel=1e-12)
