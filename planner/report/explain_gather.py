"""`planner explain PLAN allgather/<k>`: why a ZeRO-3 all-gather (planner plan
--shard-parameters) is issued where it is, from the plan: the compute ops ordered between the
op it is issued behind and its first reader; the predicted time from that op's end to when the
reader could start but for the gather (its other predecessors' ends), against the gather's own
(the rest is the seconds the reader waits); the bytes its gathered copy holds while it waits;
and what bounds it from starting earlier (planner.schedule.parallel's memory bound: the
previous gather's first reader, or the last reader of its bucket's forward copy), the comm lane
busy with the collective before it, or memory planning's reuse of bytes. Times, not op counts:
on co-running CPU lanes the ops ordered before a reader may run beside one another.

Example:
    >>> from planner.frontend.autodiff import Optimizer, make_training_graph
    >>> from planner.pipeline import PlanOptions, plan
    >>> from planner.schedule.parallel import DataParallelOptions
    >>> from planner.target import preset
    >>> from planner.zoo import build
    >>> g = make_training_graph(build("mlp", batch=8, hidden=[16, 16], in_features=8,
    ...                               classes=4), Optimizer(kind="sgd"))
    >>> p = plan(g, preset("xeon-8180"), options=PlanOptions(data_parallel=DataParallelOptions(
    ...     ranks=2, bucket_bytes=64, shard_parameters=True)))
    >>> e = explain_gather(p, "allgather/1")
    >>> e["first_reader"], e["prefetch"] == len(e["overlaps"])
    ('fc2', True)
"""

from __future__ import annotations

from typing import Any

from planner.errors import UserError
from planner.plan import Plan
from planner.step.collectives.sharded_parameters import backward_start


def explain_gather(plan: Plan, name: str) -> dict[str, Any]:
    """The decision behind all-gather `name` (module docstring)."""
    graph = plan.graph
    node = graph.node_map.get(name)
    if node is None or node.op != "AllGather":
        raise UserError(f"no all-gather {name!r} in the plan")
    ops = sorted(plan.ops, key=lambda o: o.order)
    at = {o.name: k for k, o in enumerate(ops)}
    me = ops[at[name]]
    compute = [o for o in ops if o.cpus]
    index = {o.name: k for k, o in enumerate(compute)}
    readers: dict[str, list[int]] = {}
    for n in graph.nodes:
        if n.name in index:
            for t in n.inputs:
                readers.setdefault(t, []).append(index[n.name])
    first = min(i for t in node.outputs for i in readers.get(t, [len(compute)]))
    behind = [e.before for e in plan.happens_before if e.after == name and e.before in index]
    start = max((index[b] + 1 for b in behind), default=0)
    overlaps = compute[start:first]
    seconds = me.end - me.start
    issuer_end = max((compute[index[b]].end for b in behind), default=0.0)
    # Times, not op counts (co-running lanes): the time from its issuer's end to when its
    # reader could start but for it (its other predecessors' ends) covers it, or its reader
    # waits the rest.
    reader = compute[first] if first < len(compute) else None
    ready = max((ops[at[e.before]].end for e in plan.happens_before if reader is not None
                 and e.after == reader.name and e.before != name), default=issuer_end)
    covered = max(0.0, ready - issuer_end)
    stall = max(0.0, me.end - ready) if reader is not None else 0.0
    # the memory bound: not before the previous gather's first reader, nor before the last
    # reader of its bucket's earlier copy
    gathers = [n for n in graph.nodes if n.op == "AllGather"]
    firsts = {g.name: min(i for t in g.outputs for i in readers.get(t, [len(compute)]))
              for g in gathers}
    earlier = [firsts[g.name] for g in gathers if firsts[g.name] < first]
    bound = max(earlier, default=0)
    same = [max(i for t in g.outputs for i in readers.get(t, [0])) + 1 for g in gathers
            if g.inputs == node.inputs and firsts[g.name] < first]
    bound = max([bound, *same])
    nbytes = sum(graph.tensor_map[t].nbytes for t in node.outputs)
    # Why not earlier, where its reader waits: the comm lane still busy with the collective
    # before it; else issued at its memory bound; else behind an op whose bytes its copy
    # reuses (memory planning's ordering edge).
    previous = [o for o in ops[:at[name]] if o.stream == me.stream and not o.cpus]
    if stall > 0 and previous and me.start > issuer_end and previous[-1].end >= me.start:
        why = f"the comm lane is busy until {previous[-1].name} ends"
    elif stall > 0 and (start <= bound or issuer_end <= min(
            (o.end for o in compute[max(bound - 1, 0):first]), default=issuer_end)):
        # at its bound, or behind the op that ends first of those the bound allows (they
        # co-run: none ends earlier)
        why = (f"the memory bound, {compute[bound].name if bound < len(compute) else ''} (the "
               f"previous gather's first reader, or the last reader of its bucket's forward "
               f"copy): earlier, one more gathered bucket would wait ahead of compute")
    elif stall > 0:
        why = (f"its copy reuses bytes that {behind[0] if behind else 'an op'} frees (memory "
               f"planning orders it after)")
    else:
        why = (f"the time before its reader already covers it; earlier, its {nbytes:,} bytes "
               f"would be held longer for nothing")
    return {"all_gather": name, "bytes": nbytes, "seconds": seconds,
            "first_reader": compute[first].name if first < len(compute) else "",
            "prefetch": me.prefetch, "issued_after": behind[0] if behind else "",
            "overlaps": [o.name for o in overlaps], "covered_seconds": covered,
            "stall_seconds": stall, "not_earlier": why,
            "keep": node.attrs.get("keep"), "keep_gap_seconds": _keep_gap(plan, node, at, ops)}


