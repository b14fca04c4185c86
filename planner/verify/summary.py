"""Verify a plan's summary: every figure re-derived from its ops, buffers and graph, never
trusted. Each rule names the field it finds wrong:

    schedule   step_seconds is the last op's end; ops the op count; lower_bound_seconds the
               largest of its four terms and at most the step; ratio = step / bound;
               utilization in [0, 1]; mean_corun in [0, ops]
    memory     (memory-planned plans) peak = arena; arena and host_bytes the end of their
               pool's buffers rounded up to at most 4 KiB; fragmentation = arena / load - 1;
               per-op bound <= load <= arena; resident_bytes the graph's persistent tensors;
               naive_bytes between the graph tensors' own buffers and every device buffer
    inserted   recompute_ops, offloaded_tensors, transfer_bytes (2 x the bytes offloads read),
               recompute_seconds and stall_seconds from the inserted ops and the streams;
               reuse_edges at most the plan's edges
    packs      weight_packs only in a CPU plan without a memory budget

Example:
    >>> plan = {"ops": [{"name": "a", "start": 0.0, "end": 2.0}],
    ...         "summary": {"step_seconds": 1.0, "lower_bound_seconds": 0.5, "ratio": 4.0,
    ...                     "critical_path_seconds": 0.5, "area_bound_seconds": 0.1, "ops": 1}}
    >>> for p in summary_problems(plan): print(p)
    summary step_seconds 1.0 is not the last op's end 2.0
"""

from __future__ import annotations

import math
from typing import Any

from planner.dtypes import DTYPE_BYTES
from planner.verify.inserted import TRANSFERS as _TRANSFER_KINDS

TRANSFERS = frozenset(op for op, _, _ in _TRANSFER_KINDS.values())  # Offload, Prefetch

# Times are compared with this slack (seconds, plus a relative part): float sums.
TOLERANCE = 1e-9
PAGE = 4096  # the largest alignment a pool's end is rounded up to
PERSISTENT = ("param", "state", "optimizer-state")


def summary_problems(plan: dict[str, Any]) -> list[str]:
    """Every summary figure of the module docstring the plan gets wrong, naming the field."""
    summary = plan.get("summary") or {}
    problems = schedule_figures(plan.get("ops", []), summary)
    if summary.get("memory"):
        problems += memory_figures(plan, summary["memory"])
        problems += inserted_figures(plan, summary["memory"])
        problems += weight_pack_problems(plan, summary["memory"])
    return problems


def weight_pack_problems(plan: dict[str, Any], memory: dict[str, Any]) -> list[str]:
    """`packs`: weight packs (held beside the arena, by the CPU executor alone) only in a CPU
    plan that no budget holds to its arena and host store.

    >>> weight_pack_problems({"backend": "cpu"}, {"weight_packs": True, "budget_bytes": 9})
    ['summary weight_packs: packs are held beside the arena, which budget_bytes 9 bounds']
    """
    if not memory.get("weight_packs"):
        return []
    if plan.get("backend", "cpu") != "cpu":
        return [f"summary weight_packs: the {plan.get('backend')} executor packs no weights"]
    if memory.get("budget_bytes") is not None:
        return [f"summary weight_packs: packs are held beside the arena, which budget_bytes "
                f"{memory['budget_bytes']} bounds"]
    return []


def _close(a: float, b: float) -> bool:
    return isinstance(a, (int, float)) and abs(a - b) <= TOLERANCE + 1e-9 * abs(b)


