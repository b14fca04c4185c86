"""`planner verify`: re-check a plan without trusting the planner.

Shares no code with the scheduler; checks every pair the obvious way and names the op (or
ops) and the rule that failed:

    unique       every op name appears once; execution orders are distinct
    deps         every dependency is an op of the plan (a missing op is named), starts after
                 its dependency ends and comes later in execution order
    graph        (with the graph) the plan schedules exactly the graph's nodes, each once
    backend      a CPU plan's ops have CPUs and no stream, a GPU plan's a stream of the
                 target's and no CPUs
    cpus         thread count = number of CPUs, CPUs exist on the target, end >= start
    overlap      two ops running at the same time use disjoint logical CPUs (unless one
                 parallel-loop group) and share a physical core only if one is marked smt;
                 on a GPU, two ops of one stream never run at the same time
    edges        every happens-before edge names plan ops and is respected by the times
    summary      step time = last end; the lower bound is at most the step time
    memory       the arena rules of planner.memory.verify
    graph        (with an embedded graph) the rules of planner.verify_graph: the graph is
                 valid, and the data and in-place dependencies, buffer bytes, writers, readers
                 and aliases the plan declares are the ones the graph implies

Example:
    >>> verify_plan_data({"backend": "cpu", "ops": [], "happens_before": [],
    ...                   "target": {"core_of": []},
    ...                   "summary": {"step_seconds": 0.0, "lower_bound_seconds": 0.0}})
    []
"""

from __future__ import annotations

import json
from typing import Any

# Times are compared with this slack (seconds): float sums of predicted times.
TOLERANCE = 1e-9


def verify_plan_data(plan: dict[str, Any], node_names: list[str] | None = None) -> list[str]:
    """Every rule the plan breaks, one message each naming the op(s); [] when it is sound."""
    problems: list[str] = []
    ops = plan.get("ops", [])
    core_of = plan.get("target", {}).get("core_of", [])
    streams = plan.get("target", {}).get("streams", [])
    gpu = plan.get("backend") == "cuda"
    by_name: dict[str, dict[str, Any]] = {}
    for op in ops:
        if op["name"] in by_name:
            problems.append(f"op {op['name']!r} is scheduled more than once")
        by_name[op["name"]] = op
    orders: dict[int, str] = {}
    for op in ops:
        if op["order"] in orders:
            problems.append(f"ops {orders[op['order']]!r} and {op['name']!r} share execution "
                            f"order {op['order']}")
        orders[op["order"]] = op["name"]
    if node_names is not None:
        # Memory planning adds ops of its own (recompute, offload, prefetch); it declares them.
        added = {m.get("name") for m in (plan.get("memory") or {}).get("ops", [])}
        for name in node_names:
            if name not in by_name:
                problems.append(f"op {name!r} of the graph is not scheduled")
        graph_names = set(node_names)
        for name in by_name:
            if name not in graph_names and name not in added:
                problems.append(f"op {name!r} is neither in the graph nor added by memory "
                                f"planning")
    for op in ops:
        name = op["name"]
        if op["end"] < op["start"]:
            problems.append(f"op {name!r} ends ({op['end']}) before it starts ({op['start']})")
        if gpu:
            if op.get("cpus") or op.get("stream") not in streams:
                problems.append(f"op {name!r} of a GPU plan must run on one of the streams "
                                f"{streams}, not stream {op.get('stream')!r} / CPUs "
                                f"{op.get('cpus')}")
        elif op.get("stream") or not op["cpus"]:
            problems.append(f"op {name!r} of a CPU plan must run on logical CPUs, not stream "
                            f"{op.get('stream')!r}")
        if op["threads"] != max(1, len(op["cpus"])) or len(set(op["cpus"])) != len(op["cpus"]):
            problems.append(f"op {name!r}: {op['threads']} threads but CPUs {op['cpus']}")
        for c in op["cpus"]:
            if not 0 <= c < len(core_of):
                problems.append(f"op {name!r} runs on logical CPU {c}, which the target lacks")
        for dep in op.get("deps", []):
            if dep not in by_name:
                problems.append(f"op {name!r} depends on op {dep!r}, which is not scheduled "
                                f"(missing op)")
                continue
            d = by_name[dep]
            if op["start"] < d["end"] - TOLERANCE:
                problems.append(f"op {name!r} starts at {op['start']} before its dependency "
                                f"{dep!r} ends at {d['end']}")
            if op["order"] <= d["order"]:
                problems.append(f"op {name!r} comes before its dependency {dep!r} in "
                                f"execution order")
    # Each op's logical CPUs and physical cores, as sets once (an op meets many others).
    cpu_sets = {id(op): set(op["cpus"]) for op in ops}
    core_sets = {id(op): {core_of[c] for c in op["cpus"] if 0 <= c < len(core_of)}
                 for op in ops}
    for a, b in _concurrent_pairs(ops):
        same_group = a.get("group") and a.get("group") == b.get("group")
        if a.get("stream") and a.get("stream") == b.get("stream"):
            problems.append(f"ops {a['name']!r} and {b['name']!r} run at the same time on "
                            f"stream {a['stream']!r}")
        shared = cpu_sets[id(a)] & cpu_sets[id(b)]
        if shared and not same_group:
            problems.append(f"ops {a['name']!r} and {b['name']!r} run at the same time on "
                            f"logical CPUs {sorted(shared)}")
            continue
        cores_a, cores_b = core_sets[id(a)], core_sets[id(b)]
        if cores_a & cores_b and not same_group and not (a.get("smt") or b.get("smt")):
            problems.append(f"ops {a['name']!r} and {b['name']!r} share physical cores "
                            f"{sorted(cores_a & cores_b)} at the same time, and neither is "
                            f"marked smt")
    for edge in plan.get("happens_before", []):
        before, after = edge["before"], edge["after"]
        missing = [n for n in (before, after) if n not in by_name]
        if missing:
            problems.append(f"happens-before edge {before!r} -> {after!r} names op(s) "
                            f"{missing} that are not scheduled")
            continue
        if by_name[after]["start"] < by_name[before]["end"] - TOLERANCE:
            problems.append(f"op {after!r} starts before op {before!r} ends, against a "
                            f"happens-before edge")
    summary = plan.get("summary", {})
    last = max((op["end"] for op in ops), default=0.0)
    step = summary.get("step_seconds", 0.0)
    if abs(step - last) > TOLERANCE + 1e-9 * last:
        problems.append(f"summary step_seconds {step} is not the last op's end {last}")
    if summary.get("lower_bound_seconds", 0.0) > step + TOLERANCE:
        problems.append(f"summary lower bound {summary['lower_bound_seconds']} exceeds the "
                        f"step time {step}")
    from planner.memory.verify import verify_memory_data  # arena rules, checked pair by pair
    from planner.verify_graph import verify_graph_data  # what the embedded graph implies

    problems += verify_memory_data(plan)
    from planner.memory.verify_inserted import inserted_op_problems  # what added ops run on

    problems += inserted_op_problems(plan)
    if "graph" in plan:
        problems += verify_graph_data(plan)
    return problems