def _keep_gap(plan: Plan, node: Any, at: dict[str, int], ops: list[Any]) -> float | None:
    """The keep decision's price, for a forward all-gather: the predicted time from its copy's
    last forward reader's end to its bucket's first backward reader's start (kept: its bytes
    held over it; freed: the bytes that time saves, for one more all-gather); None else."""
    if node.attrs.get("keep") is None:
        return None
    graph = plan.graph
    bwd = backward_start(graph)
    index = {n.name: i for i, n in enumerate(graph.nodes)}
    again = [g for g in graph.nodes if g.op == "AllGather" and g.inputs == node.inputs]
    copies = {t for g in again for t in g.outputs}
    reads = [(index[n.name], ops[at[n.name]]) for n in graph.nodes
             if n.name in at and copies & set(n.inputs)]
    forward = [o.end for i, o in reads if i < bwd]
    backward = [o.start for i, o in reads if i >= bwd]
    if not forward or not backward:
        return None
    return max(0.0, min(backward) - max(forward))


def format_gather(e: dict[str, Any]) -> str:
    us = 1e6
    lines = [f"all-gather {e['all_gather']}: {e['bytes']:,} bytes, predicted "
             f"{e['seconds'] * us:.1f} us on the comm lane; issued {e['prefetch']} op(s) ahead "
             f"of its first reader {e['first_reader']}"
             + (f", after {e['issued_after']}" if e["issued_after"] else ", at the step's start")]
    lines.append(f"  it overlaps {', '.join(e['overlaps']) or 'no op'}; its reader could "
                 f"start {e['covered_seconds'] * us:.1f} us after the op it is issued behind "
                 f"ends: "
                 + ("its reader does not wait for it" if e["stall_seconds"] <= 0 else
                    f"its reader waits {e['stall_seconds'] * us:.1f} us"))
    lines.append(f"  not earlier: {e['not_earlier']}")
    gap = e.get("keep_gap_seconds")
    price = ("" if gap is None else
             f" ({e['bytes']:,} bytes over the {gap * us:.1f} us between them, against one "
             f"more all-gather of {e['seconds'] * us:.1f} us)")
    if e["keep"] is not None:
        lines.append("  its copy is kept for backward's readers (no other bucket is read "
                     f"between its last forward and first backward reader){price}" if e["keep"]
                     else "  its copy is freed after its last forward reader and gathered "
                     f"again for backward{price}")
    return "\n".join(lines)
