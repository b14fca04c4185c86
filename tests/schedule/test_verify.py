"""verify accepts planner plans and rejects hand-corrupted ones, naming the op."""

from __future__ import annotations

import json
import warnings

import pytest

from planner.pipeline import plan
from planner.verify import verify_plan_data
from tests.schedule.conftest import toy_target, training


@pytest.fixture(scope="module")
def data() -> dict:
    g = training("resnet", batch=2, image=16, width=0.125, depth=18, classes=5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        p = plan(g, toy_target())
    return json.loads(p.to_json())


def corrupt(data: dict) -> dict:
    return json.loads(json.dumps(data))


def test_accepts_the_planners_plan(data):
    assert verify_plan_data(data) == []


def test_rejects_overlapping_cores(data):
    d = corrupt(data)
    a, b = d["ops"][0], d["ops"][1]
    b["start"], b["end"], b["cpus"] = a["start"], a["end"], a["cpus"]
    b["threads"] = len(b["cpus"])
    problems = verify_plan_data(d)
    assert any(a["name"] in p and b["name"] in p and "same time" in p for p in problems)


def test_rejects_shared_physical_core_without_smt(data):
    d = corrupt(data)
    core_of = d["target"]["core_of"]
    a, b = d["ops"][0], d["ops"][1]
    sibling = next(c for c in range(len(core_of)) if core_of[c] == core_of[a["cpus"][0]]
                   and c != a["cpus"][0])
    b.update(start=a["start"], end=a["end"], cpus=[sibling], threads=1, smt=False)
    assert any("share physical cores" in p and b["name"] in p for p in verify_plan_data(d))


def test_rejects_violated_dependency(data):
    d = corrupt(data)
    op = next(o for o in d["ops"] if o["deps"])
    dep = next(o for o in d["ops"] if o["name"] == op["deps"][0])
    op["start"] = dep["end"] / 2
    problems = verify_plan_data(d)
    assert any(op["name"] in p and "before its dependency" in p for p in problems)


def test_rejects_missing_op(data):
    d = corrupt(data)
    victim = d["ops"][0]["name"]
    d["ops"] = d["ops"][1:]
    problems = verify_plan_data(d)
    assert any(victim in p and "missing" in p for p in problems)
    assert any(victim in p for p in verify_plan_data(d, [o["name"] for o in data["ops"]]))


def test_rejects_wrong_thread_count_and_step(data):
    d = corrupt(data)
    d["ops"][0]["threads"] += 1
    d["summary"]["step_seconds"] *= 2
    problems = verify_plan_data(d)
    assert any(d["ops"][0]["name"] in p and "threads" in p for p in problems)
    assert any("step_seconds" in p for p in problems)
