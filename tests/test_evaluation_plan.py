"""A training plan's evaluation schedule (planner/evaluation.py): planned, recorded,
deterministic, and checked by verify (planner/verify/evaluation.py)."""

from __future__ import annotations

import json

import pytest

from planner.frontend.prepare import GraphOptions, prepare
from planner.graph.evaluation import evaluation_graph
from planner.graph.optimizer import Optimizer
from planner.pipeline import plan
from planner.plan import Plan
from planner.target import preset
from planner.verify import verify_plan_text
from tests.graph.evaluation_cases import bn_dropout_net


@pytest.fixture(scope="module", params=["xeon-8180", "k40c-12gb"])
def planned(request) -> Plan:
    g = prepare(bn_dropout_net(), GraphOptions(optimizer=Optimizer(kind="adam")))
    return plan(g, preset(request.param))


def mutated(p: Plan, change) -> str:
    data = json.loads(p.to_json())
    change(data["evaluation"])
    return json.dumps(data)


def test_the_evaluation_is_the_evaluation_graph_planned_with_bound_parameters(planned):
    e = planned.evaluation
    assert e.plan.graph == evaluation_graph(planned.graph)
    assert e.plan.kind == "inference" and e.plan.backend == planned.backend
    assert sorted(b.tensor for b in e.bound) == sorted(
        t.name for t in e.plan.graph.by_role("param", "state"))
    assert all(b.tensor == b.training for b in e.bound)
    # The evaluation's own bytes: activations only, above every bound tensor.
    placed = {t.name: t for t in e.plan.tensors}
    assert all(placed[b.tensor].offset + placed[b.tensor].bytes <= e.arena_offset
               for b in e.bound)
    assert 0 < e.plan.summary.memory.arena_bytes - e.arena_offset
    assert verify_plan_text(planned.to_json()) == []


def test_plans_are_deterministic_and_the_evaluation_can_be_left_out(planned):
    g = planned.graph.model_copy()
    assert plan(g, preset(planned.target.name)).to_json() == planned.to_json()
    assert plan(g, preset(planned.target.name), evaluation=False).evaluation is None
    # An inference plan has none, and no "evaluation" key.
    assert "evaluation" not in plan(evaluation_graph(g), preset("xeon-8180")).to_json()


def test_verify_refuses_a_parameter_bound_to_another_tensor(planned):
    def swap(e):
        e["bound"][0]["training"] = e["bound"][1]["training"]

    problems = verify_plan_text(mutated(planned, swap))
    assert any(p.startswith("evaluation: tensor") and "not to its tensor of the same name" in p
               for p in problems), problems


def test_verify_refuses_an_unbound_parameter_and_another_graph(planned):
    problems = verify_plan_text(mutated(planned, lambda e: e["bound"].pop()))
    assert any("is not bound to the training plan's" in p for p in problems), problems

    def training_batchnorm(e):
        for n in e["plan"]["graph"]["nodes"]:
            if n["op"] == "BatchNorm":
                n["attrs"]["training"] = True

    problems = verify_plan_text(mutated(planned, training_batchnorm))
    assert any("not the evaluation graph" in p for p in problems), problems


def test_verify_refuses_an_arena_offset_past_its_own_bytes(planned):
    def past(e):
        e["arena_offset"] = e["plan"]["summary"]["memory"]["arena_bytes"]

    problems = verify_plan_text(mutated(planned, past))
    assert any("lies below arena_offset" in p for p in problems), problems


def test_the_command_plans_it_by_default_and_verify_checks_it(tmp_path, capsys):
    import planner.cli as cli

    spec = "zoo:lenet?batch=2&image=8&width=0.5"
    with_it, without = str(tmp_path / "a.json"), str(tmp_path / "b.json")
    assert cli.main(["plan", spec, "--train", "sgd", "--target", "knl-7250", "-o", with_it]) == 0
    assert cli.main(["plan", spec, "--train", "sgd", "--target", "knl-7250", "--no-evaluation",
                     "-o", without]) == 0
    assert "evaluation" in json.loads(open(with_it).read())
    assert "evaluation" not in json.loads(open(without).read())
    assert cli.main(["verify", with_it]) == 0
    data = json.loads(open(with_it).read())
    data["evaluation"]["bound"][0]["training"] = "no-such-tensor"
    open(with_it, "w").write(json.dumps(data))
    capsys.readouterr()
    assert cli.main(["verify", with_it]) == 1
    assert "evaluation: tensor" in capsys.readouterr().out