def schedule_figures(ops: list[dict[str, Any]], s: dict[str, Any]) -> list[str]:
    """The time figures, from the ops' predicted times and the bound's terms.

    >>> s = {"step_seconds": 2.0, "lower_bound_seconds": 1.0, "critical_path_seconds": 1.0,
    ...      "area_bound_seconds": 1.5, "ratio": 2.0, "ops": 1}
    >>> schedule_figures([{"start": 0.0, "end": 2.0}], s)
    ['summary lower_bound_seconds 1.0 is not the largest of its terms (1.5)']
    """
    out = []
    step = max((op["end"] for op in ops), default=0.0)
    if not _close(s.get("step_seconds", 0.0), step):
        out.append(f"summary step_seconds {s.get('step_seconds')} is not the last op's end "
                   f"{step}")
    if "ops" in s and s["ops"] != len(ops):
        out.append(f"summary ops {s['ops']} is not the plan's {len(ops)} ops")
    bound = s.get("lower_bound_seconds", 0.0)
    terms = [s.get(k, 0.0) for k in ("critical_path_seconds", "area_bound_seconds",
                                      "allotment_bound_seconds", "cut_bound_seconds")]
    if "critical_path_seconds" in s and not _close(bound, max(terms)):
        out.append(f"summary lower_bound_seconds {bound} is not the largest of its terms "
                   f"({max(terms)})")
    if bound > step + TOLERANCE:
        out.append(f"summary lower bound {bound} exceeds the step time {step}")
    if "ratio" in s and not _close(s["ratio"], step / bound if bound else 1.0):
        out.append(f"summary ratio {s['ratio']} is not step / lower bound "
                   f"({step / bound if bound else 1.0})")
    if not 0.0 <= s.get("utilization", 0.0) <= 1.0 + TOLERANCE:
        out.append(f"summary utilization {s['utilization']} is not in [0, 1]")
    if not 0.0 <= s.get("mean_corun", 0.0) <= max(len(ops), 1):
        out.append(f"summary mean_corun {s['mean_corun']} is not in [0, {len(ops)}]")
    return out


def _pool_end(buffers: list[dict[str, Any]], placement: str) -> int:
    return max((b["offset"] + b["bytes"] for b in buffers
                if b.get("placement", "device") == placement), default=0)


def memory_figures(plan: dict[str, Any], m: dict[str, Any]) -> list[str]:
    """The byte figures, from the buffers and the embedded graph.

    >>> plan = {"tensors": [{"name": "x", "tensor": "x", "offset": 0, "bytes": 64}],
    ...         "graph": {"tensors": []}}
    >>> m = {"arena_bytes": 64, "peak_bytes": 64, "load_bytes": 64, "fragmentation": 0.0,
    ...      "per_op_bound_bytes": 0, "resident_bytes": 0, "naive_bytes": 2**63,
    ...      "host_bytes": 0}
    >>> for p in memory_figures(plan, m): print(p)  # doctest: +NORMALIZE_WHITESPACE
    summary memory naive_bytes 9223372036854775808 is not between 64 and 64 (the graph
    tensors' own buffers, every device buffer)
    """
    out = []
    buffers = plan.get("tensors") or []
    arena, load = m.get("arena_bytes", 0), m.get("load_bytes", 0)
    for key, placement in (("arena_bytes", "device"), ("host_bytes", "host")):
        end = _pool_end(buffers, placement)
        if not end <= m.get(key, 0) < end + PAGE and not (end == m.get(key, 0) == 0):
            out.append(f"summary memory {key} {m.get(key)} is not the end of the {placement} "
                       f"buffers ({end}) rounded up to an alignment")
    if m.get("peak_bytes") != arena:
        out.append(f"summary memory peak_bytes {m.get('peak_bytes')} is not the arena {arena}")
    frag = arena / load - 1 if load else 0.0
    if not (isinstance(m.get("fragmentation"), float) and math.isclose(
            m["fragmentation"], frag, rel_tol=1e-9, abs_tol=1e-12)):
        out.append(f"summary memory fragmentation {m.get('fragmentation')} is not "
                   f"arena / load - 1 ({frag})")
    if not m.get("per_op_bound_bytes", 0) <= load <= arena:
        out.append(f"summary memory load_bytes {load} is not between the per-op bound "
                   f"{m.get('per_op_bound_bytes')} and the arena {arena}")
    graph = plan.get("graph") or {}
    if graph.get("tensors") is not None:
        resident = sum(_nbytes(t) for t in graph["tensors"]
                       if t.get("role") in PERSISTENT and not t.get("updates"))
        if m.get("resident_bytes") != resident:
            out.append(f"summary memory resident_bytes {m.get('resident_bytes')} is not the "
                       f"graph's persistent tensors' {resident} bytes")
    owners = [b for b in buffers if b.get("placement", "device") == "device"
              and not b.get("alias_of")]
    low = sum(b["bytes"] for b in owners if b.get("tensor") and b["name"] == b["tensor"])
    high = sum(b["bytes"] for b in owners)
    if not low <= m.get("naive_bytes", 0) <= high:
        out.append(f"summary memory naive_bytes {m.get('naive_bytes')} is not between {low} "
                   f"and {high} (the graph tensors' own buffers, every device buffer)")
    return out


