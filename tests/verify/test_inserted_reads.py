"""verify checks what the ops memory planning added read, re-derived from the embedded graph
(issue 32): a recompute re-pointed at another live buffer, and listed as its reader, used to
pass verify and build and then crash or train NaN; a copy buffer nothing writes; a transfer
of part of a tensor."""

from __future__ import annotations

import pytest

from planner.verify import verify_plan_data
from tests.verify.plans import plan_data


def _by_name(data):
    return {b["name"]: b for b in data["tensors"]}


def _order(data, name):
    return next(o["order"] for o in data["ops"] if o["name"] == name)


def _repointed(data, m, victim):
    """`m`'s first input re-pointed at buffer `victim`, listed as its reader there."""
    old = m["inputs"][0]
    m["inputs"] = [victim, *m["inputs"][1:]]
    buffers = _by_name(data)
    buffers[old]["readers"] = [r for r in buffers[old]["readers"] if r != m["name"]]
    buffers[victim]["readers"].append(m["name"])
    return data


def _live_others(data, m):
    """The device buffers live when `m` runs that hold another tensor than its first input."""
    at, buffers = _order(data, m["name"]), _by_name(data)
    held = buffers[m["inputs"][0]]["tensor"]
    return [b["name"] for b in data["tensors"] if b["placement"] == "device"
            and b["first"] <= at <= b["last"] and b["tensor"] != held and not b["alias_of"]]


def test_the_budget_plan_verifies():
    assert verify_plan_data(plan_data("budget")) == []


@pytest.mark.parametrize("which", [0, 1, 2])
def test_a_recompute_reading_another_live_buffer_is_refused(which):
    """Every other live buffer the recompute could be pointed at is refused, the message
    naming the op, the tensor it must read and the buffer."""
    base = plan_data("budget")
    m = [m for m in base["memory"]["ops"] if m["kind"] == "recompute"][which]
    victims = _live_others(base, m)
    assert len(victims) >= 5, victims
    for victim in victims:
        data = plan_data("budget")
        mm = next(x for x in data["memory"]["ops"] if x["name"] == m["name"])
        want = next(n for n in data["graph"]["nodes"] if n["name"] == mm["node"])["inputs"][0]
        problems = verify_plan_data(_repointed(data, mm, victim))
        hit = [p for p in problems if m["name"] in p and victim in p and want in p]
        assert hit, (victim, problems)
        assert all("\n" not in p for p in problems)


def test_a_recompute_reading_a_smaller_buffer_of_its_tensor_is_refused():
    data = plan_data("budget")
    m = next(m for m in data["memory"]["ops"] if m["kind"] == "recompute")
    src = _by_name(data)[m["inputs"][0]]
    src["bytes"] -= 4
    assert any(m["name"] in p and f"a buffer of {src['bytes']} bytes" in p
               for p in verify_plan_data(data))


def test_a_copy_buffer_nothing_writes_is_refused():
    """A graph node reads a copy of its input where a copy lists it as a reader: a buffer of
    the tensor under another name that no inserted op writes holds bytes nothing wrote."""
    data = plan_data("budget")
    m = next(m for m in data["memory"]["ops"] if m["kind"] == "prefetch")
    copy = m["outputs"][0]
    m["outputs"] = []
    problems = verify_plan_data(data)
    assert any(f"buffer {copy!r} holds tensor" in p and "no inserted op writes it" in p
               for p in problems), problems


def test_a_transfer_of_part_of_a_tensor_is_refused():
    data = plan_data("budget")
    m = next(m for m in data["memory"]["ops"] if m["kind"] == "offload")
    slot = _by_name(data)[m["outputs"][0]]
    slot["bytes"] //= 2
    assert any(m["name"] in p and repr(slot["name"]) in p and repr(slot["tensor"]) in p
               for p in verify_plan_data(data))
