"""Verify a plan's memory without trusting the memory planner: every pair of buffers checked
the obvious way (overlaps found by a sweep over write order, O(buffers log buffers)), sharing
no code with the allocator. Each problem names the buffer(s) and the rule:

    fields     offsets and sizes are non-negative; placement is device or host; the writer and
               readers are ops of the plan; first / last match their execution orders
    coverage   (with the embedded graph) every graph tensor is held by some buffer
    alias      an alias sits at the offset of the buffer it shares, and the graph says so: its
               tensor updates that buffer's tensor in place, is a view of it (a chain of
               view ops, OpDef.view), or is an output its op may write over its input
               (OpDef.in_place) and that buffer holds the input's bytes
    in-place   an output written over its input's bytes (an alias of the last kind): the
               input is read by the op once and is the step's own value (a node writes it; not
               persistent, fed by the caller or read after the step), and every other op
               reading that value (the input and the views sharing its bytes, as the graph
               and the inserted ops say) happens-before the op, through the stated ordering:
               nothing reads the old value once it is overwritten
    bucket     an in-place AllReduce's gradients (planner.ops.collective) lie side by side in
               input order, each at the previous one's end rounded up to 64 bytes (what its
               kernel sums as one span), no other buffer starts in the padding between them,
               and the all-reduce is their only reader (it writes them). Likewise a
               ReduceScatter's gradients (its only reader) and a ShardedUpdate's parameters,
               whose bucket is padded to ranks x shard floats (re-derived from the graph's
               sizes and ranks): no other buffer live at the collective lies in that padding.
               On a CUDA plan the rounding is 256 bytes (the device arena's), which a sharded
               collective's `alignment` attr must state (its shard's shape follows it)
    arena      device buffers lie inside [0, arena_bytes), host buffers inside the host pool
    overlap    two buffers sharing bytes are ordered: every access of one (its write, its
               reads) happens-before the other's write, through the plan's stated ordering
               (lanes and happens-before edges, planner.verify.order; never `deps`); a buffer
               written before the step or read after it is never ordered against one live in
               the step. This covers arena reuse and per-op scratch (a buffer its op writes)
    budget     arena_bytes <= budget_bytes; LOAD <= arena

Hook for `planner verify` (planner/verify/rules.py, at the end of verify_plan_data):
    problems += verify_memory_data(plan)

Example:
    >>> verify_memory_data({"ops": [], "tensors": [], "happens_before": [],
    ...                     "summary": {"memory": None}})
    []
"""

from __future__ import annotations

import bisect
from typing import Any

from planner.verify.order import StatedOrder


def verify_memory_data(plan: dict[str, Any], hb: StatedOrder | None = None) -> list[str]:
    """Every memory rule the plan (as JSON data) breaks; [] when sound or not memory-planned.
    `hb`: the plan's StatedOrder (lanes and happens-before edges), when the caller has it."""
    tensors = plan.get("tensors") or []
    memory = (plan.get("summary") or {}).get("memory")
    if not tensors and not memory:
        return []
    problems: list[str] = []
    ops = sorted(plan.get("ops", []), key=lambda o: o["order"])
    order = {o["name"]: o["order"] for o in ops}
    after_step = len(ops)
    by_name: dict[str, dict[str, Any]] = {}
    for t in tensors:
        if t["name"] in by_name:
            problems.append(f"buffer {t['name']!r} is listed twice")
        by_name[t["name"]] = t
    for t in tensors:
        problems += _field_problems(t, order, after_step)
    problems += _coverage_problems(plan, tensors)
    problems += _alias_problems(plan, by_name)
    hb = hb or StatedOrder(plan)
    problems += _in_place_problems(plan, by_name, hb)
    problems += _bucket_problems(plan, by_name)
    if memory:
        problems += _arena_problems(tensors, memory)
    problems += _overlap_problems(tensors, hb, after_step)
    return problems