def _concurrent_pairs(ops: list[dict[str, Any]]):
    """Every pair of ops whose time intervals overlap (by more than the slack), earlier order
    first: a sweep over start times, so the cost follows the pairs, not n^2."""
    by_start = sorted(ops, key=lambda o: (o["start"], o["order"]))
    active: list[dict[str, Any]] = []
    for b in by_start:
        active = [a for a in active if a["end"] - TOLERANCE > b["start"]]
        for a in active:
            if b["start"] < a["end"] - TOLERANCE and a["start"] < b["end"] - TOLERANCE:
                yield (a, b) if a["order"] < b["order"] else (b, a)
        active.append(b)


def verify_plan(plan) -> list[str]:
    """verify_plan_data of a Plan record, against its embedded graph's nodes."""
    # The same data the plan's file holds (made once per plan: writing it reuses them).
    return verify_plan_data(plan.json_data, [n.name for n in plan.graph.nodes])


def verify_plan_text(text: str, node_names: list[str] | None = None) -> list[str]:
    """verify_plan_data of a plan file's text; a problem list for unreadable JSON too."""
    from planner.plan import plan_data_problem

    try:
        data = json.loads(text)
    except ValueError as e:
        return [f"not JSON: {e}"]
    except RecursionError:
        return ["not a plan: JSON nested too deeply"]
    problem = plan_data_problem(data)  # the rules below read fields of the types it checks
    if problem:
        return [problem]
    try:
        return verify_plan_data(data, node_names)
    except (KeyError, TypeError, AttributeError, ValueError) as e:
        return [f"malformed plan: missing or wrong field {e}"]
