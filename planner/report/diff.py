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
    graph_changed, provenance,
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
    different = bool(
        summary or memory_summary or by_type or order_changed or only_a or only_b
        or any(_any(s) for s in (tensors, memory_ops, convs, edges))
        or provenance or backends[0] != backends[1] or target_changed or graph_changed
        or header)
    return {"different": different, "backends": backends, "header": header,
            "targets": [ta.get("name"), tb.get("name")], "target_changed": target_changed,
            "graph_changed": graph_changed, "graph": graph, "provenance": provenance,
            "summary": summary, "memory_summary": memory_summary, "by_type": by_type,
            "order_changed": len(order_changed), "only_a": only_a, "only_b": only_b,
            "tensors": tensors, "memory_ops": memory_ops, "convs": convs, "edges": edges,
            "placement": placement, "budget": budget}


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
    on one host and not on another: planner.graph.blocked), the nodes of one graph only and
    those whose attributes changed (a reshape's target shape, a convolution's kernel layout).

    >>> t = lambda n, s, r="activation": {"name": n, "shape": s, "role": r}
    >>> g = lambda b: {"tensors": [t("x", [b, 3], "input"), t("h", [b, 4])],
    ...                "nodes": [{"name": "fc", "op": "MatMul", "attrs": {}}]}
    >>> graph_changes(g(32), g(4))["feeds"], graph_changes(g(32), g(4))["reshaped"]
    ([['x', [32, 3], [4, 3]]], 1)
    >>> blocked = g(4)
    >>> blocked["tensors"][1]["layout"] = "nChw16c"
    >>> graph_changes(g(4), blocked)["relaid"]
    [['h', 'plain', 'nChw16c']]
    """
    ta, tb = _by_name(a.get("tensors"), "name"), _by_name(b.get("tensors"), "name")
    na, nb = _by_name(a.get("nodes"), "name"), _by_name(b.get("nodes"), "name")
    both = sorted(ta.keys() & tb.keys())
    moved = [n for n in both if list(ta[n].get("shape") or []) != list(tb[n].get("shape") or [])]
    feeds = [[n, list(ta[n]["shape"]), list(tb[n]["shape"])] for n in moved
             if ta[n].get("role") in FEEDS]
    relaid = [[n, ta[n].get("layout") or "plain", tb[n].get("layout") or "plain"] for n in both
              if ta[n].get("layout") != tb[n].get("layout")]
    return {"feeds": feeds, "reshaped": len(moved) - len(feeds), "relaid": relaid,
            "tensors_only_a": sorted(ta.keys() - tb.keys()),
            "tensors_only_b": sorted(tb.keys() - ta.keys()),
            "nodes_only_a": sorted(na.keys() - nb.keys()),
            "nodes_only_b": sorted(nb.keys() - na.keys()),
            "attrs_changed": [n for n in sorted(na.keys() & nb.keys())
                              if na[n].get("attrs") != nb[n].get("attrs")
                              or na[n].get("op") != nb[n].get("op")]}


def format_graph_changes(g: dict[str, Any]) -> list[str]:
    """The lines of graph_changes' dict under `graph:` in the text form."""
    lines = []
    if g.get("feeds"):
        lines.append("  feeds: " + "; ".join(f"{n} {x} -> {y}" for n, x, y in g["feeds"]))
    if g.get("reshaped"):
        lines.append(f"  {g['reshaped']} other tensor(s) change shape with them")
    if g.get("relaid"):
        relaid = g["relaid"]
        more = f" and {len(relaid) - SHOWN} more" if len(relaid) > SHOWN else ""
        lines.append(f"  {len(relaid)} tensor(s) held in another layout: "
                     + ", ".join(f"{n} ({x} -> {y})" for n, x, y in relaid[:SHOWN]) + more)
    for key, what in (("nodes_only_a", "nodes only in A"), ("nodes_only_b", "nodes only in B"),
                      ("attrs_changed", "nodes with other attributes"),
                      ("tensors_only_a", "tensors only in A"),
                      ("tensors_only_b", "tensors only in B")):
        names = g.get(key) or []
        if names:
            more = f" and {len(names) - SHOWN} more" if len(names) > SHOWN else ""
            lines.append(f"  {what}: {', '.join(names[:SHOWN])}{more}")
    if g and not lines:
        lines.append("  the same nodes and shapes (other values: initializers, dtypes, roles)")
    return lines


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


