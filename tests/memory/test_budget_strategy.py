"""A memory budget keeps the main (co-running) schedule and meets the budget by the cheapest
means; a strategy switch happens only where the one-lane plan is the cheaper way, and the
plan says so (Summary.strategy_switch: `planner show`, `explain`, `diff`).

Each plan here is made by the pipeline with the analytical cost model on a fixed target
(tests/targets.py's two cores, or a preset): nothing is measured.
"""

from __future__ import annotations

import warnings

import pytest

from planner.cli.plan import format_summary
from planner.costs import CostModel
from planner.curve import budget_curve
from planner.frontend.autodiff import Optimizer, make_training_graph
from planner.memory.options import MemoryOptions
from planner.pipeline import PlanOptions, plan
from planner.pipeline.explain import explain, format_explain, rederive
from planner.pipeline.placing import place
from planner.report.diff import diff_plans
from planner.report.diff_text import format_diff
from planner.schedule.cpu import cpu_schedule
from planner.schedule.options import ScheduleOptions
from planner.target import preset
from planner.zoo import build
from tests.targets import two_cores


def planned(graph, target, budget=None):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return plan(graph, target, None, PlanOptions(memory=MemoryOptions(budget_bytes=budget)),
                    evaluation=False)


def test_resnet18_ten_percent_below_its_peak_keeps_its_step():
    # ResNet-18 at CIFAR size with AdamW: its optimizer state is half the arena at batch 32,
    # so batch 128 (activations dominate) is where 90% of the peak is reachable by recompute.
    g = make_training_graph(build("resnet", depth=18, image=32, batch=128, classes=10),
                            Optimizer(kind="adamw"))
    target = two_cores()
    free = planned(g, target)
    budget = free.summary.memory.arena_bytes * 9 // 10
    p = planned(g, target, budget)
    assert p.summary.memory.arena_bytes <= budget
    assert p.summary.strategy == free.summary.strategy == "optimized"
    assert p.summary.strategy_switch is None
    assert p.summary.step_seconds <= 1.10 * free.summary.step_seconds
    # Re-timed on its lanes: the cores' busy share, as the unconstrained plan's.
    assert 0.5 < p.summary.utilization <= 1.0
    # Met by recomputing, not by running every op on all threads one at a time.
    assert any(op.kind == "recompute" for op in p.memory.ops)


CASES = {
    "lenet-adamw-two": (lambda: build("lenet", batch=16, image=28), "adamw", two_cores),
    "lenet-sgd-two": (lambda: build("lenet", batch=16, image=28), "sgd", two_cores),
    "lenet-sgd-xeon": (lambda: build("lenet", batch=16, image=28), "sgd",
                       lambda: preset("xeon-8180")),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_no_printed_variant_is_faster_than_main_over_budgets(case):
    model, optimizer, target_of = CASES[case]
    g = make_training_graph(model(), Optimizer(kind=optimizer))
    target = target_of()
    free = planned(g, target)
    m = free.summary.memory
    seen = 0
    for k in range(1, 5):  # budgets from the per-op bound up to the unconstrained arena
        budget = m.per_op_bound_bytes + (m.arena_bytes - m.per_op_bound_bytes) * k // 4
        try:
            p = planned(g, target, budget)
        except ValueError:  # InfeasibleBudget: below what the search reaches
            continue
        seen += 1
        s = p.summary
        assert s.memory.arena_bytes <= budget
        for v in p.variants:
            assert s.step_seconds <= v.step_seconds * (1 + 1e-9), (budget, v.name)
        # The strategy is the one asked for unless the plan says why not, in one line.
        text = format_summary(p.json_data)
        if s.strategy != "optimized":
            assert s.strategy_switch and "\n" not in s.strategy_switch
            assert f"optimized -> {s.strategy} under the" in s.strategy_switch
            assert s.strategy_switch in text
        else:
            assert s.strategy_switch is None and "strategy    " not in text
    assert seen >= 2


def test_a_switch_is_said_by_show_and_diff():
    # Two cores, LeNet at batch 16 with SGD: at 80% of the way from the per-op bound to the
    # unconstrained arena the lanes' plan is more than min_gain slower than the one-lane one.
    g = make_training_graph(build("lenet", batch=16, image=28), Optimizer(kind="sgd"))
    target = two_cores()
    free = planned(g, target)
    m = free.summary.memory
    budget = m.per_op_bound_bytes + (m.arena_bytes - m.per_op_bound_bytes) * 4 // 5
    p = planned(g, target, budget)
    s = p.summary
    assert s.strategy == "uniform" and s.strategy_switch
    assert s.strategy_switch.startswith("optimized -> uniform under the")
    assert "strategy    optimized -> uniform" in format_summary(p.json_data)
    # explain re-derives the plan (its decisions made again) and says the same line.
    e = explain(rederive(p, target))
    assert e["strategy_switch"] == s.strategy_switch
    assert f"  strategy {s.strategy_switch}" in format_explain(e).splitlines()
    lines = format_diff(diff_plans(free.json_data, p.json_data)).splitlines()
    said = [line for line in lines if line.startswith("strategy: optimized -> uniform (b: ")]
    assert len(said) == 1 and s.strategy_switch in said[0]
    # An unbudgeted plan's JSON has no such field: plans made before it read the same.
    assert "strategy_switch" not in free.to_json()


def test_pareto_points_are_monotone():
    g = make_training_graph(build("lenet", batch=16, image=28), Optimizer(kind="adamw"))
    c = budget_curve(g, two_cores(), points=5).curve
    steps = [p.step_seconds for p in c.points]
    assert len(steps) >= 2
    # Every point at least as fast as the next smaller budget's.
    assert all(a >= b for a, b in zip(steps, steps[1:], strict=False))
    assert c.points[-1].step_seconds == planned(g, two_cores()).summary.step_seconds


def test_a_grouped_schedule_meets_a_budget_without_its_groups_where_faster():
    # LeNet with AdamW on two cores: the optimized schedule co-runs ops in groups (one loop
    # each); the budget search runs a group's ops one after another, each at the group's
    # whole time, so the same strategy made without groups meets the budget faster.
    g = make_training_graph(build("lenet", batch=16, image=28), Optimizer(kind="adamw"))
    target = two_cores()
    model = CostModel(target)
    grouped = cpu_schedule(g, model, ScheduleOptions())
    plain = cpu_schedule(g, model, ScheduleOptions(grouping=False, corun_groups=False))
    assert any(o.group for o in grouped.ops) and not any(o.group for o in plain.ops)
    m = planned(g, target).summary.memory
    budget = m.per_op_bound_bytes + (m.arena_bytes - m.per_op_bound_bytes) * 3 // 4

    def step(s):
        d = place(g, model, s, MemoryOptions(budget_bytes=budget))
        return max(o.end for o in d.ops or s.ops)

    assert step(plain) < step(grouped)
    p = planned(g, target, budget)
    assert p.summary.strategy == "optimized" and p.summary.strategy_switch is None
    assert p.summary.step_seconds <= step(plain) * (1 + 1e-9)
    assert not any(op.group for op in p.ops)
