"""A plan's predicted step, and an executor's measured one, as Chrome trace event JSON: the
format PyTorch's profiler, JAX and TensorFlow write, which Perfetto (ui.perfetto.dev) and
chrome://tracing open.

Both traces have the same tracks, so the two files open side by side and show where the
prediction and the machine part: a track per logical CPU (CPU plans) or per stream (GPU
plans), one for the communication lane of data-parallel plans, and a counter of the arena
bytes in use. An op is a complete event ("ph": "X") on each track it occupies, named after the
op, its category the op type, its arguments its threads, CPUs or stream, and its predicted time
(the measured trace adds the measured one). Times are microseconds from the step's start.

    planner show PLAN --trace plan.trace.json       # predicted
    mymodel.trace(ex, "step.trace.json")            # measured: the last step of `ex`
    mymodel.trace(ex, "both.trace.json", with_prediction=True)   # both, one file

Example:
    >>> plan = {"graph": {"name": "g"}, "target": {"name": "t"}, "tensors": [],
    ...         "ops": [{"name": "a", "op": "Relu", "cpus": [0, 1], "threads": 2,
    ...                  "stream": "", "order": 0, "start": 0.0, "end": 1e-6}]}
    >>> events = plan_trace(plan)["traceEvents"]
    >>> sorted({e["args"]["name"] for e in events if e["name"] == "thread_name"})
    ['cpu 0', 'cpu 1']
    >>> [(e["tid"], e["dur"]) for e in events if e["ph"] == "X"]
    [(1, 1.0), (2, 1.0)]
"""

from __future__ import annotations

from typing import Any

# The trace's processes: one per file, named so that two files opened together stay apart.
PREDICTED, MEASURED = 1, 2
ARENA_COUNTER = "arena bytes in use"


def track_of(op: dict[str, Any]) -> list[int | str]:
    """The tracks an op occupies: its logical CPUs, else its stream (a GPU stream, or the CPU
    plan's communication lane)."""
    return list(op.get("cpus") or [op.get("stream") or "stream"])


def _track_key(streams: list[str]):
    def key(track: int | str) -> tuple:
        if isinstance(track, int):
            return (0, track, "")
        return (1, streams.index(track) if track in streams else len(streams), track)

    return key


def _track_name(track: int | str) -> str:
    return f"cpu {track}" if isinstance(track, int) else f"stream {track}"


def _arena_in_use(plan: dict[str, Any]) -> list[int]:
    """Device bytes live while each op runs, by execution order: every buffer of its own
    (not a view of another) whose lifetime [first, last] covers the order. A buffer written
    before the step (first = -1) is live from the start."""
    n = len(plan["ops"])
    delta = [0] * (n + 2)
    for b in plan.get("tensors", []):
        if b.get("alias_of") or b.get("placement", "device") != "device":
            continue
        first, last = max(b["first"], 0), min(b["last"], n - 1)
        if first <= last:
            delta[first] += b["bytes"]
            delta[last + 1] -= b["bytes"]
    in_use, total = [], 0
    for k in range(n):
        total += delta[k]
        in_use.append(total)
    return in_use


def _trace(plan: dict[str, Any], pid: int, label: str,
           spans: dict[str, tuple[float, float]], measured: bool) -> dict[str, Any]:
    ops = plan["ops"]
    streams = list(plan.get("target", {}).get("streams", []))
    tracks = sorted({t for op in ops for t in track_of(op)}, key=_track_key(streams))
    tid = {t: i + 1 for i, t in enumerate(tracks)}
    title = f"{plan.get('graph', {}).get('name', '')} on {plan.get('target', {}).get('name', '')}"
    events: list[dict[str, Any]] = [
        {"name": "process_name", "ph": "M", "pid": pid, "tid": 0,
         "args": {"name": f"{title}: {label}"}}]
    for t in tracks:
        events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid[t],
                       "args": {"name": _track_name(t)}})
        events.append({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid[t],
                       "args": {"sort_index": tid[t]}})
    timed = []
    for op in ops:
        if op["name"] not in spans:
            continue
        start, end = spans[op["name"]]
        args = {"type": op["op"], "threads": op.get("threads", 1),
                "predicted_us": (op["end"] - op["start"]) * 1e6}
        if op.get("cpus"):
            args["cpus"] = list(op["cpus"])
        else:
            args["stream"] = op.get("stream", "")
        if measured:
            args["measured_us"] = (end - start) * 1e6
        for t in track_of(op):
            timed.append({"name": op["name"], "cat": op["op"], "ph": "X", "pid": pid,
                          "tid": tid[t], "ts": start * 1e6, "dur": max(end - start, 0.0) * 1e6,
                          "args": args})
    in_use = _arena_in_use(plan)
    counters = sorted((spans[op["name"]][0], op.get("order", k), in_use[k])
                      for k, op in enumerate(ops) if op["name"] in spans)
    timed += [{"name": ARENA_COUNTER, "ph": "C", "pid": pid, "tid": 0, "ts": ts * 1e6,
               "args": {"bytes": value}} for ts, _, value in counters]
    timed.sort(key=lambda e: (e["ts"], e["tid"], e["name"]))
    return {"traceEvents": events + timed, "displayTimeUnit": "ms",
            "otherData": {"graph": plan.get("graph", {}).get("name", ""),
                          "target": plan.get("target", {}).get("name", ""), "trace": label}}


def plan_trace(plan: dict[str, Any]) -> dict[str, Any]:
    """The predicted step of `plan` (its JSON form, as `Plan.model_dump(mode="json")`)."""
    spans = {op["name"]: (op["start"], op["end"]) for op in plan["ops"]}
    return _trace(plan, PREDICTED, "predicted", spans, measured=False)


def measured_trace(plan: dict[str, Any], stats: dict[str, Any]) -> dict[str, Any]:
    """The step an executor of `plan` measured last: `stats` is its `stats()`, whose ops carry
    their `start` and `end` (seconds from the step's start). An op the executor has not run
    (no step yet) is left out; ValueError when no op has run."""
    spans = {s["name"]: (float(s["start"]), float(s["end"])) for s in stats.get("ops", [])
             if s.get("calls", 1) and "start" in s and "end" in s}
    if not spans:
        raise ValueError("the executor has not run a step yet: nothing to trace")
    return _trace(plan, MEASURED, "measured", spans, measured=True)


def side_by_side(*traces: dict[str, Any]) -> dict[str, Any]:
    """One file holding several traces (each its own process: predicted above measured), for
    a viewer that opens one file at a time."""
    return {"traceEvents": [e for t in traces for e in t["traceEvents"]],
            "displayTimeUnit": "ms",
            "otherData": {"traces": [t.get("otherData", {}) for t in traces]}}
