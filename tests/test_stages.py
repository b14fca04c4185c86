"""The back half as named stages (planner.pipeline.STAGES): one record through pure functions,
the drivers reusing them, and the step graph's passes (planner.graph.step) re-derived by
`verify --graph` from what a plan records."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import planner.cli as cli
from planner.frontend.options import GraphOptions
from planner.frontend.prepare import prepare
from planner.graph.optimizer import Optimizer
from planner.graph.step import STEP_PASSES, StepChoices, step_graph
from planner.pipeline import STAGES, PlanOptions, plan, planning, run
from planner.schedule.parallel import DataParallelOptions
from planner.target import preset

ROOT = Path(__file__).resolve().parent.parent
SPEC = "zoo:lenet?batch=2&image=8&width=0.5"


def test_the_stages_in_order_and_plan_is_all_of_them():
    assert [name for name, _ in STAGES] == ["step graph", "fits", "price", "evaluation",
                                            "schedule", "place memory", "assemble", "verify"]
    g = prepare(SPEC, GraphOptions(optimizer=Optimizer(kind="sgd")))
    target = preset("knl-7250")
    p = planning(g, target)
    done = run(p)
    assert done.plan is not None and done.plan.to_json() == plan(g, target).to_json()
    # Pure: the graph it started from is unchanged (its content, not only the record's
    # field), and the same record through the stages again gives the same bytes (no stage
    # keeps state of its own between runs).
    assert g.to_json() == prepare(SPEC, GraphOptions(optimizer=Optimizer(kind="sgd"))).to_json()
    assert run(p).plan.to_json() == done.plan.to_json()
    with pytest.raises(ValueError, match="no stage named 'sched'"):
        run(p, ("sched",))


def test_a_stage_runs_on_what_the_earlier_ones_decided():
    g = prepare(SPEC, GraphOptions(optimizer=Optimizer(kind="sgd")))
    target = preset("xeon-8180")
    decided = run(planning(g, target), ("step graph", "fits", "price", "schedule",
                                        "place memory"))
    assert decided.plan is None and decided.memory is not None
    assembled = run(decided, ("evaluation", "assemble", "verify"))
    assert assembled.plan is not None
    assert assembled.plan.to_json() == plan(g, target).to_json()


def test_step_passes_are_checked_after_each_rewrite():
    g = prepare(SPEC)
    assert [name for name, _ in STEP_PASSES] == ["for cores", "conv layouts", "collectives"]
    assert step_graph(g, StepChoices()) is g
    conv = next(n.name for n in g.nodes if n.op == "Conv2D")
    with pytest.raises(ValueError, match=conv):
        step_graph(g, StepChoices(layouts={conv: "sideways"}))


def test_verify_graph_rederives_a_data_parallel_step(tmp_path, capsys):
    graph, out = str(tmp_path / "g.json"), str(tmp_path / "p.json")
    assert cli.main(["graph", SPEC, "--train", "sgd", "-o", graph]) == 0
    assert cli.main(["plan", graph, "--target", "knl-7250", "--data-parallel", "2", "-o",
                     out]) == 0
    capsys.readouterr()
    # The graph file is the forward-and-backward graph; the plan's adds the all-reduces.
    assert cli.main(["verify", out, "--graph", graph]) == 0, capsys.readouterr().out
    assert cli.main(["plan", graph, "--target", "knl-7250", "--data-parallel", "2",
                     "--shard-optimizer", "-o", out, "--force"]) == 0
    capsys.readouterr()
    assert cli.main(["verify", out, "--graph", graph]) == 0, capsys.readouterr().out


def test_no_driver_relists_the_stages():
    """Outside pipeline.py, no module calls the stages' steps one by one: they run `run`."""
    relisted = re.compile(r"\b(decide|assemble|place|step_graph)\(")
    drivers = ["planner/fit.py", "planner/report/explain.py", "planner/cli/plan.py",
               "codegen/profiling.py", "planner/curve.py"]
    found = [f"{d}:{k}" for d in drivers
             for k, line in enumerate((ROOT / d).read_text(encoding="utf-8").splitlines(), 1)
             if relisted.search(line) and not line.lstrip().startswith(("#", ">>>"))
             and "graph.step import step_graph" not in line
             and "step_graph(graph, _recorded_choices" not in line]
    assert found == []


def test_data_parallel_options_reach_the_step_graph():
    g = prepare(SPEC, GraphOptions(optimizer=Optimizer(kind="sgd")))
    p = run(planning(g, preset("knl-7250"),
                     options=PlanOptions(data_parallel=DataParallelOptions(ranks=2))),
            ("step graph",))
    assert any(n.op == "AllReduce" for n in p.graph.nodes) and p.plan is None


def test_autodiff_rewrites_are_a_checked_pass_tuple():
    from planner.graph.autodiff import GRADIENT_PASSES, TRAINING_PASSES, Differentiated, rewritten
    from planner.graph.validate import GraphError

    names = [name for name, _ in TRAINING_PASSES]
    assert names[:len(GRADIENT_PASSES)] == [name for name, _ in GRADIENT_PASSES]
    assert names[-3:] == ["apply_precision", "fold_bias_adds", "fold_conv_biases"]
    g = prepare(SPEC, GraphOptions(optimizer=Optimizer(kind="sgd")))
    assert rewritten(g, Differentiated(g, {}), TRAINING_PASSES) == g  # a fixed point
    # A pass that drops the first node leaves its output undefined: caught right after it.
    broken = (("drop", lambda graph, d: graph.model_copy(update={"nodes": graph.nodes[1:]})),)
    with pytest.raises(GraphError, match="not defined|used before"):
        rewritten(g, Differentiated(g, {}), broken)
