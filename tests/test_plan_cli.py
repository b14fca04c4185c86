"""planner plan / show / diff / verify through the command's entry point."""

from __future__ import annotations

import json

import planner.cli as cli

SPEC = "zoo:lenet?batch=2&image=8&width=0.5"


def run(*args: str) -> int:
    return cli.main(list(args))


def test_plan_show_verify_diff(tmp_path, capsys):
    a, b, c = (str(tmp_path / f"{n}.json") for n in "abc")
    assert run("plan", SPEC, "--train", "sgd", "--target", "knl-7250", "-o", a) == 0
    assert "step" in capsys.readouterr().out
    assert run("plan", SPEC, "--train", "sgd", "--target", "knl-7250", "-o", b) == 0
    assert open(a).read() == open(b).read()  # byte-identical
    assert run("plan", SPEC, "--train", "sgd", "--target", "xeon-8180", "-o", c) == 0
    capsys.readouterr()
    assert run("verify", a, "--graph", SPEC) == 1  # the forward graph is not the one planned
    capsys.readouterr()
    assert run("verify", a) == 0
    assert run("diff", a, b) == 0 and "no differences" in capsys.readouterr().out
    assert run("diff", a, c, "--json") == 1
    d = json.loads(capsys.readouterr().out)
    assert d["different"] and d["by_type"] and d["summary"]["step_seconds"]
    svg = str(tmp_path / "t.svg")
    assert run("show", a, "--timeline", svg) == 0
    assert open(svg).read().startswith("<?xml") and "Conv2D" in capsys.readouterr().out


def test_uniform_lanes_and_bad_input(tmp_path, capsys):
    out = str(tmp_path / "u.json")
    assert run("plan", SPEC, "--target", "knl-7250", "--strategy", "uniform", "--intra", "4",
               "--inter", "2", "-o", out, "--json") == 0
    assert json.loads(capsys.readouterr().out)["strategy"] == "uniform"
    assert run("plan", SPEC, "--target", "knl-7250", "--intra", "4", "-o", out) == 2
    assert "uniform" in capsys.readouterr().err
    assert run("plan", SPEC, "--target", "knl-7250", "--strategy", "uniform",
               "--min-team-us", "1e9", "-o", str(tmp_path / "alone.json")) == 0
    assert {o["threads"] for o in json.loads((tmp_path / "alone.json").read_text())["ops"]} == {1}
    assert run("plan", SPEC, "--target", "knl-7250", "--min-team-us", "5", "-o", out) == 2
    assert "min_team_seconds" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    assert run("verify", str(bad)) == 1
    assert run("show", str(bad)) == 2


def test_memory_budget_plan_show_and_fit_through_the_command(tmp_path, capsys):
    plan, svg = str(tmp_path / "g.plan.json"), str(tmp_path / "m.svg")
    spec = "zoo:alexnet?batch=8&image=63&classes=4"
    assert run("plan", spec, "--train", "sgd", "--target", "k40c-12gb", "-o", plan) == 0
    capsys.readouterr()
    assert run("show", plan, "--json") == 0
    free = json.loads(capsys.readouterr().out)["summary"]["memory"]
    budget = (free["per_op_bound_bytes"] + free["liveness_load_bytes"]) // 2
    assert run("plan", spec, "--train", "sgd", "--target", "k40c-12gb", "--memory-budget",
               str(budget), "-o", plan, "--force") == 0
    assert run("verify", plan) == 0
    assert run("show", plan, "--memory", svg) == 0
    text = open(svg).read()
    # A GPU plan's chart: device memory, the plan's curve beside the counterfactuals.
    assert text.startswith("<?xml") and ": device memory per op" in text
    assert all(f">{c} (peak " in text for c in ("naive", "liveness", "+ recompute", "plan"))
    capsys.readouterr()
    assert run("show", plan, "--json") == 0
    tight = json.loads(capsys.readouterr().out)["summary"]["memory"]
    assert tight["arena_bytes"] <= budget < free["arena_bytes"]
    code = run("plan", spec, "--train", "sgd", "--target", "k40c-12gb", "--memory-budget",
               "1KiB", "-o", plan, "--force")
    assert code == 2 and "smallest" in capsys.readouterr().err


def test_old_plans_and_bad_budgets_get_one_line_errors(tmp_path, capsys):
    path = tmp_path / "p.json"
    assert run("plan", SPEC, "--target", "knl-7250", "-o", str(path)) == 0
    data = json.loads(path.read_text())
    data.pop("schema")
    data.pop("backend")
    path.write_text(json.dumps(data))
    capsys.readouterr()
    assert run("show", str(path)) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "re-plan it" in err
    assert run("plan", SPEC, "--target", "knl-7250", "--memory-budget", "abc", "-o",
               str(tmp_path / "q.json")) == 2
    assert "--memory-budget" in capsys.readouterr().err
