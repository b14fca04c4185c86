"""The text form of `planner diff` (planner.report.diff's dict), read top down as a review:

    inputs      backend, target, schema / kind, options field by field (a strategy switch
                first), cost table, tool, memory budget
    graph       what the user's model says: feeds, shapes, nodes, attributes; or one line
                saying the model is the same when only the layouts a target chose differ
    decisions   what the planner chose: layouts (one line, a count per change), per-op
                threads, CPUs, lanes, groups, SMT; execution order; happens-before edges;
                tensors' offsets, lifetimes and placements; added memory ops; conv algorithms
    outcome     predicted times and memory numbers

A section of at most SHOWN changes lists each; a larger one is summed up in a line (counts
per field, thread ranges, the groups of one plan only), so that two plans of one model for
two targets read in a screen: `--json` lists every change.

Example:
    >>> from planner.report.diff import diff_plans
    >>> op = lambda t: {"name": "fc", "op": "MatMul", "threads": t, "lane": 0, "group": ""}
    >>> print(format_diff(diff_plans({"ops": [op(2)]}, {"ops": [op(4)]})))
    decisions:
      MatMul: 1 op(s) changed (threads)
        fc: threads 2 -> 4
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from planner.report.diff import SHOWN


def format_diff(d: dict[str, Any]) -> str:
    """Text form of diff_plans' dict (module docstring)."""
    if not d["different"]:
        return "no differences"
    decisions = _decisions(d)
    lines = (_inputs(d) + _graph(d) + (["decisions:", *decisions] if decisions else [])
             + _outcome(d))
    return "\n".join(lines)


def _inputs(d: dict[str, Any]) -> list[str]:
    lines = []
    if d["backends"][0] != d["backends"][1]:
        lines.append(f"backend: {d['backends'][0]} -> {d['backends'][1]}")
    cpus = d.get("cpus") or [0, 0]
    cpus_text = f" ({cpus[0]} -> {cpus[1]} logical CPUs)" if cpus[0] != cpus[1] else ""
    if d["targets"][0] != d["targets"][1]:
        lines.append(f"target: {d['targets'][0]} -> {d['targets'][1]}{cpus_text}")
    elif d["target_changed"]:
        lines.append(f"target {d['targets'][0]}: cores or streams changed{cpus_text}")
    for f, (x, y) in d["header"].items():
        lines.append(f"{f}: {x} -> {y}")
    for path, (x, y) in (d.get("options") or {}).items():
        lines.append(f"option {path}: {_short(x)} -> {_short(y)}")
    said = {"graph_sha256": d["graph_changed"], "options": True,
            "target_sha256": d["targets"][0] != d["targets"][1]}
    for f, (x, y) in d["provenance"].items():
        if not said.get(f):
            lines.append(f"provenance {f}: {_short(x)} -> {_short(y)}")
    budget = d.get("budget") or [None, None]
    if budget[0] != budget[1]:
        lines.append(f"memory budget: {_num(budget[0])} -> {_num(budget[1])} bytes")
    switch = d.get("switch")
    if switch:  # a budget changed a plan's strategy: which, and why, in one line
        x, y = d.get("strategy") or [None, None]
        why = "; ".join(f"{side}: {w}" for side, w in zip("ab", switch, strict=True) if w)
        lines.append(f"strategy: {x} -> {y} ({why})")
    return lines


def _graph(d: dict[str, Any]) -> list[str]:
    """What the user's model says, apart from the layouts the planner chose for a target."""
    if not d["graph_changed"]:
        return []
    g = d.get("graph") or {}
    if not g.get("model_changed", True):
        return ["graph: the same model in both; only the tensor layouts chosen for the target "
                "differ (below)"]
    return ["graph: the models differ", *format_graph_changes(g)]


