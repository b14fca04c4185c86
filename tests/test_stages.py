"""The back half as named stages (planner.pipeline.STAGES): one record through pure functions,
the drivers reusing them, and the step graph's passes (planner.step) re-derived by
`verify --graph` from what a plan records."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import planner.cli as cli
from planner.frontend.options import GraphOptions
from planner.frontend.prepare import prepare
from planner.graph.optimizer import Optimizer
from planner.pipeline import STAGES, PlanOptions, plan, planning, run
from planner.schedule.parallel import DataParallelOptions
from planner.step import STEP_PASSES, StepChoices, step_graph
from planner.target import preset

ROOT = Path(__file__).resolve().parent.parent
SPEC = "zoo:lenet?batch=2&image=8&width=0.5"


def test_the_stages_in_order_and_plan_is_all_of_them():
    assert [name for name, _ in STAGES] == ["gathers", "step graph", "fits", "price", "evaluation",
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
    assert [name for name, _ in STEP_PASSES] == ["for_cores", "layouts", "fold_norm_relu",
                                                "fold_conv_leaky", "fold_sum_relu",
                                                "fold_norm_sum", "collectives", "blocked"]
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


def _pipeline_calls(source: str, names: set[str]) -> list[int]:
    """Lines of `source` calling one of `names` imported from planner.pipeline (by any
    alias), or any private name of it (a stage itself: `_price`, `_schedule`, ...)."""
    tree = ast.parse(source)
    imported: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("planner.pipeline"):
            for a in node.names:
                imported[a.asname or a.name] = a.name
    return [node.lineno for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id in imported
            and (imported[node.func.id] in names or imported[node.func.id].startswith("_"))]


def test_no_driver_relists_the_stages():
    """Outside planner/pipeline/, no module of planner/ or codegen/ calls the decisions' or
    assembly's steps (decide, place, assemble) or a stage itself: drivers run the stages by
    name (`run(record, names)`). Running the step-graph stage alone (step_graph,
    priced_graphs) is no re-listing."""
    steps = {"decide", "place", "assemble"}
    found = []
    for package in ("planner", "codegen"):
        for f in sorted((ROOT / package).rglob("*.py")):
            rel = f.relative_to(ROOT).as_posix()
            if not rel.startswith("planner/pipeline/"):
                found += [f"{rel}:{k}" for k in _pipeline_calls(f.read_text(encoding="utf-8"),
                                                                steps)]
    assert found == []


def test_the_relist_check_sees_each_spelling():
    src = ("from planner.pipeline import assemble, place as p, run\n"
           "from planner.pipeline.driver import _price\n"
           "assemble(g)\n"
           "p(g)\n"
           "_price(x)\n"
           "run(x, ('price',))\n")
    assert _pipeline_calls(src, {"decide", "place", "assemble"}) == [3, 4, 5]


def test_data_parallel_options_reach_the_step_graph():
    g = prepare(SPEC, GraphOptions(optimizer=Optimizer(kind="sgd")))
    p = run(planning(g, preset("knl-7250"),
                     options=PlanOptions(data_parallel=DataParallelOptions(ranks=2))),
            ("step graph",))
    assert any(n.op == "AllReduce" for n in p.graph.nodes) and p.plan is None


def test_autodiff_rewrites_are_a_checked_pass_tuple():
    from planner.frontend.passes import (
        GRADIENT_PASSES,
        TRAINING_PASSES,
        Differentiated,
        rewritten,
    )
    from planner.graph.validate import GraphError

    names = [name for name, _ in TRAINING_PASSES]
    assert names[:len(GRADIENT_PASSES)] == [name for name, _ in GRADIENT_PASSES]
    assert names[-3:] == ["precision", "fold_bias", "fold_conv_bias"]
    g = prepare(SPEC, GraphOptions(optimizer=Optimizer(kind="sgd")))
    assert rewritten(g, Differentiated(g, {}), TRAINING_PASSES) == g  # a fixed point
    # A pass that drops the first node leaves its output undefined: caught right after it.
    broken = (("drop", lambda graph, d: graph.model_copy(update={"nodes": graph.nodes[1:]})),)
    with pytest.raises(GraphError, match="not defined|used before"):
        rewritten(g, Differentiated(g, {}), broken)
