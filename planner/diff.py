"""Plan diff: what changed between two plans of one model, for code review.

First the predicted times (step, bound, ratio), then the ops whose thread count, CPUs, group
or SMT flag changed, grouped by op type, then ops present in only one plan.

Example:
    >>> diff_plans({"summary": {"step_seconds": 1.0}, "ops": []},
    ...            {"summary": {"step_seconds": 1.0}, "ops": []})["different"]
    False
"""

from __future__ import annotations

import math
from typing import Any

SUMMARY_FIELDS = ("step_seconds", "lower_bound_seconds", "ratio", "utilization", "mean_corun")
OP_FIELDS = ("threads", "cpus", "group", "smt")


def diff_plans(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """{different, summary: {field: [a, b, b - a]}, by_type: {op: [{name, field: [a, b]}]},
    only_a, only_b}."""
    sa, sb = a.get("summary", {}), b.get("summary", {})
    summary = {f: [sa.get(f), sb.get(f), (sb.get(f) or 0) - (sa.get(f) or 0)]
               for f in SUMMARY_FIELDS if not _same_number(sa.get(f), sb.get(f))}
    ops_a = {o["name"]: o for o in a.get("ops", [])}
    ops_b = {o["name"]: o for o in b.get("ops", [])}
    by_type: dict[str, list[dict[str, Any]]] = {}
    for name in sorted(ops_a.keys() & ops_b.keys()):
        oa, ob = ops_a[name], ops_b[name]
        changed = {f: [oa.get(f), ob.get(f)] for f in OP_FIELDS if oa.get(f) != ob.get(f)}
        if changed:
            by_type.setdefault(oa["op"], []).append({"name": name, **changed})
    only_a = sorted(ops_a.keys() - ops_b.keys())
    only_b = sorted(ops_b.keys() - ops_a.keys())
    other = a.get("target") != b.get("target") or a.get("graph") != b.get("graph")
    order_changed = [n for n in sorted(ops_a.keys() & ops_b.keys())
                     if ops_a[n].get("order") != ops_b[n].get("order")]
    different = bool(summary or by_type or only_a or only_b or other or order_changed)
    return {"different": different, "summary": summary, "by_type": by_type,
            "only_a": only_a, "only_b": only_b, "order_changed": len(order_changed),
            "targets": [a.get("target", {}).get("name"), b.get("target", {}).get("name")]}


def _same_number(x: Any, y: Any) -> bool:
    """Equal, or floats equal up to rounding (a ratio of 1 - 3e-16 is no change to review)."""
    if isinstance(x, (int, float)) and isinstance(y, (int, float)):
        return math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-15)
    return x == y


def format_diff(d: dict[str, Any]) -> str:
    """Text form of diff_plans' dict."""
    if not d["different"]:
        return "no differences"
    lines = []
    if d["targets"][0] != d["targets"][1]:
        lines.append(f"target: {d['targets'][0]} -> {d['targets'][1]}")
    for f, (x, y, delta) in d["summary"].items():
        lines.append(f"{f}: {_num(x)} -> {_num(y)} ({delta:+.6g})")
    for op, changes in sorted(d["by_type"].items()):
        fields = sorted({k for c in changes for k in c if k != "name"})
        lines.append(f"{op}: {len(changes)} op(s) changed ({', '.join(fields)})")
        for c in changes[:10]:
            parts = [f"{k} {_short(v[0])} -> {_short(v[1])}" for k, v in c.items() if k != "name"]
            lines.append(f"  {c['name']}: " + "; ".join(parts))
        if len(changes) > 10:
            lines.append(f"  ... and {len(changes) - 10} more")
    if d["order_changed"]:
        lines.append(f"execution order changed for {d['order_changed']} op(s)")
    for side, key in (("only in A", "only_a"), ("only in B", "only_b")):
        if d[key]:
            lines.append(f"{side}: {', '.join(d[key][:10])}"
                         + (f" ... ({len(d[key])})" if len(d[key]) > 10 else ""))
    return "\n".join(lines)


def _num(x: Any) -> str:
    return f"{x:.6g}" if isinstance(x, float) else str(x)


def _short(v: Any) -> str:
    if isinstance(v, list):
        from planner.plan import cpu_ranges

        return cpu_ranges(tuple(v)) if v else "[]"
    return repr(v) if isinstance(v, str) else str(v)
