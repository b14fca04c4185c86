"""Plan diff: what changed between two plans of one model, for code review.

Every decision a plan records is compared, so that review by diff misses none of them:

    inputs      schema, backend, kind, target (name, cores, streams), the embedded graph,
                provenance
    summary     predicted times (step, bound, ratio, ...) and memory numbers (arena, LOAD, ...)
    ops         per op: threads, CPUs, stream, lane, group, SMT flag, affinity, dependencies,
                a GPU kernel's threads per block, a ZeRO-3 all-gather's prefetch distance; the
                execution order; ops in one plan only
    tensors     per buffer: offset, bytes, placement (device / host), lifetime, alias
    memory ops  recomputes, offloads and prefetches memory planning added
    convs       per convolution: algorithm, workspace bytes, time and its source
    edges       happens-before edges added or removed

Integers (bytes, offsets, counts) compare exactly; floats (seconds, ratios) up to rounding
(relative 1e-9), so that a replanned file that differs only in the last digits of a predicted
time is no change to review. Predicted per-op start and end times are not compared one by
one: the summary's step time says whether the timing moved.

Example:
    >>> diff_plans({"summary": {"step_seconds": 1.0}, "ops": []},
    ...            {"summary": {"step_seconds": 1.0 + 1e-15}, "ops": []})["different"]
    False
    >>> d = diff_plans({"ops": [], "tensors": [{"name": "x", "offset": 0, "bytes": 64}]},
    ...                {"ops": [], "tensors": [{"name": "x", "offset": 64, "bytes": 64}]})
    >>> d["different"], d["tensors"]["changed"]
    (True, [{'name': 'x', 'offset': [0, 64]}])
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Sequence
from typing import Any

SUMMARY_FIELDS = ("step_seconds", "lower_bound_seconds", "ratio", "utilization", "mean_corun")
OP_FIELDS = ("threads", "cpus", "stream", "lane", "group", "smt", "affinity", "deps", "block",
             "prefetch")
TENSOR_FIELDS = ("offset", "bytes", "placement", "first", "last", "alias_of", "tensor",
                 "writer", "readers")
MEMORY_OP_FIELDS = ("kind", "node", "inputs", "outputs")
CONV_FIELDS = ("algorithm", "workspace_bytes", "seconds", "source")
HEADER_FIELDS = ("schema", "kind")
PROVENANCE_FIELDS = ("graph_sha256", "target_sha256", "costs_sha256", "options", "tool")
# Items listed per section in the text form (the JSON form lists them all).
SHOWN = 10


def _op_changes(ops_a: dict[str, Any], ops_b: dict[str, Any]
                ) -> tuple[dict[str, list[dict[str, Any]]], list[str]]:
    """Of the ops both plans have: per op type, each op's changed fields; and the ops whose
    execution order changed."""
    both = sorted(ops_a.keys() & ops_b.keys())
    by_type: dict[str, list[dict[str, Any]]] = {}
    for name in both:
        changed = _changed(ops_a[name], ops_b[name], OP_FIELDS)
        if changed:
            by_type.setdefault(ops_a[name]["op"], []).append({"name": name, **changed})
    return by_type, [n for n in both if ops_a[n].get("order") != ops_b[n].get("order")]


def _edge_changes(a: dict[str, Any], b: dict[str, Any]) -> dict[str, list[list[str]]]:
    """The happens-before edges b adds to a's, and those it removes."""
    edges_a = {(e["before"], e["after"]) for e in a.get("happens_before") or ()}
    edges_b = {(e["before"], e["after"]) for e in b.get("happens_before") or ()}
    return {"added": [list(e) for e in sorted(edges_b - edges_a)],
            "removed": [list(e) for e in sorted(edges_a - edges_b)]}


