"""The memory verifier accepts planned buffers and names the rule each corruption breaks."""

from __future__ import annotations

import json

import pytest

from planner.verify.memory import verify_memory_data
from tests.memory.conftest import cpu_plan, replan, training


@pytest.fixture(scope="module")
def data() -> dict:
    plan = cpu_plan(training("resnet", batch=2, image=16, width=0.125, depth=18, classes=5))
    return json.loads(replan(plan).to_json())


def copy(d: dict) -> dict:
    return json.loads(json.dumps(d))


def activation(d: dict, rank: int = 0) -> dict:
    acts = sorted((t for t in d["tensors"] if t["writer"] and t["tensor"] and not t["alias_of"]
                   and t["last"] < len(d["ops"])), key=lambda t: (-t["bytes"], t["name"]))
    return acts[rank]


def test_accepts_the_planned_plan(data):
    assert verify_memory_data(data) == []


def test_unplanned_plans_pass_untouched(data):
    d = copy(data)
    d["tensors"], d["summary"]["memory"] = [], None
    assert verify_memory_data(d) == []


def test_overlap_of_buffers_live_together(data):
    d = copy(data)
    writes = {t["writer"]: t for t in d["tensors"]
              if t["writer"] and t["tensor"] and not t["alias_of"]}
    a = next(activation(d, k) for k in range(20) if activation(d, k)["readers"][0] in writes)
    b = writes[a["readers"][0]]  # written while `a` is read: both live then
    b["offset"] = a["offset"]
    problems = verify_memory_data(d)
    assert any(a["name"] in p and b["name"] in p and "happen-before" in p for p in problems)


def test_reuse_without_ordering_edge(data):
    d = copy(data)
    # Drop every edge: buffers that reuse bytes across lanes are no longer ordered (the deps
    # kept order nothing: the executor does not wait on them).
    d["happens_before"] = []
    assert any("share device bytes" in p for p in verify_memory_data(d))


def test_buffer_past_the_arena(data):
    d = copy(data)
    a = activation(d)
    a["offset"] = d["summary"]["memory"]["arena_bytes"]
    assert any(a["name"] in p and "past the device pool" in p for p in verify_memory_data(d))


def test_budget_exceeded(data):
    d = copy(data)
    d["summary"]["memory"]["budget_bytes"] = d["summary"]["memory"]["arena_bytes"] - 1
    assert any("exceeds the memory budget" in p for p in verify_memory_data(d))


def test_missing_tensor_and_wrong_alias(data):
    d = copy(data)
    gone = activation(d, 1)
    d["tensors"].remove(gone)
    alias = next(t for t in d["tensors"] if t["alias_of"])
    alias["offset"] += 64
    problems = verify_memory_data(d)
    assert any(f"graph tensor {gone['tensor']!r} is held by no buffer" in p for p in problems)
    assert any(alias["name"] in p and "does not sit in its bytes" in p for p in problems)


def test_unknown_op_and_wrong_lifetime(data):
    d = copy(data)
    a, b = activation(d), activation(d, 2)
    a["readers"] = [*a["readers"], "ghost"]
    b["first"] += 1
    problems = verify_memory_data(d)
    assert any(a["name"] in p and "'ghost'" in p for p in problems)
    assert any(b["name"] in p and "writer's order" in p for p in problems)
