"""planner fit --pareto: the budget curve against plans made one by one by the pipeline."""

from __future__ import annotations

import json
import warnings

import pytest

import planner.cli as cli
from planner.curve import budget_curve
from planner.frontend.autodiff import Optimizer, make_training_graph
from planner.memory.options import MemoryOptions
from planner.pipeline import PlanOptions, plan
from planner.plan import digest
from planner.target import preset
from planner.zoo import build

SPEC = "zoo:lenet?batch=4&image=16&width=0.5"


@pytest.fixture(scope="module")
def lenet():
    # Width 4: narrower, the convolutions' per-thread scratch is the smallest budget's peak
    # alone, met by running ops one at a time, and the curve's first point recomputes nothing.
    return make_training_graph(build("lenet", batch=4, image=12, width=4.0),
                               Optimizer(kind="sgd"))


def planned(graph, target, budget):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return plan(graph, target, None, PlanOptions(memory=MemoryOptions(budget_bytes=budget)))


def test_curve_is_the_best_plan_of_any_smaller_budget(lenet):
    target = preset("xeon-8180")
    c = budget_curve(lenet, target, points=6).curve
    assert len(c.points) >= 5
    assert c.smallest_bytes >= c.per_op_bound_bytes
    assert c.points[0].budget_bytes == c.smallest_bytes
    assert c.points[-1].budget_bytes == c.free_bytes
    # Re-derived: each budget planned alone; the curve's step is the least of them up to it.
    direct = {p.budget_bytes: planned(lenet, target, p.budget_bytes) for p in c.points}
    best = float("inf")
    for p in c.points:
        best = min(best, direct[p.budget_bytes].summary.step_seconds)
        assert p.step_seconds == best
        assert p.peak_bytes <= p.budget_bytes
        # The hash names the plan of its budget, as the pipeline makes it.
        mine = planned(lenet, target, p.plan_budget_bytes)
        assert digest(mine.to_json()) == p.plan_sha256
        assert mine.summary.memory.arena_bytes == p.peak_bytes
    # Below the smallest budget nothing fits (the curve starts where plans start).
    with pytest.raises(ValueError):
        planned(lenet, target, c.per_op_bound_bytes - 1)
    # Tighter budgets pay: the first point recomputes or offloads something.
    assert c.points[0].recompute or c.points[0].offload


def test_cli_writes_the_same_bytes_twice(tmp_path, capsys):
    a, b, svg = (str(tmp_path / n) for n in ("a.json", "b.json", "c.svg"))
    args = ["fit", SPEC, "--target", "xeon-8180", "--train", "sgd", "--pareto", "--points",
            "4"]
    assert cli.main([*args, "-o", a, "--plot", svg]) == 0
    assert "budget curve" in capsys.readouterr().out
    assert cli.main([*args, "-o", b]) == 0
    assert open(a, "rb").read() == open(b, "rb").read()
    assert "<svg" in open(svg).read()
    steps = [p["step_seconds"] for p in json.load(open(a))["points"]]
    assert steps == sorted(steps, reverse=True)


def test_every_point_keeps_the_users_decisions(tmp_path, capsys):
    out = str(tmp_path / "c.json")
    assert cli.main(["fit", "zoo:alexnet?batch=2&image=63&width=0.125&classes=4", "--target",
                     "xeon-8180", "--train", "sgd", "--pareto", "--points", "3", "--recompute",
                     "lrn1", "-o", out]) == 0
    points = json.load(open(out))["points"]
    assert points and all("lrn1" in p["recompute"] for p in points)


@pytest.mark.parametrize("extra, words", [
    (["--pareto", "--points", "1"], "--points"),
    ([], "--budget"),
    (["--budget", "1MiB", "--plot", "x.svg"], "--pareto"),
    (["--pareto", "--measure", "2", "--target", "k40c-12gb"], "CPU"),
])
def test_cli_refuses_in_one_line(extra, words, capsys):
    rc = cli.main(["fit", SPEC, "--target", "xeon-8180", *extra])
    err = capsys.readouterr().err.strip()
    assert rc != 0 and words in err and "\n" not in err