def _field_problems(t: dict[str, Any], order: dict[str, int], after_step: int) -> list[str]:
    """`fields`: offset and size non-negative, placement device or host, writer and readers
    ops of the plan, first / last the orders of its writer / last reader (not for an alias)."""
    out = []
    name = t["name"]
    if t["bytes"] < 0 or t["offset"] < 0:
        out.append(f"buffer {name!r}: negative offset or size ({t['offset']}, {t['bytes']})")
    if t.get("placement", "device") not in ("device", "host"):
        out.append(f"buffer {name!r}: placement {t['placement']!r} is not device or host")
    for op in ([t["writer"]] if t.get("writer") else []) + list(t.get("readers", [])):
        if op not in order:
            out.append(f"buffer {name!r} names op {op!r}, which is not in the plan")
    if out:
        return out
    first = order[t["writer"]] if t.get("writer") else -1
    if t.get("alias_of"):
        return out
    if t["first"] != first:
        out.append(f"buffer {name!r}: first {t['first']} is not its writer's order {first}")
    reads = [order[r] for r in t.get("readers", [])]
    if reads and t["last"] < max(reads):
        out.append(f"buffer {name!r}: last {t['last']} comes before its last reader "
                   f"(order {max(reads)})")
    if t["last"] > after_step:
        out.append(f"buffer {name!r}: last {t['last']} is past the step ({after_step})")
    return out


def _coverage_problems(plan: dict[str, Any], tensors: list[dict[str, Any]]) -> list[str]:
    """`coverage`: every tensor of the embedded graph is held by some buffer."""
    graph = plan.get("graph")
    if not isinstance(graph, dict):
        return []
    held = {t.get("tensor") for t in tensors}
    return [f"graph tensor {g['name']!r} is held by no buffer" for g in graph.get("tensors", [])
            if g["name"] not in held]


def _alias_problems(plan: dict[str, Any], by_name: dict[str, dict[str, Any]]) -> list[str]:
    """`alias`: an alias sits in the bytes of the buffer it names, and the graph says its
    tensor updates or views that buffer's tensor."""
    graph = plan.get("graph") or {}
    updates = {g["name"]: g.get("updates") for g in graph.get("tensors", [])}
    views = _view_roots(graph)
    # An in-place output's bytes are its input's, whichever buffer holds those.
    over = {y: _holder(by_name, x) for y, (_, x) in _in_place_pairs(graph).items()}
    out = []
    for t in by_name.values():
        target = t.get("alias_of")
        if not target:
            continue
        base = by_name.get(target)
        if base is None:
            out.append(f"buffer {t['name']!r} aliases {target!r}, which is not a buffer")
            continue
        if (base["offset"], base.get("placement")) != (t["offset"], t.get("placement")) \
                or base["bytes"] < t["bytes"]:
            out.append(f"buffer {t['name']!r} aliases {target!r} but does not sit in its bytes")
        tensor = t.get("tensor")
        viewed = views.get(tensor)
        # a view of an in-place output sits in the bytes that output was written over
        if graph.get("tensors") and base.get("tensor") not in (
                updates.get(tensor), viewed) and (
                tensor != t["name"] or over.get(tensor) != target) and \
                (viewed is None or over.get(viewed) != target):
            out.append(f"buffer {t['name']!r} aliases {target!r}, but the graph does not say "
                       f"tensor {tensor!r} updates {base.get('tensor')!r}, is a view of it "
                       f"or is written over its bytes in place")
    return out