def format_graph_changes(g: dict[str, Any]) -> list[str]:
    """The lines of graph_changes' dict under `graph:` (layouts are a decision: _layouts)."""
    lines = []
    if g.get("feeds"):
        lines.append("  feeds: " + "; ".join(f"{n} {x} -> {y}" for n, x, y in g["feeds"]))
    if g.get("reshaped"):
        lines.append(f"  {g['reshaped']} other tensor(s) change shape with them")
    for key, what in (("nodes_only_a", "nodes only in A"), ("nodes_only_b", "nodes only in B"),
                      ("attrs_changed", "nodes with other attributes"),
                      ("tensors_only_a", "tensors only in A"),
                      ("tensors_only_b", "tensors only in B")):
        names = g.get(key) or []
        if names:
            more = f" and {len(names) - SHOWN} more" if len(names) > SHOWN else ""
            lines.append(f"  {what}: {', '.join(names[:SHOWN])}{more}")
    if not lines:
        lines.append("  the same nodes and shapes (other values: initializers, dtypes, roles)")
    return lines


def _layouts(relaid: list[list[str]]) -> list[str]:
    """One line: how many tensors moved from which layout to which, and the first two.

    >>> _layouts([["a", "nChw16c", "plain"], ["b", "nChw16c", "plain"], ["c", "plain", "x"]])
    ['  layouts: 3 tensor(s) in another layout: 2 nChw16c -> plain, 1 plain -> x (a, b, ...)']
    >>> _layouts([["a", "plain", "nChw16c"]])
    ['  layouts: 1 tensor(s) plain -> nChw16c (a)']
    """
    if not relaid:
        return []
    moves = sorted(Counter((x, y) for _, x, y in relaid).items(), key=lambda m: (-m[1], m[0]))
    kinds = (f"{moves[0][0][0]} -> {moves[0][0][1]}" if len(moves) == 1 else
             "in another layout: " + ", ".join(f"{n} {x} -> {y}" for (x, y), n in moves))
    names = ", ".join(n for n, _, _ in relaid[:2]) + (", ..." if len(relaid) > 2 else "")
    return [f"  layouts: {len(relaid)} tensor(s) {kinds} ({names})"]


def _decisions(d: dict[str, Any]) -> list[str]:
    lines = _layouts((d.get("graph") or {}).get("relaid") or [])
    changed_ops = sum(len(c) for c in d["by_type"].values())
    if changed_ops > SHOWN:
        lines += _op_summary(d.get("decisions") or {}, changed_ops)
    else:
        for op, changes in sorted(d["by_type"].items()):
            fields = sorted({k for c in changes for k in c if k != "name"})
            lines.append(f"  {op}: {len(changes)} op(s) changed ({', '.join(fields)})")
            lines += _items(changes)
    if d["order_changed"]:
        lines.append(f"  execution order changed for {d['order_changed']} op(s)")
    lines += _unmatched("ops", d["only_a"], d["only_b"])
    lines += _edges(d["edges"])
    placement = d.get("placement") or {}
    if len(placement) > SHOWN:
        moves = Counter(tuple(v) for v in placement.values())
        lines.append(f"  placement: {len(placement)} tensor(s) changed: " + ", ".join(
            f"{n} {x} -> {y}" for (x, y), n in sorted(moves.items(), key=lambda m: -m[1])))
    elif placement:
        lines.append(f"  placement: {len(placement)} tensor(s) changed")
        lines += [f"    {t}: {x} -> {y}" for t, (x, y) in placement.items()]
    for label, key in (("tensors", "tensors"), ("memory ops", "memory_ops"),
                       ("convolutions", "convs")):
        section = d[key]
        changes = section["changed"]
        if changes:
            counts = Counter(k for c in changes for k in c if k != "name")
            if len(changes) > SHOWN:
                lines.append(f"  {label}: {len(changes)} changed: " + ", ".join(
                    f"{f} {n}" for f, n in sorted(counts.items(), key=lambda c: (-c[1], c[0]))))
            else:
                lines.append(f"  {label}: {len(changes)} changed ({', '.join(sorted(counts))})")
                lines += _items(changes)
        lines += _unmatched(label, section["only_a"], section["only_b"])
    return lines


