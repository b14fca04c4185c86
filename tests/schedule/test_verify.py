"""verify accepts planner plans and rejects hand-corrupted ones, naming the op."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

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


def test_rejects_lanes_the_executor_cannot_run(data):
    d = corrupt(data)
    lanes = sorted({o["lane"] for o in d["ops"]})
    for o in d["ops"]:
        if o["lane"] == lanes[-1]:
            o["lane"] = lanes[-1] + 5  # a gap in the numbering
    assert any("the plan's lanes are" in p for p in verify_plan_data(d))


def test_rejects_a_lane_whose_ops_overlap_in_time(data):
    d = corrupt(data)
    ops = sorted(d["ops"], key=lambda o: o["order"])
    a = ops[0]
    b = next(o for o in ops[1:] if o["lane"] != a["lane"] and not o["group"]
             and o["start"] < a["end"])
    b["lane"] = a["lane"]  # the executor would run b after a: not when the plan says
    assert any(f"op {b['name']!r} starts at" in p and f"before op {a['name']!r} ends" in p
               for p in verify_plan_data(d))


def test_rejects_a_gpu_lane_with_two_streams():
    d = json.loads((Path(__file__).resolve().parents[2] / "examples" / "plans"
                    / "lenet-digits.k40c-12gb.plan.json").read_text())
    op = sorted(d["ops"], key=lambda o: o["order"])[3]
    op["stream"] = "d2h"  # on lane 0, which is the compute stream
    assert any(f"op {op['name']!r} is on lane 0 with stream 'd2h'" in p
               for p in verify_plan_data(d))
