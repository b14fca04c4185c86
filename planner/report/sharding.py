"""What `planner show` prints of a ZeRO-3 plan (planner plan --shard-parameters): the bytes a
rank holds between steps against an unsharded plan's, the gathered copies' window, and each
all-gather's decisions (how many ops ahead of its first reader it is issued, whether the
forward copy is kept for backward). Reads the plan's data only.

Example:
    >>> plan = {"graph": {"tensors": [
    ...     {"name": "shard/0/param", "shape": [16], "role": "param"},
    ...     {"name": "shard/0/grad", "shape": [16], "role": "grad"},
    ...     {"name": "shard/0/m", "shape": [16], "role": "optimizer-state"},
    ...     {"name": "gathered/w", "shape": [20], "role": "activation"}],
    ...   "nodes": [{"name": "allgather/0", "op": "AllGather", "inputs": ["shard/0/param"],
    ...              "outputs": ["gathered/w"], "attrs": {"ranks": 2, "keep": 1}},
    ...             {"name": "rs", "op": "ReduceScatter", "inputs": ["g"],
    ...              "outputs": ["shard/0/grad"], "attrs": {"ranks": 2}},
    ...             {"name": "up", "op": "ApplyMomentum", "inputs": ["shard/0/param",
    ...              "shard/0/grad", "shard/0/m"], "outputs": [], "attrs": {}},
    ...             {"name": "mm", "op": "MatMul", "inputs": ["x", "gathered/w"],
    ...              "outputs": ["y"], "attrs": {}}]},
    ...   "ops": [{"name": "allgather/0", "order": 0, "prefetch": 0},
    ...           {"name": "mm", "order": 1}],
    ...   "tensors": [{"name": "gathered/w", "tensor": "gathered/w", "bytes": 80,
    ...                "first": 0, "last": 1}]}
    >>> r = sharding_report(plan)
    >>> r["held_bytes"], r["unsharded_bytes"], r["gathered_window_bytes"]
    ({'parameters': 64, 'gradients': 64, 'optimizer state': 64}, {'parameters': 80, \
'gradients': 80, 'optimizer state': 80}, 80)
    >>> r["gathers"][0]["first_reader"], r["gathers"][0]["keep"]
    ('mm', 1)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from planner.dtypes import DTYPE_BYTES

KiB = 1024


def sharding_report(plan: dict[str, Any]) -> dict[str, Any]:
    """{} for a plan that shards no parameters; else ranks, held_bytes and unsharded_bytes
    (per kind: parameters, gradients, optimizer state), gathered_window_bytes (the most
    gathered copies' bytes live at once) and, per all-gather in plan order, its bucket's
    bytes, first reader, prefetch distance and keep decision."""
    graph = plan.get("graph") or {}
    gathers = [n for n in graph.get("nodes", []) if n.get("op") == "AllGather"]
    if not gathers:
        return {}
    tensors = {t["name"]: t for t in graph.get("tensors", [])}

    def nbytes(name: str) -> int:
        t = tensors[name]
        dtype = t.get("dtype", "float32")
        if dtype not in DTYPE_BYTES:
            raise ValueError(f"plan tensor {name!r}: dtype {dtype!r} is not one of "
                             f"{sorted(DTYPE_BYTES)} (a plan this planner did not write?)")
        return int(np.prod(t["shape"], dtype=np.int64)) * DTYPE_BYTES[dtype]

    shards = {n["inputs"][0] for n in gathers}
    params = {s: sum(nbytes(o) for o in n["outputs"]) for n in gathers for s in n["inputs"]}
    held = {"parameters": sum(nbytes(s) for s in shards),
            "gradients": sum(nbytes(o) for n in graph["nodes"] if n["op"] == "ReduceScatter"
                             for o in n["outputs"]),
            "optimizer state": sum(nbytes(t) for t, d in tensors.items()
                                   if d.get("role") == "optimizer-state" and not d.get("updates")
                                   and t.startswith("shard/"))}
    # unsharded: each slot of a shard's update over the whole bucket's parameters
    # (a slot is a shard's size; Adam's step count is optimizer state too, a scalar)
    slots = {n["inputs"][0]: sum(tensors[t].get("role") == "optimizer-state" and
                                 tensors[t]["shape"] == tensors[n["inputs"][0]]["shape"]
                                 for t in n["inputs"])
             for n in graph["nodes"] if n["op"] != "AllGather" and n["inputs"]
             and n["inputs"][0] in shards}
    whole = sum(params.values())
    unsharded = {"parameters": whole, "gradients": whole,
                 "optimizer state": sum(params[s] * slots.get(s, 0) for s in params)}
    order = {o["name"]: o.get("order", i) for i, o in enumerate(plan.get("ops", []))}
    by_order = {v: k for k, v in order.items()}
    copies = {o for n in gathers for o in n["outputs"]}
    live = [(b["first"], b["last"], b["bytes"]) for b in plan.get("tensors", [])
            if b.get("tensor") in copies and not b.get("alias_of")]
    steps = sorted({f for f, _, _ in live})
    window = max((sum(n for f, last, n in live if f <= t <= last) for t in steps), default=0)
    readers: dict[str, list[str]] = {}
    for n in graph["nodes"]:
        for t in n["inputs"]:
            readers.setdefault(t, []).append(n["name"])
    ops = {o["name"]: o for o in plan.get("ops", [])}
    rows = []
    for n in sorted(gathers, key=lambda n: order.get(n["name"], 0)):
        first = min((order[r] for o in n["outputs"] for r in readers.get(o, []) if r in order),
                    default=None)
        rows.append({"name": n["name"], "bytes": sum(nbytes(o) for o in n["outputs"]),
                     "first_reader": by_order.get(first, "") if first is not None else "",
                     "prefetch": int(ops.get(n["name"], {}).get("prefetch", 0)),
                     "keep": n["attrs"].get("keep")})
    return {"ranks": max(int(n["attrs"]["ranks"]) for n in gathers), "held_bytes": held,
            "unsharded_bytes": unsharded, "gathered_window_bytes": window, "gathers": rows}


def format_sharding(plan: dict[str, Any]) -> str:
    """Text lines for `planner show` ("" for a plan that shards no parameters)."""
    r = sharding_report(plan)
    if not r:
        return ""

    def kib(n: int) -> str:
        return f"{n / KiB:,.1f} KiB"

    held = ", ".join(f"{k} {kib(v)}" for k, v in r["held_bytes"].items())
    whole = ", ".join(kib(v) for v in r["unsharded_bytes"].values())
    lines = [f"  zero-3      per rank: {held}; sharded over {r['ranks']} ranks ({whole} "
             f"unsharded); gathered copies at most {kib(r['gathered_window_bytes'])} at once"]
    for g in r["gathers"]:
        keep = {1: "; kept for backward", 0: "; freed after its last forward reader"}.get(
            g["keep"], "")
        lines.append(f"  all-gather  {g['name']}: {kib(g['bytes'])}, issued {g['prefetch']} "
                     f"op(s) ahead of {g['first_reader']}{keep}")
    return "\n".join(lines + chosen_lines(plan))


def chosen_lines(plan: dict[str, Any]) -> list[str]:
    """What planning chose of ZeRO-3's decisions under the memory budget against the default
    ones under it (one line per kind of decision, planner.pipeline.gathers), from the options
    the plan records; none where it did not search (no budget, or the decisions given)."""
    dp = ((plan.get("provenance") or {}).get("options") or {}).get("data_parallel") or {}
    g = dp.get("gathers") or {}
    if not g.get("default_arena_bytes"):
        return []
    nodes = plan["graph"]["nodes"]
    kept = sum(n["attrs"].get("keep") == 1 for n in nodes)  # forward gathers say it
    count = sum(n["name"].startswith("reducescatter/") for n in nodes)
    was = g.get("default_keep", [])
    arena, default = plan["summary"]["memory"]["arena_bytes"], g["default_arena_bytes"]
    step, before = plan["summary"]["step_seconds"], g["default_step_seconds"]
    depths = ", ".join(f"{n} {d}" for n, d in g.get("prefetch", [])) or "none"
    return [
        f"  chosen      bucket size {dp.get('bucket_bytes', 0) / KiB:,.1f} KiB (default "
        f"{g['default_bucket_bytes'] / KiB:,.1f} KiB)",
        f"  chosen      forward copies kept for backward: {kept} of {count} buckets "
        f"(default {sum(was)} of {len(was)})",
        f"  chosen      prefetch depths cut (ops ahead of the first reader): {depths}",
        f"  chosen      arena {arena / KiB:,.1f} KiB, predicted step {step * 1e3:.3f} ms; the "
        f"default decisions under the same budget: {default / KiB:,.1f} KiB, "
        f"{before * 1e3:.3f} ms ({before / step:.2f}x the step)"]