def _nbytes(t: dict[str, Any]) -> int:
    return DTYPE_BYTES.get(t.get("dtype"), 0) * math.prod(t.get("shape", ()))


def inserted_figures(plan: dict[str, Any], m: dict[str, Any]) -> list[str]:
    """What the inserted ops cost, from the memory section's ops, their buffers and times.

    >>> plan = {"memory": {"ops": [{"name": "offload/x", "kind": "offload", "inputs": ["x"]}]},
    ...         "tensors": [{"name": "x", "bytes": 8}], "ops": [], "happens_before": []}
    >>> for p in inserted_figures(plan, {"offloaded_tensors": 1, "transfer_bytes": 2**63}):
    ...     print(p)  # doctest: +NORMALIZE_WHITESPACE
    summary memory transfer_bytes 9223372036854775808 is not 2 x the 8 bytes offloads copy
    (16)
    """
    out = []
    inserted = (plan.get("memory") or {}).get("ops") or []
    bytes_of = {b["name"]: b["bytes"] for b in plan.get("tensors") or []}
    span = {o["name"]: o["end"] - o["start"] for o in plan.get("ops", [])}
    kinds = [o.get("kind") for o in inserted]
    copied = sum(bytes_of.get(b, 0) for o in inserted if o.get("kind") == "offload"
                 for b in o.get("inputs", ()))
    for key, want in (("recompute_ops", kinds.count("recompute")),
                      ("offloaded_tensors", kinds.count("offload"))):
        if m.get(key, 0) != want:
            out.append(f"summary memory {key} {m.get(key)} is not the plan's {want}")
    if m.get("transfer_bytes", 0) != 2 * copied:
        out.append(f"summary memory transfer_bytes {m.get('transfer_bytes')} is not 2 x the "
                   f"{copied} bytes offloads copy ({2 * copied})")
    seconds = sum(span.get(o["name"], 0.0) for o in inserted if o.get("kind") == "recompute")
    if not _close(m.get("recompute_seconds", 0.0), seconds):
        out.append(f"summary memory recompute_seconds {m.get('recompute_seconds')} is not the "
                   f"recompute ops' {seconds} s")
    # The compute work: a GPU plan's compute stream; on a CPU, every op but the transfers
    # (a CPU plan under a budget runs its copies between the compute ops, not beside them).
    ops = plan.get("ops", [])
    step = max((o["end"] for o in ops), default=0.0)
    compute = {o.get("stream") for o in ops if str(o.get("stream", "")).startswith("compute")}
    if plan.get("backend") == "cuda" and len(compute) > 1:
        # Co-running compute streams: the time at least one of them runs a kernel.
        busy = _union([(o["start"], o["end"]) for o in ops if o.get("stream") in compute])
    elif plan.get("backend") == "cuda":
        busy = sum(o["end"] - o["start"] for o in ops if o.get("stream") == "compute")
    elif any(o.get("op") in TRANSFERS for o in ops):
        busy = sum(o["end"] - o["start"] for o in ops if o.get("op") not in TRANSFERS)
    else:
        busy = step
    stall = max(0.0, step - busy)
    if not _close(m.get("stall_seconds", 0.0), stall):
        out.append(f"summary memory stall_seconds {m.get('stall_seconds')} is not the step's "
                   f"time beyond the compute stream's work ({stall} s)")
    if not 0 <= m.get("reuse_edges", 0) <= len(plan.get("happens_before", [])):
        out.append(f"summary memory reuse_edges {m.get('reuse_edges')} exceeds the plan's "
                   f"{len(plan.get('happens_before', []))} happens-before edges")
    return out


def _union(intervals: list[tuple[float, float]]) -> float:
    """The length of the union of intervals.

    >>> _union([(0.0, 2.0), (1.0, 3.0), (5.0, 6.0)])
    4.0
    """
    total, lo, hi = 0.0, 0.0, 0.0
    for a, b in sorted(intervals):
        if a > hi:
            total += hi - lo
            lo, hi = a, b
        else:
            hi = max(hi, b)
    return total + hi - lo
