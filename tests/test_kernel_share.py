"""`planner show --kernels`: each op's share of its roofline bound in the step beside its kernel's
alone (planner/report/kernel_share.py), against figures counted here from the graph's shapes,
the table's samples and the stats given."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from planner.costs.analytical import op_work
from planner.costs.records import CostEntry, CostTable, CpuSample
from planner.costs.signature import graph_signatures
from planner.pipeline import plan
from planner.report.kernel_share import format_kernel_shares, kernel_shares
from planner.target import preset
from planner.zoo import build


@pytest.fixture(scope="module")
def mlp_plan():
    target = preset("xeon-8180")
    return plan(build("mlp", batch=64, hidden=[256, 128], in_features=96, classes=10),
                target), target


def alone_table(p, seconds_of) -> CostTable:
    """A table holding, for each op's signature, a kernel-alone sample at the op's placement
    of seconds_of(op)."""
    signatures = graph_signatures(p.graph)
    entries = {}
    for op in p.ops:
        s = signatures[op.name]
        entries.setdefault(s.key, (s, []))[1].append(
            CpuSample(threads=op.threads, affinity=op.affinity, seconds=seconds_of(op)))
    return CostTable(target=p.target.name, entries=tuple(
        CostEntry(signature=s, cpu=tuple({(c.threads, c.affinity): c for c in cs}.values()))
        for s, cs in entries.values()))


def test_a_gemm_is_set_against_its_flops_and_its_kernel_alone(mlp_plan):
    p, target = mlp_plan
    types = {t.name: t.shape for t in p.graph.tensors}
    table = alone_table(p, lambda op: 1e-5)
    k = kernel_shares(p, target, table)
    rows = {r.name: r for r in k.ops}
    signatures = graph_signatures(p.graph)
    ops = {op.name: op for op in p.ops}
    gemms = [n for n in p.graph.nodes if n.op == "MatMul"]
    assert gemms
    for n in gemms:
        r, op = rows[n.name], ops[n.name]
        # 2 M K N per (M, K) x (K, N) product, from the shapes alone.
        flops = 2 * math.prod(types[n.inputs[0]]) * types[n.inputs[1]][-1] \
            if not n.attrs.get("transpose_b") else \
            2 * math.prod(types[n.inputs[0]]) * types[n.inputs[1]][0]
        assert r.flops == flops
        compute = flops / (target.cpu.peak_flops * op.threads / target.cores)
        memory = op_work(signatures[n.name]).bytes / target.cpu.memory_bandwidth
        assert r.bound_seconds == pytest.approx(max(compute, memory), rel=1e-12)
        assert r.step_seconds == pytest.approx(op.end - op.start, rel=1e-12)
        assert r.alone_seconds == 1e-5
        assert r.alone_share == pytest.approx(r.bound_seconds / 1e-5, rel=1e-12)
        assert r.gap == pytest.approx((op.end - op.start) / 1e-5, rel=1e-12)
    # Heaviest in the step first; the sums over the ops that have a kernel alone.
    assert [r.step_seconds for r in k.ops] == sorted((r.step_seconds for r in k.ops),
                                                      reverse=True)
    assert k.alone == pytest.approx(1e-5 * len(k.ops), rel=1e-12)
    assert k.in_step == pytest.approx(sum(r.step_seconds for r in k.ops), rel=1e-12)
    assert k.bound == pytest.approx(sum(r.bound_seconds for r in k.ops), rel=1e-12)


def test_measured_times_in_the_step_replace_the_predicted(mlp_plan):
    # An executor's stats(): every op twice its kernel alone is a gap of 2 on every op, and
    # the plan's share of the busy time is half of it.
    p, target = mlp_plan
    table = alone_table(p, lambda op: 1e-5 * (1 + op.order % 3))
    alone = {op.name: 1e-5 * (1 + op.order % 3) for op in p.ops}
    k = kernel_shares(p, target, table, measured={n: 2 * s for n, s in alone.items()})
    assert k.measured and all(r.gap == pytest.approx(2.0, rel=1e-12) for r in k.ops)
    assert k.in_step == pytest.approx(2 * k.alone, rel=1e-12)
    text = format_kernel_shares(k)
    assert "measured (stats)" in text and "the plan's gap" in text


def test_without_a_kernel_alone_the_ops_are_still_set_against_their_bounds(mlp_plan):
    p, target = mlp_plan
    k = kernel_shares(p, target, None)
    assert k.ops and all(r.alone_seconds is None and r.gap is None for r in k.ops)
    assert all(r.step_share == pytest.approx(r.bound_seconds / r.step_seconds) for r in k.ops)
    assert "--probe" in format_kernel_shares(k)


def show(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "planner.cli", "show", *args],
                          capture_output=True, text=True)


def test_show_kernels_with_a_table_and_stats(tmp_path, mlp_plan):
    p, _ = mlp_plan
    path, costs, stats = tmp_path / "p.json", tmp_path / "c.json", tmp_path / "s.json"
    path.write_text(p.to_json())
    costs.write_text(alone_table(p, lambda op: 1e-5).to_json())
    first = p.ops[0].name
    stats.write_text(json.dumps({"ops": [{"name": first, "calls": 4, "seconds": 3e-5}]}))
    out = show(str(path), "--kernels", "--costs", str(costs), "--stats", str(stats), "--json")
    assert out.returncode == 0, out.stderr
    kernels = json.loads(out.stdout)["kernels"]
    # Only the op that ran is in a measured step.
    assert [r["name"] for r in kernels["ops"]] == [first]
    assert kernels["ops"][0]["gap"] == pytest.approx(3.0, rel=1e-12)
    text = show(str(path), "--kernels", "--costs", str(costs))
    assert text.returncode == 0 and "ops against their kernels alone" in text.stdout


@pytest.mark.parametrize("args, says", [
    (["--stats", "S"], "go with --kernels"),
    (["--kernels", "--probe"], "measures kernels on this host"),
    (["--kernels", "--stats", "S"], "names no op of the plan"),
])
def test_show_kernels_refusals_in_one_line(tmp_path, mlp_plan, args, says):
    p, _ = mlp_plan
    path = tmp_path / "p.json"
    path.write_text(p.to_json())
    (tmp_path / "S").write_text(json.dumps({"ops": [{"name": "no such op", "calls": 1,
                                                     "seconds": 1.0}]}))
    out = show(str(path), *[str(tmp_path / a) if a == "S" else a for a in args])
    assert out.returncode != 0
    assert says in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr


def test_probe_measures_every_kernel_alone_on_this_host(tmp_path):
    """The benchdnn-style probe for real: a host plan's kernels run alone now, each op with
    a time alone at its own placement."""
    path = tmp_path / "p.json"
    subprocess.run([sys.executable, "-m", "planner.cli", "plan",
                    "zoo:mlp?batch=16&hidden=32&in_features=24&classes=4", "--train", "sgd",
                    "--target", "host", "--costs", "analytical", "-o", str(path)],
                   check=True, capture_output=True)
    out = show(str(path), "--kernels", "--probe", "--json")
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)["kernels"]["ops"]
    assert rows and all(r["alone_seconds"] is not None and r["alone_seconds"] > 0
                        for r in rows)