def _in_place_pairs(graph: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """Outputs an op may write over its input's bytes (OpDef.in_place) -> (the node, that
    input), from the graph's nodes."""
    from planner.ops import REGISTRY

    pairs: dict[str, tuple[str, str]] = {}
    for n in graph.get("nodes", []):
        op = REGISTRY.get(n.get("op"))
        if op is None or op.in_place is None:
            continue
        ins, outs = n.get("inputs", []), n.get("outputs", [])
        pairs.update({outs[k]: (n["name"], ins[k]) for k in op.in_place(len(ins))
                      if k < len(outs) and k < len(ins)})
    return pairs


def _holder(by_name: dict[str, dict[str, Any]], tensor: str) -> str:
    """The buffer owning the bytes of `tensor`'s own buffer (the root it aliases, or itself)."""
    t = by_name.get(tensor)
    return "" if t is None else _root(t)


def _in_place_problems(plan: dict[str, Any], by_name: dict[str, dict[str, Any]],
                       hb: StatedOrder) -> list[str]:
    """`in-place`: an output written over its input's bytes leaves no reader of the value it
    overwrites (module docstring), re-derived from the graph and the inserted ops."""
    graph = plan.get("graph")
    if not isinstance(graph, dict):
        return []
    pairs = _in_place_pairs(graph)
    written = [(y, *pairs[y]) for y, t in by_name.items()
               if y in pairs and t.get("alias_of") and t.get("tensor") == y]
    if not written:
        return []
    roles = {g["name"]: g.get("role") for g in graph.get("tensors", [])}
    outputs = set(graph.get("outputs", []))
    produced = {o for n in graph.get("nodes", []) for o in n.get("outputs", [])}
    readers: dict[str, list[str]] = {}
    for n in graph.get("nodes", []):
        for i in dict.fromkeys(n.get("inputs", [])):
            readers.setdefault(i, []).append(n["name"])
    inputs = {n["name"]: n.get("inputs", []) for n in graph.get("nodes", [])}
    for m in (plan.get("memory") or {}).get("ops", []):
        for b in m.get("inputs", ()):
            tensor = (by_name.get(b) or {}).get("tensor") or ""
            if b == tensor:   # the tensor's own buffer (a copy's bytes are the copy's)
                readers.setdefault(tensor, []).append(m["name"])
    views = _view_roots(graph)
    family: dict[str, list[str]] = {}
    for v, r in views.items():
        family.setdefault(r, [r]).append(v)
    out = []
    for y, op, x in written:
        value = views.get(x, x)
        shared = family.get(value, [value])
        what = f"buffer {y!r} is written in place over {x!r} by {op!r}"
        if inputs[op].count(x) != 1:
            out.append(f"{what}, which reads it {inputs[op].count(x)} times")
        if (roles.get(value) in ("param", "state", "optimizer-state", "input", "label")
                or value not in produced or set(shared) & outputs):
            out.append(f"{what}, but {value!r} is not a value the step writes and drops "
                       f"(role {roles.get(value)!r}, or read after the step)")
        late = sorted({r for v in shared for r in readers.get(v, ())
                       if r != op and not hb.before(r, op)})
        if late:
            out.append(f"{what}, but op {late[0]!r} reads its value and nothing the executor "
                       f"enforces runs it before {op!r}: no lane or chain of happens-before "
                       f"edges leads from {late[0]!r} to {op!r}")
    return out


def _view_roots(graph: dict[str, Any]) -> dict[str, str]:
    """View outputs -> the tensor at the start of their chain of views, from the graph's
    nodes and each op's `view` fact (persistent inputs are copied, not viewed)."""
    from planner.ops import REGISTRY

    persistent = {"param", "state", "optimizer-state"}
    roles = {g["name"]: g.get("role") for g in graph.get("tensors", [])}
    roots: dict[str, str] = {}
    for n in graph.get("nodes", []):
        op = REGISTRY.get(n.get("op"))
        if op is not None and op.view and roles.get(n["inputs"][0]) not in persistent:
            roots[n["outputs"][0]] = roots.get(n["inputs"][0], n["inputs"][0])
    return roots


# The rounding between a bucket's members (and a sharded bucket's shards) the collectives'
# kernels expect: the CPU ones' 64 bytes; the CUDA one's, the device alignment of every GPU
# plan's offsets (planner.memory.gpu).
BUCKET_ALIGNMENT = {"cpu": 64, "cuda": 256}


def _bucket(n: dict[str, Any], size: dict[str, int],
            align: int) -> tuple[list[str], int, bool] | None:
    """(members, bytes padded to the ranks' shards or 0, whether the collective must be their
    only reader) of a collective's bucket, re-derived from the graph; None: not one."""
    attrs = n.get("attrs") or {}
    op, ins = n.get("op"), list(n.get("inputs", []))
    if op == "AllReduce":
        return (ins, 0, True) if attrs.get("in_place") else None
    if op == "ReduceScatter":
        if not attrs.get("in_place", 1):  # copied into its scratch area, laid out there
            return None
        members, only = ins, True
    elif op == "ShardedUpdate":  # parameters first, as many as it writes back beside state
        slots = {"SGD": 0, "ApplyMomentum": 1, "ApplyAdam": 2}.get(attrs.get("update"), 0)
        members, only = ins[:len(n.get("outputs", [])) - slots], False
    elif op == "AllGather":  # ZeRO-3: the gathered copies it writes, padded like the shards
        members, only = list(n.get("outputs", [])), False
    else:
        return None
    step = align // 4  # in floats
    end = 0
    for m in members:  # each member's floats at the previous one's end, rounded up
        end = (-(-end // step) * step if end else 0) + size.get(m, 0) // 4
    ranks = max(1, int(attrs.get("ranks", 1)))
    per_rank = -(-end // ranks)
    shard = -(-per_rank // step) * step  # rounded up to the alignment
    return members, ranks * shard * 4, only


def _bucket_problems(plan: dict[str, Any], by_name: dict[str, dict[str, Any]]) -> list[str]:
    """`bucket`: the layout a collective's kernel relies on (module docstring)."""
    graph = plan.get("graph")
    if not isinstance(graph, dict):
        return []
    out = []
    align = BUCKET_ALIGNMENT.get(plan.get("backend", "cpu"), 64)
    starts = sorted((t["offset"], t["name"]) for t in by_name.values()
                    if t.get("placement", "device") == "device" and t["bytes"] > 0)
    size = {t["name"]: t["bytes"] for t in by_name.values()}
    order = {op["name"]: op.get("order") for op in plan.get("ops", [])}
    for n in graph.get("nodes", []):
        found = _bucket(n, size, align)
        if found is None:
            continue
        stated = (n.get("attrs") or {}).get("alignment", BUCKET_ALIGNMENT["cpu"])
        if n.get("op") != "AllReduce" and stated != align:
            # its shard's shape follows the attr, the layout and the kernel the backend's
            out.append(f"bucket of {n['name']!r}: alignment {stated} is not the "
                       f"{plan.get('backend', 'cpu')} arena's {align} bytes")
            continue
        members, padded, only = found
        what = "gradient" if only else "parameter"
        end = None
        for g in members:
            t = by_name.get(g)
            if t is None or t.get("alias_of") or t.get("placement", "device") != "device":
                out.append(f"bucket of {n['name']!r}: {what} {g!r} has no device buffer "
                           f"of its own")
                break
            if end is not None:
                want = -(-end // align) * align
                if t["offset"] != want:
                    out.append(f"bucket of {n['name']!r}: {what} {g!r} is at offset "
                               f"{t['offset']}, not side by side at {want}")
                    break
                k = bisect.bisect_right(starts, (end, ""))
                inside = [name for off, name in starts[k:k + 2] if end <= off < want]
                if inside:
                    out.append(f"bucket of {n['name']!r}: buffer {inside[0]!r} lies in the "
                               f"padding the collective reads")
            if only and list(t.get("readers", [])) != [n["name"]]:
                out.append(f"bucket of {n['name']!r}: gradient {g!r} is read by "
                           f"{sorted(set(t.get('readers', [])) - {n['name']})[:2]} too, "
                           f"but the collective sums it in place")
            end = t["offset"] + t["bytes"]
        else:
            if padded and members:
                out += _padding_problems(n["name"], by_name[members[0]]["offset"] + padded,
                                         end, set(members), order.get(n["name"]), by_name)
    return out


def _padding_problems(op: str, stop: int, end: int, members: set[str], at: Any,
                      by_name: dict[str, dict[str, Any]]) -> list[str]:
    # The tail [end, stop) of a sharded bucket: the collective reads and writes it (a shard
    # of it is some rank's), so no other buffer live while it runs may lie there.
    out = []
    for t in by_name.values():
        if (t["name"] in members or t.get("alias_of") in members
                or t.get("placement", "device") != "device" or t["bytes"] <= 0):
            continue
        live = at is None or t.get("first", -1) <= at <= t.get("last", at)
        if live and t["offset"] < stop and t["offset"] + t["bytes"] > end:
            out.append(f"bucket of {op!r}: buffer {t['name']!r} lies in the padding of its "
                       f"shards [{end}, {stop}), live while the collective runs")
            break
    return out


def _arena_problems(tensors: list[dict[str, Any]], memory: dict[str, Any]) -> list[str]:
    """`arena` and `budget`: buffers lie inside their pool; arena <= budget; LOAD <= arena."""
    out = []
    arena, host = memory["arena_bytes"], memory.get("host_bytes", 0)
    for t in tensors:
        limit = arena if t.get("placement", "device") == "device" else host
        if t["offset"] + t["bytes"] > limit:
            out.append(f"buffer {t['name']!r} ends at byte {t['offset'] + t['bytes']}, past the "
                       f"{t.get('placement', 'device')} pool of {limit} bytes")
    budget = memory.get("budget_bytes")
    if budget is not None and arena > budget:
        out.append(f"the arena ({arena} bytes) exceeds the memory budget ({budget} bytes)")
    if memory["load_bytes"] > arena:
        out.append(f"LOAD {memory['load_bytes']} exceeds the arena {arena}: some buffers "
                   f"live at once must overlap")
    return out


def _overlap_problems(tensors: list[dict[str, Any]], hb: StatedOrder,
                      after_step: int) -> list[str]:
    """Buffers sharing bytes, checked in the order their bytes are written: each byte's buffers
    form a chain, and checking each buffer against the previous holders of every byte it covers
    is enough, since happens-before is transitive (a buffer's write is one of its accesses). An
    alias joins the holders of its root's bytes rather than replacing them. A map of byte
    segments to their holders keeps this O(buffers log buffers)."""
    out: list[str] = []
    roots = {t["name"]: t for t in tensors}
    for placement in ("device", "host"):
        group = [t for t in tensors if t.get("placement", "device") == placement
                 and t["bytes"] > 0]
        group.sort(key=lambda t: (roots.get(_root(t), t)["first"], t["offset"]))
        starts: list[int] = [0]   # segment k covers [starts[k], starts[k + 1]) of the pool
        holders: list[list[dict[str, Any]]] = [[]]
        for b in group:
            lo, hi = b["offset"], b["offset"] + b["bytes"]
            i = bisect.bisect_right(starts, lo) - 1
            j = bisect.bisect_left(starts, hi)
            seen: set[int] = set()
            joined: list[dict[str, Any]] = []
            for held in holders[i:j]:
                if id(held) in seen:
                    continue
                seen.add(id(held))
                for a in held:
                    if _root(a) == _root(b):
                        joined = held
                    elif not (_ordered(a, b, hb, after_step, roots)
                              or _ordered(b, a, hb, after_step, roots)):
                        out.append(f"buffers {a['name']!r} and {b['name']!r} share {placement} "
                                   f"bytes [{max(a['offset'], lo)}, "
                                   f"{min(a['offset'] + a['bytes'], hi)}) but neither's "
                                   f"accesses happen-before the other's write")
            # b now holds [lo, hi); what lies past hi keeps its holders (segment j - 1's).
            tail = holders[j - 1]
            new_starts, new_holders = [lo], [[*joined, b]]
            if starts[i] < lo:
                new_starts.insert(0, starts[i])
                new_holders.insert(0, holders[i])
            if j == len(starts) or starts[j] != hi:
                new_starts.append(hi)
                new_holders.append(tail)
            starts[i:j] = new_starts
            holders[i:j] = new_holders
    return out


def _root(t: dict[str, Any]) -> str:
    return t.get("alias_of") or t["name"]


def _ordered(a: dict[str, Any], b: dict[str, Any], hb: StatedOrder, after_step: int,
             roots: dict[str, dict[str, Any]]) -> bool:
    """Every access of `a` happens-before the write of `b`'s bytes (by the writer of the
    buffer `b` aliases, for an alias: a view's bytes are written when its input is)."""
    writer = roots.get(_root(b), b).get("writer")
    if not writer or a["last"] >= after_step:
        return False
    # An access by an op the plan lacks is reported by the field rules; it orders nothing.
    if a.get("writer") and not hb.before(a["writer"], writer):
        return False
    for u in a.get("readers", ()):
        if not hb.before(u, writer):
            return False
    return True
