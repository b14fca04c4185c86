"""Parallel-loop groups are named by the ops they hold, not by when they start: a plan
re-timed (the same model on a slightly slower machine) keeps the names of the groups it keeps,
so a plan diff shows only the groups that really changed."""

from __future__ import annotations

import json

from planner.frontend.autodiff import Optimizer, make_training_graph
from planner.pipeline import plan
from planner.target import preset
from planner.zoo import from_spec

# Adam's per-parameter updates of one shape run as parallel-loop groups on a 28-core Xeon.
SPEC = "zoo:resnet?depth=18&batch=2&image=16&width=0.25&classes=5"


def _slower(factor: float):
    t = preset("xeon-8180")
    cpu = t.cpu.model_copy(update={k: getattr(t.cpu, k) * factor for k in
                                   ("peak_flops", "memory_bandwidth", "core_bandwidth")})
    return t.model_copy(update={"cpu": cpu})


def _groups(data: dict) -> dict[str, tuple[str, ...]]:
    groups: dict[str, list[str]] = {}
    for op in data["ops"]:
        if op["group"]:
            groups.setdefault(op["group"], []).append(op["name"])
    return {name: tuple(sorted(members)) for name, members in groups.items()}


def test_a_re_timed_plan_keeps_its_group_names():
    graph = make_training_graph(from_spec(SPEC), Optimizer(kind="adam"))
    a, b = (json.loads(plan(graph, _slower(f)).to_json()) for f in (1.0, 0.97))
    ga, gb = _groups(a), _groups(b)
    assert ga and gb, "the model plans parallel-loop groups on this target"
    starts = {op["name"]: op["start"] for op in a["ops"]}
    assert any(op["start"] != starts[op["name"]] for op in b["ops"] if op["group"]), \
        "the slower machine re-times the grouped ops"
    by_members = {members: name for name, members in gb.items()}
    kept = {members: name for name, members in ga.items() if members in by_members}
    assert kept, "some groups are the same ops on both machines"
    assert all(by_members[members] == name for members, name in kept.items())
    # The name is the group's kind and its first op in plan order.
    order = {op["name"]: op["order"] for op in a["ops"]}
    for name, members in ga.items():
        assert name == f"group:{min(members, key=order.__getitem__)}"