def diff_plans(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Every difference between two plans' JSON data (module docstring).

    Returns {different, backends, header: {schema / kind: [a, b]}, targets, target_changed,
    graph_changed, graph (graph_changes), provenance, options (option_changes),
    decisions (op_decisions), cpus: [logical CPUs of a, of b],
    summary: {field: [a, b, b - a]}, memory_summary: {field: [a, b]},
    by_type: {op: [{name, field: [a, b]}]}, order_changed, only_a, only_b,
    tensors / memory_ops / convs: {changed: [{name, field: [a, b]}], only_a, only_b},
    edges: {added: [[before, after]], removed: [...]}}."""
    sa, sb = a.get("summary") or {}, b.get("summary") or {}
    summary = {f: [sa.get(f), sb.get(f), (sb.get(f) or 0) - (sa.get(f) or 0)]
               for f in SUMMARY_FIELDS if not _same(sa.get(f), sb.get(f))}
    ma, mb = sa.get("memory") or {}, sb.get("memory") or {}
    memory_summary = {f: [ma.get(f), mb.get(f)] for f in sorted(ma.keys() | mb.keys())
                      if not _same(ma.get(f), mb.get(f))}
    ops_a = _by_name(a.get("ops"), "name")
    ops_b = _by_name(b.get("ops"), "name")
    by_type, order_changed = _op_changes(ops_a, ops_b)
    mem_a, mem_b = a.get("memory") or {}, b.get("memory") or {}
    tensors = _records(a.get("tensors"), b.get("tensors"), "name", TENSOR_FIELDS)
    memory_ops = _records(mem_a.get("ops"), mem_b.get("ops"), "name", MEMORY_OP_FIELDS)
    convs = _records(mem_a.get("convs"), mem_b.get("convs"), "node", CONV_FIELDS)
    edges = _edge_changes(a, b)
    ta, tb = a.get("target") or {}, b.get("target") or {}
    pa, pb = a.get("provenance") or {}, b.get("provenance") or {}
    provenance = _changed(pa, pb, PROVENANCE_FIELDS)
    options = option_changes(pa.get("options"), pb.get("options"))
    backends = [a.get("backend", "cpu"), b.get("backend", "cpu")]
    header = {f: [a.get(f), b.get(f)] for f in HEADER_FIELDS if a.get(f) != b.get(f)}
    target_changed = ta != tb
    graph_changed = a.get("graph") != b.get("graph")
    graph = graph_changes(a.get("graph") or {}, b.get("graph") or {}) if graph_changed else {}
    only_a = sorted(ops_a.keys() - ops_b.keys())
    only_b = sorted(ops_b.keys() - ops_a.keys())
    from planner.report.placement import placements

    # Why the memory ops differ, in explain's words; and the budget, the usual reason.
    pl_a, pl_b = placements(a), placements(b)
    placement = {t: [pl_a.get(t, "kept"), pl_b.get(t, "kept")]
                 for t in sorted(pl_a.keys() | pl_b.keys()) if pl_a.get(t) != pl_b.get(t)}
    budget = [_budget_bytes(pa), _budget_bytes(pb)]
    strategies = _strategies(sa, sb)
    different = bool(
        strategies["switch"] or summary or memory_summary or by_type or order_changed
        or only_a or only_b
        or any(_any(s) for s in (tensors, memory_ops, convs, edges))
        or provenance or backends[0] != backends[1] or target_changed or graph_changed
        or header)
    return {"different": different, "backends": backends, "header": header,
            "targets": [ta.get("name"), tb.get("name")], "target_changed": target_changed,
            "graph_changed": graph_changed, "graph": graph, "provenance": provenance,
            "summary": summary, "memory_summary": memory_summary, "by_type": by_type,
            "order_changed": len(order_changed), "only_a": only_a, "only_b": only_b,
            "tensors": tensors, "memory_ops": memory_ops, "convs": convs, "edges": edges,
            "placement": placement, "budget": budget, "options": options,
            **strategies,
            "decisions": op_decisions(ops_a, ops_b),
            "cpus": [len(ta.get("core_of") or []), len(tb.get("core_of") or [])]}


# Listed first among changed options: the switch that moves every other decision.
FIRST_OPTIONS = ("schedule.strategy",)


def _strategies(sa: dict[str, Any], sb: dict[str, Any]) -> dict[str, Any]:
    """The two summaries' strategies, and why a budget changed either (Summary.strategy_switch)
    where that differs (None where it does not)."""
    switch = [sa.get("strategy_switch"), sb.get("strategy_switch")]
    return {"strategy": [sa.get("strategy"), sb.get("strategy")],
            "switch": switch if switch[0] != switch[1] else None}


def option_changes(a: Any, b: Any) -> dict[str, list[Any]]:
    """The planning options (provenance.options, free-form in the schema) that differ, field by
    field as dotted paths, the strategy first; the memory budget is its own line.

    >>> option_changes({"schedule": {"strategy": "optimized", "smt": True}, "variants": True},
    ...                {"schedule": {"strategy": "paper", "smt": False}, "variants": True})
    {'schedule.strategy': ['optimized', 'paper'], 'schedule.smt': [True, False]}
    """
    fa, fb = _flat(a), _flat(b)
    paths = [f for f in sorted(fa.keys() | fb.keys())
             if f != "memory.budget_bytes" and not _same(fa.get(f), fb.get(f))]
    paths.sort(key=lambda f: (f not in FIRST_OPTIONS, f))
    return {f: [fa.get(f), fb.get(f)] for f in paths}


def _flat(v: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(v, dict):
        return {prefix or "options": v} if v is not None or prefix else {}
    out: dict[str, Any] = {}
    for k, x in v.items():
        out |= _flat(x, f"{prefix}.{k}" if prefix else str(k))
    return out


def op_decisions(ops_a: dict[str, Any], ops_b: dict[str, Any]) -> dict[str, Any]:
    """The per-op decisions of two plans summed up, for a review of many changed ops at once:
    per field the ops (of both plans) whose value changed; the thread counts of those whose
    count changed (lowest and highest in each plan), the mean over every op and the op whose
    count changed most; the lanes;
    the parallel-loop groups (by name: planner.schedule.cpu.group_name) of one plan only; the
    ops on second hardware threads.

    >>> a = {"x": {"threads": 2, "lane": 0, "group": ""}, "y": {"threads": 2, "lane": 0}}
    >>> b = {"x": {"threads": 8, "lane": 0, "group": "corun:x"},
    ...      "y": {"threads": 4, "lane": 1, "group": "corun:x"}}
    >>> d = op_decisions(a, b)
    >>> d["changed"], d["lanes"], d["groups"]["only_b"]
    ({'threads': 2, 'lane': 1, 'group': 2}, [1, 2], ['corun:x'])
    >>> d["threads"]
    {'a': [2, 2], 'b': [4, 8], 'mean': [2.0, 6.0], 'most': ['x', 2, 8]}
    """
    both = sorted(ops_a.keys() & ops_b.keys())
    changed = {f: n for f in OP_FIELDS
               if (n := sum(not _same(ops_a[k].get(f), ops_b[k].get(f)) for k in both))}
    moved = [k for k in both if ops_a[k].get("threads") != ops_b[k].get("threads")]

    def span(ops: dict[str, Any]) -> list[Any]:
        counts = [ops[k].get("threads") or 0 for k in moved]
        return [min(counts), max(counts)] if counts else []

    def mean(ops: dict[str, Any]) -> float:
        return round(sum(o.get("threads") or 0 for o in ops.values()) / max(len(ops), 1), 3)

    def groups(ops: dict[str, Any]) -> set[str]:
        return {o["group"] for o in ops.values() if o.get("group")}

    def change(k: str) -> int:
        return abs((ops_b[k].get("threads") or 0) - (ops_a[k].get("threads") or 0))

    most = max(moved, key=lambda k: (change(k), k), default=None)
    ga, gb = groups(ops_a), groups(ops_b)
    return {"changed": changed,
            "threads": {"a": span(ops_a), "b": span(ops_b), "mean": [mean(ops_a), mean(ops_b)],
                        "most": [most, ops_a[most].get("threads"), ops_b[most].get("threads")]
                        if most else []},
            "lanes": [len({o.get("lane") for o in ops.values()}) for ops in (ops_a, ops_b)],
            "groups": {"count": [len(ga), len(gb)], "only_a": sorted(ga - gb),
                       "only_b": sorted(gb - ga)},
            "smt": [sum(bool(o.get("smt")) for o in ops.values()) for ops in (ops_a, ops_b)]}


def _without_layouts(g: dict[str, Any]) -> dict[str, Any]:
    """An embedded graph with its tensors' layouts left out: the model the user gave."""
    tensors = [{k: v for k, v in t.items() if k != "layout"} if isinstance(t, dict) else t
               for t in g.get("tensors") or ()]
    return {**g, "tensors": tensors}


def _budget_bytes(provenance: dict[str, Any]) -> Any:
    """The memory budget a plan was made with, from its provenance.options (a free-form record
    the plan's schema does not type: anything else there reads as no budget)."""
    options = provenance.get("options")
    memory = options.get("memory") if isinstance(options, dict) else None
    return memory.get("budget_bytes") if isinstance(memory, dict) else None


FEEDS = ("input", "label")


def graph_changes(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """How two embedded graphs differ, as a reviewer reads it: the feeds whose shapes changed
    (two plans of one model for two batch sizes or sequence lengths), how many other tensors
    changed shape with them, the tensors held in another layout (images kept channel-blocked
    on one host and not on another: planner.step.blocked), the nodes of one graph only and
    those whose attributes changed (a reshape's target shape, a convolution's kernel layout).
    `model_changed` is False when the graphs differ in tensor layouts only: the same model,
    whose layouts each target chose.

    >>> t = lambda n, s, r="activation": {"name": n, "shape": s, "role": r}
    >>> g = lambda b: {"tensors": [t("x", [b, 3], "input"), t("h", [b, 4])],
    ...                "nodes": [{"name": "fc", "op": "MatMul", "attrs": {}}]}
    >>> graph_changes(g(32), g(4))["feeds"], graph_changes(g(32), g(4))["reshaped"]
    ([['x', [32, 3], [4, 3]]], 1)
    >>> blocked = g(4)
    >>> blocked["tensors"][1]["layout"] = "nChw16c"
    >>> graph_changes(g(4), blocked)["relaid"], graph_changes(g(4), blocked)["model_changed"]
    ([['h', 'plain', 'nChw16c']], False)
    """
    ta, tb = _by_name(a.get("tensors"), "name"), _by_name(b.get("tensors"), "name")
    na, nb = _by_name(a.get("nodes"), "name"), _by_name(b.get("nodes"), "name")
    both = sorted(ta.keys() & tb.keys())
    moved = [n for n in both if list(ta[n].get("shape") or []) != list(tb[n].get("shape") or [])]
    feeds = [[n, list(ta[n]["shape"]), list(tb[n]["shape"])] for n in moved
             if ta[n].get("role") in FEEDS]
    relaid = [[n, ta[n].get("layout") or "plain", tb[n].get("layout") or "plain"] for n in both
              if ta[n].get("layout") != tb[n].get("layout")]
    return {"model_changed": _without_layouts(a) != _without_layouts(b),
            "feeds": feeds, "reshaped": len(moved) - len(feeds), "relaid": relaid,
            "tensors_only_a": sorted(ta.keys() - tb.keys()),
            "tensors_only_b": sorted(tb.keys() - ta.keys()),
            "nodes_only_a": sorted(na.keys() - nb.keys()),
            "nodes_only_b": sorted(nb.keys() - na.keys()),
            "attrs_changed": [n for n in sorted(na.keys() & nb.keys())
                              if na[n].get("attrs") != nb[n].get("attrs")
                              or na[n].get("op") != nb[n].get("op")]}


def _same(x: Any, y: Any) -> bool:
    """Equal; floats up to rounding (a ratio of 1 - 3e-16 is no change to review). Integers
    (bytes, offsets, counts) compare exactly: a one-byte move is a change."""
    if isinstance(x, float) or isinstance(y, float):
        if isinstance(x, (int, float)) and isinstance(y, (int, float)) \
                and not isinstance(x, bool) and not isinstance(y, bool):
            return math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-15)
    return x == y


def _by_name(records: Iterable[dict[str, Any]] | None, key: str) -> dict[str, dict[str, Any]]:
    return {r[key]: r for r in records or ()}


def _changed(a: dict[str, Any], b: dict[str, Any], fields: Sequence[str]) -> dict[str, list]:
    return {f: [a.get(f), b.get(f)] for f in fields if not _same(a.get(f), b.get(f))}


def _records(a: Iterable[dict[str, Any]] | None, b: Iterable[dict[str, Any]] | None, key: str,
             fields: Sequence[str]) -> dict[str, list]:
    """Records of one kind matched by `key`: the changed fields of each, and the unmatched."""
    ra, rb = _by_name(a, key), _by_name(b, key)
    changed = []
    for name in sorted(ra.keys() & rb.keys()):
        fields_changed = _changed(ra[name], rb[name], fields)
        if fields_changed:
            changed.append({"name": name, **fields_changed})
    return {"changed": changed, "only_a": sorted(ra.keys() - rb.keys()),
            "only_b": sorted(rb.keys() - ra.keys())}


def _any(section: dict[str, list]) -> bool:
    return any(section.values())


def decisions_line(plan: dict[str, Any]) -> str:
    """One line for `planner show` fingerprinting the decisions too many to list there (every
    tensor's offset and placement, every happens-before edge), so that a plan diff read
    through `planner show` as git's textconv still shows that they moved; `planner diff` says
    which.

    >>> print(decisions_line({"tensors": [], "happens_before": [], "memory": {}}))
      decisions   0 tensors (layout 4f53cda18c2b), 0 edges (4f53cda18c2b), 0 added ops
    """
    tensors = plan.get("tensors") or []
    edges = plan.get("happens_before") or []
    added = (plan.get("memory") or {}).get("ops") or []
    return (f"  decisions   {len(tensors)} tensors (layout {_digest(tensors)}), {len(edges)} "
            f"edges ({_digest(edges)}), {len(added)} added ops")


def _digest(data: Any) -> str:
    text = json.dumps(data, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:12]
