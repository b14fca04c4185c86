"""Chrome trace JSON of a plan's predicted step (`planner show --trace`) and of an executor's
measured one (the package's `trace(ex, path)`), checked against the trace event format:
required fields per phase, timestamps that never go back on a track, every op of the plan on
each track it occupies exactly once, and the same track names in both files."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from planner.cli import main
from planner.graph import Graph
from planner.graph.interpret import random_feeds
from planner.report.trace import (
    ARENA_COUNTER,
    MEASURED,
    PREDICTED,
    plan_trace,
    track_of,
)

# The trace event format's required fields, per phase (X: complete, C: counter, M: metadata).
REQUIRED = {"X": {"name", "ph", "ts", "dur", "pid", "tid"},
            "C": {"name", "ph", "ts", "pid", "args"},
            "M": {"name", "ph", "pid", "tid", "args"}}


def check_trace(trace: dict, plan: dict) -> dict[int, str]:
    """The trace's track names by tid, after checking it (see the module docstring)."""
    events = trace["traceEvents"]
    assert isinstance(events, list) and events
    for e in events:
        assert e["ph"] in REQUIRED, e
        assert REQUIRED[e["ph"]] <= set(e), e
        if e["ph"] != "M":
            assert isinstance(e["ts"], float | int) and e["ts"] >= 0
        if e["ph"] == "X":
            assert e["dur"] >= 0
    names = {e["tid"]: e["args"]["name"] for e in events
             if e["ph"] == "M" and e["name"] == "thread_name"}
    assert len(set(names.values())) == len(names)
    last: dict[tuple, float] = {}
    for e in events:
        if e["ph"] in "XC":
            track = (e["pid"], e["tid"], e["ph"])
            assert e["ts"] >= last.get(track, 0.0), f"time goes back on {track}: {e}"
            last[track] = e["ts"]
    placed = Counter((e["name"], names[e["tid"]]) for e in events if e["ph"] == "X")
    want = Counter((op["name"], f"cpu {t}" if isinstance(t, int) else f"stream {t}")
                   for op in plan["ops"] for t in track_of(op))
    assert placed == want
    counter = [e for e in events if e["ph"] == "C"]
    assert [e["name"] for e in counter] == [ARENA_COUNTER] * len(plan["ops"])
    assert max(e["args"]["bytes"] for e in counter) <= plan["summary"]["memory"]["arena_bytes"]
    return names


@pytest.fixture(scope="module")
def lenet_plan(tmp_path_factory):
    folder = tmp_path_factory.mktemp("trace")
    path = folder / "lenet.plan.json"
    assert main(["plan", "zoo:lenet?image=8&batch=4", "--train", "sgd", "--target", "host",
                 "-o", str(path)]) == 0
    return folder, path


def test_show_writes_the_predicted_step(lenet_plan, capsys):
    folder, path = lenet_plan
    out = folder / "plan.trace.json"
    assert main(["show", str(path), "--trace", str(out)]) == 0
    assert f"wrote {out}" in capsys.readouterr().out
    plan = json.loads(path.read_text())
    trace = json.loads(out.read_text())
    check_trace(trace, plan)
    op = plan["ops"][-1]
    event = next(e for e in trace["traceEvents"] if e["name"] == op["name"] and e["ph"] == "X")
    assert event["cat"] == op["op"] and event["args"]["threads"] == op["threads"]
    assert event["ts"] == pytest.approx(op["start"] * 1e6)
    assert event["dur"] == pytest.approx((op["end"] - op["start"]) * 1e6)
    # a second write of the same plan changes nothing; another file is not replaced
    assert main(["show", str(path), "--trace", str(out)]) == 0
    other = folder / "mine.json"
    other.write_text("{}")
    assert main(["show", str(path), "--trace", str(other)]) == 2
    assert other.read_text() == "{}"


def test_executor_trace_has_the_predicted_tracks(lenet_plan):
    folder, path = lenet_plan
    assert main(["build", str(path), "-o", str(folder / "lenet_trace")]) == 0
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location(
        "lenet_trace", folder / "lenet_trace" / "__init__.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["lenet_trace"] = module
    spec.loader.exec_module(module)
    plan = json.loads(module.plan)
    graph = Graph.model_validate(plan["graph"])
    ex = module.Executor(init=True)
    with pytest.raises(ValueError, match="not run a step"):
        module.trace(ex, folder / "early.json")
    ex.step(random_feeds(graph, seed=0))
    module.trace(ex, folder / "step.trace.json")
    measured = json.loads((folder / "step.trace.json").read_text())
    names = check_trace(measured, plan)
    stats = {s["name"]: s for s in ex.stats()["ops"]}
    for e in measured["traceEvents"]:
        if e["ph"] == "X":
            s = stats[e["name"]]
            assert e["ts"] == pytest.approx(s["start"] * 1e6)
            assert e["args"]["measured_us"] == pytest.approx((s["end"] - s["start"]) * 1e6)
    predicted = plan_trace(plan)["traceEvents"]
    assert names == {e["tid"]: e["args"]["name"] for e in predicted if e["name"] == "thread_name"}
    module.trace(ex, folder / "both.trace.json", with_prediction=True)
    both = json.loads((folder / "both.trace.json").read_text())["traceEvents"]
    assert sorted({e["pid"] for e in both}) == [PREDICTED, MEASURED]
    for pid, alone in ((PREDICTED, predicted), (MEASURED, measured["traceEvents"])):
        assert [e for e in both if e["pid"] == pid] == alone
