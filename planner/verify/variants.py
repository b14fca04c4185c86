"""The plan's schedule variants for fewer free cores (planner.memory.variants), checked
like the main schedule.

A variant runs every op of the plan on one unpinned lane in execution order (`order`), each
with its own thread count. That is safe exactly when execution order implies the stated
ordering: every happens-before edge goes forward in it (a lane's ops follow it by definition,
and the graph rule, planner.verify.graph, checks the stated ordering implies every pair the
graph needs). So the rules are: that, one thread count per op in 1..cores, cores within the
target's physical cores, one name per count, largest first; and no variants where one lane
cannot stand for the plan (a GPU's streams; a data-parallel plan's comm lane, whose
collectives every rank must issue in one order).

A thread count whose kernel asks more scratch than the op's planned area is not refused here
(the scratch a kernel asks depends on the cost table, which the plan does not embed): the
executor gives such a kernel a block of its own and counts it (stats: unplanned bytes).

Example:
    >>> plan = {"backend": "cpu", "target": {"core_of": [0, 1]}, "happens_before": [],
    ...         "ops": [{"name": "a", "op": "Relu", "order": 0}],
    ...         "variants": [{"name": "cores-3", "cores": 3, "threads": [3, 1]}]}
    >>> for p in variant_problems(plan): print(p)
    variant 'cores-3': 3 cores on a target of 2
    variant 'cores-3': 2 thread counts for 1 ops
"""

from __future__ import annotations

from typing import Any

from planner.ops.collective import COLLECTIVE_OPS


def variant_problems(plan: dict[str, Any]) -> list[str]:
    """Every rule the plan's variants break, one message each; [] when they are sound."""
    variants = plan.get("variants") or []
    if not variants:
        return []
    ops = plan.get("ops", [])
    if plan.get("backend") != "cpu":
        return ["a GPU plan has no schedule variants (its streams are its own)"]
    collective = next((op["name"] for op in ops if op.get("op") in COLLECTIVE_OPS), None)
    if collective is not None:
        return [f"schedule variants in a plan with collective op {collective!r}: every rank "
                f"must issue its collectives in the order of the comm lane"]
    cores = len(set(plan.get("target", {}).get("core_of", [])))
    problems: list[str] = []
    previous = None
    for v in variants:
        name, k, threads = v.get("name"), v.get("cores", 0), v.get("threads", [])
        if name != f"cores-{k}":
            problems.append(f"variant {name!r}: named other than its {k} cores")
        if not 1 <= k <= cores:
            problems.append(f"variant {name!r}: {k} cores on a target of {cores}")
        if previous is not None and k >= previous:
            problems.append(f"variant {name!r}: after a variant of {previous} cores (largest "
                            f"first, one per count)")
        previous = k
        if len(threads) != len(ops):
            problems.append(f"variant {name!r}: {len(threads)} thread counts for {len(ops)} ops")
        # An op may keep the main schedule's thread count (planner.memory.variants'
        # THREAD_BOUND: its bits depend on it), oversubscribing the variant's cores.
        problems += [f"variant {name!r}: op {op['name']!r} on {t} threads, outside 1..{k} "
                     f"and not its main schedule's {op.get('threads')}"
                     for op, t in zip(sorted(ops, key=lambda o: o["order"]), threads,
                                      strict=False) if not (1 <= t <= k or t == op.get("threads"))]
    order = {op["name"]: op.get("order", 0) for op in ops}
    problems += [f"variants run op {e['after']!r} before {e['before']!r}, which must end "
                 f"before it starts (execution order breaks a happens-before edge)"
                 for e in plan.get("happens_before", [])
                 if order.get(e["before"], -1) >= order.get(e["after"], -1)]
    return problems
