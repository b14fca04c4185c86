"""`planner fit`, the plan hook and the reports: searches that end where plans stop fitting,
clear errors, and a Fig. 10 chart."""

from __future__ import annotations

import argparse
import json

import pytest

from planner.cli.fit import add_memory_commands
from planner.costs import CostModel
from planner.errors import UserError
from planner.fit import fit, largest
from planner.memory import InfeasibleBudget, MemoryOptions, parse_bytes
from planner.memory.gpu import technique_curves
from planner.pipeline import PlanOptions, plan
from planner.report.memory import (
    format_memory,
    graph_order,
    memory_curves,
    memory_report,
    memory_svg,
)
from planner.target import preset
from tests.memory.conftest import toy_target, training

GPU = preset("k40c-12gb")
MLP = "zoo:mlp?hidden=64&in_features=32&classes=4"


def test_largest_bisects_to_the_boundary():
    calls = []

    def fits(k: int) -> bool:
        calls.append(k)
        return k <= 37

    assert largest(fits, 1) == 37
    assert len(calls) < 20
    assert largest(lambda k: False, 1) == 0


def test_fit_batch_is_the_largest_that_plans():
    result = fit(MLP, GPU, 1 << 20, vary="batch", multiple=8)
    assert result.value % 8 == 0 and result.peak_bytes <= 1 << 20
    by_value = {t.value: t for t in result.trials}
    assert by_value[result.value].fits and not by_value[result.value + 8].fits
    # the next batch reports a smallest budget, a lower bound (planner.fit.peak_and_step): it
    # need not exceed 1 MiB (two more 4-byte scalars, the learning rate and weight decay,
    # moved this boundary to a batch whose bound is 1047596 bytes)
    assert by_value[result.value + 8].smallest_bytes > by_value[result.value].peak_bytes


def test_fit_depth_grows_resnet():
    spec = "zoo:resnet?batch=2&image=32&width=0.125&classes=4"
    # ResNet-50 needs about 3.2 MB here and ResNet-68 4.1 MB.
    small = fit(spec, GPU, 3_600_000, vary="depth")
    assert 50 <= small.value < 68 and (small.value - 2) % 3 == 0
    assert not next(t for t in small.trials if t.value == small.value + 3).fits
    with pytest.raises(ValueError, match="grows a ResNet"):
        fit(MLP, GPU, 1 << 20, vary="depth")


def test_fit_on_a_cpu_target_uses_liveness():
    result = fit("zoo:lenet?width=0.5", toy_target(), 2 << 20, vary="batch", multiple=4)
    assert result.value > 0 and result.peak_bytes <= 2 << 20


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    add_memory_commands(parser.add_subparsers())
    args = parser.parse_args(argv)
    return args.run(args)


def test_fit_command(capsys):
    assert run(["fit", MLP, "--target", "k40c-12gb", "--budget", "1MiB", "--multiple", "8",
                "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["vary"] == "batch" and data["value"] > 0
    assert run(["fit", MLP, "--target", "k40c-12gb", "--budget", "1MiB", "--multiple",
                "8"]) == 0
    assert f"largest batch: {data['value']}" in capsys.readouterr().out
    with pytest.raises(UserError, match="must be a zoo spec"):
        run(["fit", "model.onnx", "--target", "k40c-12gb", "--budget", "1GiB"])
    with pytest.raises(UserError, match="--budget"):
        run(["fit", MLP, "--target", "k40c-12gb", "--budget", "lots"])


def test_byte_counts():
    assert parse_bytes("11GiB") == 11 << 30 and parse_bytes("12 GB") == 12 * 10**9
    with pytest.raises(ValueError, match="cannot read"):
        parse_bytes("11 parsecs")


def plan_with_memory(graph, model, budget=None):
    """The pipeline's plan under a memory budget (bytes, or text as --memory-budget takes)."""
    if isinstance(budget, str):
        budget = parse_bytes(budget)
    return plan(graph, model.target, model.table,
                PlanOptions(memory=MemoryOptions(budget_bytes=budget)))


def test_plan_hook_for_gpu_and_cpu_targets():
    g = training("alexnet", "sgd", batch=8, image=63, width=0.125, classes=4)
    gpu = plan_with_memory(g, CostModel(GPU), budget="64MiB")
    assert gpu.backend == "cuda" and gpu.summary.memory.arena_bytes <= 64 << 20
    cpu = plan_with_memory(g, CostModel(toy_target()))
    assert cpu.backend == "cpu" and cpu.summary.memory.budget_bytes is None
    with pytest.raises(InfeasibleBudget, match="smallest feasible budget"):
        plan_with_memory(g, CostModel(GPU), budget=1024)


def test_reports_and_chart():
    g = training("alexnet", "momentum", batch=16, image=63, width=0.125, classes=4)
    free = plan_with_memory(g, CostModel(GPU)).summary.memory
    plan = plan_with_memory(g, CostModel(GPU), budget=(free.per_op_bound_bytes
                                                       + free.liveness_load_bytes) // 2)
    data = json.loads(plan.to_json())
    report = memory_report(data)
    assert report["arena_bytes"] == plan.summary.memory.arena_bytes
    assert report["added_ops"].get("offload", 0) == plan.summary.memory.offloaded_tensors
    assert "per-op bound" in format_memory(data)
    # The report reads the plan: its own curve and naive; the counterfactuals come from
    # memory planning, passed in.
    assert sorted(memory_curves(plan)) == ["naive", "plan"]
    replayed = technique_curves(g, graph_order(plan), CostModel(GPU))
    curves = memory_curves(plan, replayed)
    # Each technique lowers the peak of the one before; the plan stays within its budget.
    peaks = [int(curves[k].max()) for k in ("naive", "liveness", "+ offload", "+ recompute")]
    assert peaks == sorted(peaks, reverse=True)
    assert curves["plan"].max() <= plan.summary.memory.budget_bytes
    svg = memory_svg(plan, replayed)
    assert svg.count("<polyline") == 5 and "backward" in svg
    assert memory_svg(plan).count("<polyline") == 2


def test_a_global_batch_beyond_the_budget_is_reached_by_accumulation(capsys):
    cpu = preset("xeon-8180")
    budget = 100_000
    whole = fit(MLP, cpu, budget, optimizer="sgd")
    assert 0 < whole.value < 96  # the global batch does not fit as one batch
    r = fit(MLP, cpu, budget, optimizer="sgd", global_batch=96)
    # The largest divisor of 96 whose accumulating plan fits, each trial planned with it:
    # K micro-batches of r.value rows make the global batch, the next divisor does not fit.
    assert r.value * r.accumulate == 96 and r.accumulate > 1 and r.peak_bytes <= budget
    divisors = [d for d in range(1, 97) if 96 % d == 0]
    tried = {t.value: t for t in r.trials}
    assert all(t.value in divisors and t.accumulate == 96 // t.value for t in r.trials)
    bigger = divisors[divisors.index(r.value) + 1]
    assert bigger in tried and not tried[bigger].fits
    from planner.cli.main import main

    assert main(["fit", MLP, "--target", "xeon-8180", "--budget", str(budget), "--train", "sgd",
                 "--global-batch", "96"]) == 0
    assert (f"largest batch: {r.value} x accumulate {r.accumulate} = 96 per optimizer step"
            in capsys.readouterr().out)
    with pytest.raises(ValueError, match="does not run yet: fit for a CPU target"):
        fit(MLP, GPU, 1 << 20, global_batch=96)