def format_diff(d: dict[str, Any]) -> str:
    """Text form of diff_plans' dict: a line per kind of change, the first SHOWN items of each
    (`--json` lists them all)."""
    if not d["different"]:
        return "no differences"
    lines = []
    if d["backends"][0] != d["backends"][1]:
        lines.append(f"backend: {d['backends'][0]} -> {d['backends'][1]}")
    if d["targets"][0] != d["targets"][1]:
        lines.append(f"target: {d['targets'][0]} -> {d['targets'][1]}")
    elif d["target_changed"]:
        lines.append(f"target {d['targets'][0]}: cores or streams changed")
    for f, (x, y) in d["header"].items():
        lines.append(f"{f}: {x} -> {y}")
    if d["graph_changed"]:
        lines.append("graph: the embedded graphs differ")
        lines += format_graph_changes(d.get("graph") or {})
    for f, (x, y) in d["provenance"].items():
        if f != "graph_sha256" or not d["graph_changed"]:
            lines.append(f"provenance {f}: {_short(x)} -> {_short(y)}")
    budget = d.get("budget") or [None, None]
    if budget[0] != budget[1]:
        lines.append(f"memory budget: {_num(budget[0])} -> {_num(budget[1])} bytes")
    placement = d.get("placement") or {}
    if placement:
        lines.append(f"placement: {len(placement)} tensor(s) changed")
        lines += [f"  {t}: {x} -> {y}" for t, (x, y) in list(placement.items())[:SHOWN]]
        lines += _more(list(placement))
    for f, (x, y, delta) in d["summary"].items():
        lines.append(f"{f}: {_num(x)} -> {_num(y)} ({delta:+.6g})")
    for f, (x, y) in d["memory_summary"].items():
        change = f" ({y - x:+,})" if isinstance(x, int) and isinstance(y, int) else ""
        lines.append(f"memory {f}: {_num(x)} -> {_num(y)}{change}")
    for op, changes in sorted(d["by_type"].items()):
        fields = sorted({k for c in changes for k in c if k != "name"})
        lines.append(f"{op}: {len(changes)} op(s) changed ({', '.join(fields)})")
        lines += _items(changes)
    if d["order_changed"]:
        lines.append(f"execution order changed for {d['order_changed']} op(s)")
    lines += _unmatched("ops", d["only_a"], d["only_b"])
    for label, key in (("tensors", "tensors"), ("memory ops", "memory_ops"),
                       ("convolutions", "convs")):
        section = d[key]
        if section["changed"]:
            fields = sorted({k for c in section["changed"] for k in c if k != "name"})
            lines.append(f"{label}: {len(section['changed'])} changed ({', '.join(fields)})")
            lines += _items(section["changed"])
        lines += _unmatched(label, section["only_a"], section["only_b"])
    for verb, sign in (("removed", "-"), ("added", "+")):
        edges = d["edges"][verb]
        if edges:
            lines.append(f"happens-before: {len(edges)} edge(s) {verb}")
            lines += [f"  {sign} {x} -> {y}" for x, y in edges[:SHOWN]]
            lines += _more(edges)
    return "\n".join(lines)


def _items(changes: list[dict[str, Any]]) -> list[str]:
    out = []
    for c in changes[:SHOWN]:
        parts = [f"{k} {_short(v[0])} -> {_short(v[1])}" for k, v in c.items() if k != "name"]
        out.append(f"  {c['name']}: " + "; ".join(parts))
    return out + _more(changes)


def _unmatched(label: str, only_a: list[str], only_b: list[str]) -> list[str]:
    out = []
    for side, names in (("only in A", only_a), ("only in B", only_b)):
        if names:
            out.append(f"{label} {side}: {', '.join(names[:SHOWN])}"
                       + (f" ... ({len(names)})" if len(names) > SHOWN else ""))
    return out


def _more(items: list[Any]) -> list[str]:
    return [f"  ... and {len(items) - SHOWN} more"] if len(items) > SHOWN else []


def _num(x: Any) -> str:
    if isinstance(x, bool) or x is None:
        return str(x)
    if isinstance(x, float):
        return f"{x:.6g}"
    return f"{x:,}" if isinstance(x, int) else str(x)


def _short(v: Any) -> str:
    if isinstance(v, list):
        if v and all(isinstance(x, int) and not isinstance(x, bool) for x in v):
            from planner.plan import cpu_ranges

            return cpu_ranges(tuple(v))
        return "[" + ", ".join(_short(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{...}"
    if isinstance(v, str):
        return repr(v[:12] + "...") if len(v) > 40 else repr(v)
    return _num(v)


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
