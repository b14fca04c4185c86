"""`planner verify`: re-check a plan without trusting the planner.

Shares no code with the scheduler; checks every pair the obvious way and names the op (or
ops) and the rule that failed. `verify_plan_data` is the list of rules, each a function below:

    unique_names   every op name appears once; execution orders are distinct
    graph_nodes    (with the graph's node names) the plan schedules exactly the graph's nodes,
                   each once, plus the ops memory planning declares it added
    placement      a CPU plan's ops have CPUs and no stream, a GPU plan's a stream of the
                   target's and no CPUs
    cpus           thread count = number of CPUs, CPUs exist on the target, end >= start
    deps           every op its `deps` name is in the plan, ends before it starts and comes
                   earlier in execution order (deps order nothing: see `ordering`)
    overlap        two ops running at the same time use disjoint logical CPUs (unless one
                   parallel-loop group) and share a physical core only if one is marked smt;
                   on a GPU, two ops of one stream never run at the same time
    edges          every happens-before edge names plan ops, goes forward in execution order
                   and is respected by the times
    lanes          lanes are numbered 0..n-1; on a GPU a lane is one stream and a stream one
                   lane; a lane's ops follow each other in time as the executor runs them
    summary        every summary figure re-derived from ops, tensors and graph
                   (planner.verify.summary)
    memory         the arena rules of planner.verify.memory (buffers sharing bytes ordered by
                   the stated ordering; an output written over its input's bytes after every
                   other reader of that input)
    inserted       (planner.verify.inserted) what the ops memory planning added read
                   and write: a recompute its node's inputs, a transfer one tensor, whole
    graph          (with an embedded graph) planner.verify.graph: the graph is valid, buffers
                   hold what it implies, and the stated ordering (lanes + happens-before edges,
                   planner.verify.order) implies every pair the graph and the inserted ops
                   need ordered, and orders every two collectives (one order on every rank);
                   a collective's bucket is the step's gradients
    variants       (planner.verify.variants) the schedule for fewer free cores: one lane in
                   execution order keeps every stated ordering; thread counts within cores
    evaluation     (a training plan's evaluation schedule) planner.verify.evaluation: derived
                   from the embedded graph, sound by these rules, its parameters and states
                   bound to the training plan's buffers of the same names

What each rule means for a user: docs/verify.md.

Example:
    >>> verify_plan_data({"backend": "cpu", "ops": [], "happens_before": [],
    ...                   "target": {"core_of": []},
    ...                   "summary": {"step_seconds": 0.0, "lower_bound_seconds": 0.0}})
    []
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from planner.ops.collective import COLLECTIVE_OPS
from planner.verify.order import StatedOrder

# Times are compared with this slack (seconds): float sums of predicted times.
TOLERANCE = 1e-9


@dataclass
class Facts:
    """What the rules read of a plan (JSON data), worked out once."""

    plan: dict[str, Any]
    node_names: list[str] | None = None
    ops: list[dict[str, Any]] = field(init=False)
    by_name: dict[str, dict[str, Any]] = field(init=False)
    core_of: list[int] = field(init=False)
    streams: list[str] = field(init=False)
    gpu: bool = field(init=False)
    hb: StatedOrder = field(init=False)

    def __post_init__(self) -> None:
        self.ops = self.plan.get("ops", [])
        self.by_name = {}
        for op in self.ops:
            self.by_name.setdefault(op["name"], op)
        target = self.plan.get("target", {})
        self.core_of = target.get("core_of", [])
        self.streams = target.get("streams", [])
        self.gpu = self.plan.get("backend") == "cuda"
        self.hb = StatedOrder(self.plan)


def verify_plan_data(plan: dict[str, Any], node_names: list[str] | None = None,
                     graphs: dict[int, Any] | None = None) -> list[str]:
    """Every rule the plan breaks, one message each naming the op(s); [] when it is sound.
    `graphs`: the graphs this check validated, by the id of their JSON data (a training plan's
    evaluation rule reads its graph and the evaluation's, each validated once per check)."""
    graphs = {} if graphs is None else graphs
    from planner.verify.graph import verify_graph_data
    from planner.verify.inserted import inserted_op_problems
    from planner.verify.memory import verify_memory_data
    from planner.verify.pins import pin_problems
    from planner.verify.ranges import range_problems
    from planner.verify.summary import summary_problems
    from planner.verify.variants import variant_problems

    facts = Facts(plan, node_names)
    problems: list[str] = []
    for rule in (unique_names, graph_nodes, placement, cpus, deps, overlap, edges, lanes):
        problems += rule(facts)
    problems += inserted_op_problems(plan)  # what the added ops (recompute, transfers) run on
    problems += summary_problems(plan)
    problems += verify_memory_data(plan, facts.hb)
    problems += pin_problems(plan)  # the user's decisions, from the options it records
    problems += variant_problems(plan)  # the schedule for fewer free cores
    problems += range_problems(plan)  # the batches a range plan serves
    if "graph" in plan:
        problems += verify_graph_data(plan, facts.hb, graphs)
    if plan.get("evaluation") is not None:
        from planner.verify.evaluation import evaluation_problems

        problems += evaluation_problems(plan, verify_plan_data, graphs)
    return problems


def unique_names(f: Facts) -> list[str]:
    """Every op name appears once; no two ops share an execution order.

    >>> ops = [{"name": "a", "order": 0}, {"name": "a", "order": 0}]
    >>> unique_names(Facts({"ops": ops}))
    ["op 'a' is scheduled more than once", "ops 'a' and 'a' share execution order 0"]
    """
    problems = []
    names: set[str] = set()
    orders: dict[int, str] = {}
    for op in f.ops:
        if op["name"] in names:
            problems.append(f"op {op['name']!r} is scheduled more than once")
        names.add(op["name"])
    for op in f.ops:
        if op["order"] in orders:
            problems.append(f"ops {orders[op['order']]!r} and {op['name']!r} share execution "
                            f"order {op['order']}")
        orders[op["order"]] = op["name"]
    return problems


def graph_nodes(f: Facts) -> list[str]:
    """With the graph's node names: every node is scheduled, and every op is a node or an op
    memory planning declares it added (recompute, offload, prefetch).

    >>> for p in graph_nodes(Facts({"ops": [{"name": "x", "order": 0}]}, ["a"])): print(p)
    op 'a' of the graph is not scheduled
    op 'x' is neither in the graph nor added by memory planning
    """
    if f.node_names is None:
        return []
    added = {m.get("name") for m in (f.plan.get("memory") or {}).get("ops", [])}
    problems = [f"op {name!r} of the graph is not scheduled" for name in f.node_names
                if name not in f.by_name]
    graph = set(f.node_names)
    problems += [f"op {name!r} is neither in the graph nor added by memory planning"
                 for name in f.by_name if name not in graph and name not in added]
    return problems


def placement(f: Facts) -> list[str]:
    """A CPU plan's ops run on logical CPUs and no stream; a GPU plan's on one of the target's
    streams and no CPUs.

    >>> placement(Facts({"backend": "cpu", "ops": [{"name": "a", "order": 0, "cpus": [],
    ...                                              "stream": "compute"}]}))
    ["op 'a' of a CPU plan must run on logical CPUs, not stream 'compute'"]
    """
    problems = []
    for op in f.ops:
        if f.gpu:
            if op.get("cpus") or op.get("stream") not in f.streams:
                problems.append(f"op {op['name']!r} of a GPU plan must run on one of the "
                                f"streams {f.streams}, not stream {op.get('stream')!r} / CPUs "
                                f"{op.get('cpus')}")
            elif (op.get("op") in COLLECTIVE_OPS) != (op.get("stream") == "comm"):
                # The executor runs the comm stream's ops through the process group only.
                problems.append(f"op {op['name']!r} ({op.get('op')}) of a GPU plan: "
                                f"collectives run on the comm stream, and nothing else does")
        elif op.get("op") in COLLECTIVE_OPS and op.get("stream") == "comm" and not op["cpus"]:
            pass  # a collective on the communication lane (planner.schedule.parallel)
        elif op.get("stream") or not op["cpus"]:
            problems.append(f"op {op['name']!r} of a CPU plan must run on logical CPUs, not "
                            f"stream {op.get('stream')!r}")
    return problems


def cpus(f: Facts) -> list[str]:
    """Thread count = number of (distinct) CPUs; every CPU exists on the target; end >= start.

    >>> op = {"name": "a", "order": 0, "cpus": [0, 5], "threads": 1, "start": 1.0, "end": 0.5}
    >>> for p in cpus(Facts({"ops": [op], "target": {"core_of": [0, 0]}})): print(p)
    op 'a' ends (0.5) before it starts (1.0)
    op 'a': 1 threads but CPUs [0, 5]
    op 'a' runs on logical CPU 5, which the target lacks
    """
    problems = []
    for op in f.ops:
        name = op["name"]
        if op["end"] < op["start"]:
            problems.append(f"op {name!r} ends ({op['end']}) before it starts ({op['start']})")
        if op["threads"] != max(1, len(op["cpus"])) or len(set(op["cpus"])) != len(op["cpus"]):
            problems.append(f"op {name!r}: {op['threads']} threads but CPUs {op['cpus']}")
        problems += [f"op {name!r} runs on logical CPU {c}, which the target lacks"
                     for c in op["cpus"] if not 0 <= c < len(f.core_of)]
    return problems


def deps(f: Facts) -> list[str]:
    """An op's `deps` name ops of the plan that end before it starts and come earlier in
    execution order. (They are for people: what must be ordered is derived from the graph.)

    >>> ops = [{"name": "a", "order": 0, "start": 0.0, "end": 1.0},
    ...        {"name": "b", "order": 1, "start": 0.5, "end": 2.0, "deps": ["a", "z"]}]
    >>> for p in deps(Facts({"ops": ops})): print(p)
    op 'b' starts at 0.5 before its dependency 'a' ends at 1.0
    op 'b' depends on op 'z', which is not scheduled (missing op)
    """
    problems = []
    for op in f.ops:
        name = op["name"]
        for dep in op.get("deps", []):
            d = f.by_name.get(dep)
            if d is None:
                problems.append(f"op {name!r} depends on op {dep!r}, which is not scheduled "
                                f"(missing op)")
                continue
            if op["start"] < d["end"] - TOLERANCE:
                problems.append(f"op {name!r} starts at {op['start']} before its dependency "
                                f"{dep!r} ends at {d['end']}")
            if op["order"] <= d["order"]:
                problems.append(f"op {name!r} comes before its dependency {dep!r} in "
                                f"execution order")
    return problems


def overlap(f: Facts) -> list[str]:
    """Ops running at the same time (predicted) use disjoint logical CPUs unless they are one
    parallel-loop group, and share a physical core only if one is marked smt; two ops of one
    stream never run at the same time.

    >>> ops = [{"name": n, "order": k, "cpus": [0], "start": 0.0, "end": 1.0}
    ...        for k, n in enumerate("ab")]
    >>> overlap(Facts({"ops": ops, "target": {"core_of": [0]}}))
    ["ops 'a' and 'b' run at the same time on logical CPUs [0]"]
    """
    problems = []
    # Per op, its logical CPUs and their physical cores.
    sets = {id(op): (set(op["cpus"]), {f.core_of[c] for c in op["cpus"]
                                       if 0 <= c < len(f.core_of)}) for op in f.ops}
    for a, b in _concurrent_pairs(f.ops):
        if a.get("stream") and a.get("stream") == b.get("stream"):
            problems.append(f"ops {a['name']!r} and {b['name']!r} run at the same time on "
                            f"stream {a['stream']!r}")
        (cpus_a, cores_a), (cpus_b, cores_b) = sets[id(a)], sets[id(b)]
        # Most concurrent pairs share no core: two disjointness tests, no sets built.
        if cpus_a.isdisjoint(cpus_b) and cores_a.isdisjoint(cores_b):
            continue
        same_group = a.get("group") and a.get("group") == b.get("group")
        shared = cpus_a & cpus_b
        if shared and not same_group:
            problems.append(f"ops {a['name']!r} and {b['name']!r} run at the same time on "
                            f"logical CPUs {sorted(shared)}")
            continue
        cores = cores_a & cores_b
        if cores and not same_group and not (a.get("smt") or b.get("smt")):
            problems.append(f"ops {a['name']!r} and {b['name']!r} share physical cores "
                            f"{sorted(cores)} at the same time, and neither is marked smt")
    return problems


def edges(f: Facts) -> list[str]:
    """Every happens-before edge names ops of the plan, goes forward in execution order, and
    its `after` op starts once its `before` op ends.

    >>> ops = [{"name": "a", "order": 0, "start": 0.0, "end": 1.0},
    ...        {"name": "b", "order": 1, "start": 0.5, "end": 2.0}]
    >>> hb = [{"before": "b", "after": "a"}, {"before": "a", "after": "z"}]
    >>> for p in edges(Facts({"ops": ops, "happens_before": hb})): print(p)
    happens-before edge 'b' -> 'a' goes against execution order
    op 'a' starts before op 'b' ends, against a happens-before edge
    happens-before edge 'a' -> 'z' names op(s) ['z'] that are not scheduled
    """
    problems = list(f.hb.problems)
    for edge in f.plan.get("happens_before", []):
        before, after = edge["before"], edge["after"]
        missing = [n for n in (before, after) if n not in f.by_name]
        if missing:
            problems.append(f"happens-before edge {before!r} -> {after!r} names op(s) "
                            f"{missing} that are not scheduled")
            continue
        if f.by_name[after]["start"] < f.by_name[before]["end"] - TOLERANCE:
            problems.append(f"op {after!r} starts before op {before!r} ends, against a "
                            f"happens-before edge")
    return problems


def lanes(f: Facts) -> list[str]:
    """Lanes are numbered 0..n-1, each used; on a GPU each lane is one stream and each stream
    one lane (the executor issues a lane's ops to one stream); the ops of a lane follow each
    other in predicted time (on a CPU, but for the members of one parallel-loop group).

    >>> ops = [{"name": "a", "order": 0, "lane": 1, "start": 0.0, "end": 1.0},
    ...        {"name": "b", "order": 1, "lane": 1, "start": 0.5, "end": 2.0}]
    >>> for p in lanes(Facts({"ops": ops})): print(p)
    the plan's lanes are [1], not 0..0: the executor runs one thread or stream per lane number
    op 'b' starts at 0.5 on lane 1 before op 'a' ends there at 1.0
    """
    problems = []
    used = sorted({op.get("lane") for op in f.ops}, key=lambda k: (not isinstance(k, int), k))
    if used != list(range(len(used))):
        problems.append(f"the plan's lanes are {used}, not 0..{len(used) - 1}: the executor "
                        f"runs one thread or stream per lane number")
    if f.gpu:
        problems += _one_stream_per_lane(f.ops)
    runs: dict[Any, tuple[list, list]] = {}  # lane -> (its previous run, its current run)
    for op in sorted(f.ops, key=lambda o: o["order"]):
        previous, run = runs.get(op.get("lane"), ([], []))
        if not (run and not f.gpu and op.get("group") and run[-1].get("group") == op.get("group")):
            previous, run = run, []
            runs[op.get("lane")] = (previous, run)
        run.append(op)
        late = next((p for p in previous if op["start"] < p["end"] - TOLERANCE), None)
        if late is not None:
            problems.append(f"op {op['name']!r} starts at {op['start']} on lane "
                            f"{op.get('lane')} before op {late['name']!r} ends there at "
                            f"{late['end']}")
    return problems


def _one_stream_per_lane(ops: list[dict[str, Any]]) -> list[str]:
    stream_of: dict[Any, str] = {}
    lane_of: dict[str, Any] = {}
    problems = []
    for op in ops:
        lane, stream = op.get("lane"), op.get("stream")
        if stream_of.setdefault(lane, stream) != stream:
            problems.append(f"op {op['name']!r} is on lane {lane} with stream {stream!r}, "
                            f"but lane {lane} is stream {stream_of[lane]!r}")
        elif lane_of.setdefault(stream, lane) != lane:
            problems.append(f"op {op['name']!r} is on stream {stream!r} in lane {lane}, but "
                            f"stream {stream!r} is lane {lane_of[stream]}")
    return problems


def _concurrent_pairs(ops: list[dict[str, Any]]):
    """Every pair of ops whose time intervals overlap (by more than the slack), earlier order
    first: a sweep over start times, so the cost follows the pairs, not n^2."""
    by_start = sorted(ops, key=lambda o: (o["start"], o["order"]))
    active: list[dict[str, Any]] = []
    for b in by_start:
        start, end = b["start"], b["end"] - TOLERANCE
        active = [a for a in active if a["end"] - TOLERANCE > start]
        for a in active:  # each ends after b starts (by more than the slack)
            if a["start"] < end:
                yield (a, b) if a["order"] < b["order"] else (b, a)
        active.append(b)


def verify_plan(plan) -> list[str]:
    """verify_plan_data of a Plan record, against its embedded graph's nodes."""
    # The same data the plan's file holds (made once per plan: writing it reuses them). Its
    # graphs are the record's own, validated records (their data is their dump): the rules
    # check them as they would a file's, without validating the dump again.
    data = plan.json_data
    graphs = {id(data["graph"]): plan.graph}
    if plan.evaluation is not None:
        graphs[id(data["evaluation"]["plan"]["graph"])] = plan.evaluation.plan.graph
    return verify_plan_data(data, [n.name for n in plan.graph.nodes], graphs)


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