def _op_summary(s: dict[str, Any], changed_ops: int) -> list[str]:
    """Many changed ops summed up per decision (planner.report.diff.op_decisions)."""
    changed = s.get("changed") or {}
    lines = [f"  ops: {changed_ops} op(s) placed otherwise (--json lists each)"]
    threads = s.get("threads") or {}
    if changed.get("threads"):
        mean = threads.get("mean") or [0, 0]
        most = threads.get("most") or ["", 0, 0]
        lines.append(f"  threads: {changed['threads']} op(s) changed, "
                     f"{_span(threads.get('a'))} -> {_span(threads.get('b'))} per op "
                     f"(mean over all ops {mean[0]:.2f} -> {mean[1]:.2f}; most: {most[0]} "
                     f"{most[1]} -> {most[2]})")
    if changed.get("cpus"):
        lines.append(f"  cpus: {changed['cpus']} op(s) on other logical CPUs")
    if changed.get("lane"):
        lanes = s.get("lanes") or [0, 0]
        lines.append(f"  lanes: {changed['lane']} op(s) on another lane "
                     f"({lanes[0]} -> {lanes[1]} lanes)")
    groups = s.get("groups") or {}
    if changed.get("group"):
        count = groups.get("count") or [0, 0]
        parts = [f"{len(groups[k])} {what}: {_names(groups[k])}"
                 for k, what in (("only_b", "new"), ("only_a", "gone")) if groups.get(k)]
        lines.append(f"  groups: {count[0]} -> {count[1]} parallel-loop group(s) "
                     f"({changed['group']} op(s) regrouped)" + "".join(f"; {p}" for p in parts))
    if changed.get("smt"):
        smt = s.get("smt") or [0, 0]
        lines.append(f"  smt: {smt[0]} -> {smt[1]} op(s) on second hardware threads")
    for f in ("stream", "affinity", "deps", "block", "prefetch"):
        if changed.get(f):
            lines.append(f"  {f}: {changed[f]} op(s) changed")
    return lines


def _edges(edges: dict[str, list[list[str]]]) -> list[str]:
    removed, added = edges["removed"], edges["added"]
    if len(removed) + len(added) > SHOWN:
        return [f"  happens-before: {len(removed)} edge(s) removed, {len(added)} added"]
    lines = []
    for verb, sign, items in (("removed", "-", removed), ("added", "+", added)):
        if items:
            lines.append(f"  happens-before: {len(items)} edge(s) {verb}")
            lines += [f"    {sign} {x} -> {y}" for x, y in items]
    return lines


def _outcome(d: dict[str, Any]) -> list[str]:
    lines = [f"{f}: {_num(x)} -> {_num(y)} ({delta:+.6g})"
             for f, (x, y, delta) in d["summary"].items()]
    for f, (x, y) in d["memory_summary"].items():
        change = f" ({y - x:+,})" if isinstance(x, int) and isinstance(y, int) else ""
        lines.append(f"memory {f}: {_num(x)} -> {_num(y)}{change}")
    return lines


def _span(v: list[int] | None) -> str:
    if not v:
        return "-"
    return str(v[0]) if v[0] == v[1] else f"{v[0]}..{v[1]}"


def _names(names: list[str], shown: int = 2) -> str:
    return ", ".join(names[:shown]) + (f" and {len(names) - shown} more"
                                       if len(names) > shown else "")


def _items(changes: list[dict[str, Any]]) -> list[str]:
    out = []
    for c in changes[:SHOWN]:
        parts = [f"{k} {_short(v[0])} -> {_short(v[1])}" for k, v in c.items() if k != "name"]
        out.append(f"    {c['name']}: " + "; ".join(parts))
    return out + ([f"    ... and {len(changes) - SHOWN} more"] if len(changes) > SHOWN else [])


def _unmatched(label: str, only_a: list[str], only_b: list[str]) -> list[str]:
    out = []
    for side, names in (("only in A", only_a), ("only in B", only_b)):
        if names:
            out.append(f"  {label} {side}: {', '.join(names[:SHOWN])}"
                       + (f" ... ({len(names)})" if len(names) > SHOWN else ""))
    return out


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
