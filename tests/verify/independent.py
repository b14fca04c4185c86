"""An independent checker of a plan, written the obvious way, to judge `planner verify` with.

It shares no code with verify (planner/verify/): it reads the plan's
JSON data (its embedded graph included) and the ops' table (planner.ops: which op is a view)
only, and models what the CPU executor does with a plan:

    order     an op runs after the ops before it on its lane and after the ops of its
              happens-before edges; nothing else orders two ops (closure over every pair)
    accesses  the byte ranges each op reads and writes: a graph node reads each input from
              the copy of it that lists the node as a reader, else from the tensor's own
              buffer, and writes its outputs' buffers (a view writes nothing: its buffer is
              its input's bytes); an added op reads and writes the buffers it names; an op's
              scratch (a buffer of no tensor it writes) is read and written by it; an in-place
              all-reduce reads and writes its bucket's whole span, padding included
    values    every read finds the value it needs: the buffer holds the tensor the reader's
              kernel reads (a recompute of a BatchNorm: the saved statistics in place of the
              running ones), with its bytes; the op writing that buffer happens-before the
              read, and every other op writing any of those bytes happens-before that write
              or after the read (minimalloc's rectangles, checked pair by pair). Values read
              after the step (the graph's outputs, parameters and state) are read by a last
              op every op happens-before
    rank      every two collectives are ordered; an in-place all-reduce's gradients lie side
              by side (each at the previous end rounded up to 64 bytes) as its kernel sums them;
              so do a reduce-scatter's gradients and an all-gather's copies (ZeRO-3), whose
              kernels write on to the end of the last of the ranks' shards

`problems(plan)` lists what it finds racing or misreading; [] when the plan is safe.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from planner.ops import REGISTRY

SIZE = {"float32": 4, "float16": 2, "bfloat16": 2, "int64": 8, "int32": 4, "uint8": 1,
        "bool": 1, "float64": 8, "int8": 1}
COLLECTIVES = {"AllReduce", "ReduceScatter", "ShardedUpdate", "AllGather", "ShardedClipGradNorm",
               "ShardedUnscaleGrads"}
TRANSFER = {"offload": ("device", "host"), "prefetch": ("host", "device")}
PERSISTENT = {"input", "label", "param", "state", "optimizer-state"}
START, END = "<before the step>", "<after the step>"


def problems(plan: dict[str, Any]) -> list[str]:
    g = plan["graph"]
    shape = {t["name"]: t for t in g["tensors"]}
    nbytes = {n: _nbytes(t) for n, t in shape.items()}
    nodes = {n["name"]: n for n in g["nodes"]}
    buffers = {b["name"]: b for b in plan["tensors"]}
    ops = sorted(plan["ops"], key=lambda o: o["order"])
    out: list[str] = []
    names = [o["name"] for o in ops]
    after = _happens_before(plan, ops, out)

    def before(u: str, w: str) -> bool:
        return w != START and (u == START or w == END or w in after[u])

    added = {m["name"]: m for m in (plan.get("memory") or {}).get("ops", [])}
    reads: list[tuple[str, str, str]] = []     # (op, buffer, the value it must hold)
    writes: dict[str, list[str]] = defaultdict(list)   # op -> buffers whose bytes it writes
    spans: list[tuple[str, str, int, int]] = []       # (op, placement, lo, hi) written too
    for name in names:
        if name in added:
            m = added[name]
            if any(b not in buffers for b in (*m["inputs"], *m["outputs"])):
                out.append(f"{name}: names a buffer the plan lacks")
                continue
            if m["kind"] == "recompute":
                node = nodes.get(m["node"])
                if node is None:
                    out.append(f"{name}: no such node")
                    continue
                want_in = list(node["inputs"])
                if node["op"] == "BatchNorm":
                    want_in[3:5] = node["outputs"][3:5]
                if len(m["inputs"]) != len(want_in) or len(m["outputs"]) != len(node["outputs"]):
                    out.append(f"{name}: arity")
                    continue
                reads += [(name, b, t) for b, t in zip(m["inputs"], want_in, strict=True)]
                for b, t in zip(m["outputs"], node["outputs"], strict=True):
                    if buffers[b]["tensor"] != t:
                        out.append(f"{name}: writes {t} into {b}, which holds another value")
                    writes[name].append(b)
            else:
                if len(m["inputs"]) != 1 or len(m["outputs"]) != 1:
                    out.append(f"{name}: a transfer copies one buffer into one")
                    continue
                src, dst = buffers[m["inputs"][0]], buffers[m["outputs"][0]]
                if (src["placement"], dst["placement"]) != TRANSFER[m["kind"]]:
                    out.append(f"{name}: copies the wrong way")
                reads.append((name, src["name"], dst["tensor"]))
                writes[name].append(dst["name"])
        elif name in nodes:
            n = nodes[name]
            for t in dict.fromkeys(n["inputs"]):
                copies = [b for b in plan["tensors"] if b["tensor"] == t and b["name"] != t
                          and name in b["readers"]]
                reads.append((name, copies[0]["name"] if copies else t, t))
            view = REGISTRY[n["op"]].view
            for t in n["outputs"]:
                if t not in buffers:
                    out.append(f"{name}: output {t} has no buffer")
                elif not (view and buffers[t]["alias_of"]):
                    writes[name].append(t)
            if n["op"] == "AllReduce" and n["attrs"].get("in_place"):
                out += _bucket(n, buffers, nbytes, spans)
            if n["op"] in ("ReduceScatter", "AllGather"):
                members = n["inputs"] if n["op"] == "ReduceScatter" else n["outputs"]
                out += _bucket(n, buffers, nbytes, spans, members, n["attrs"]["ranks"])
        else:
            out.append(f"{name}: neither a node nor an added op")
    for b in plan["tensors"]:   # scratch: its op's own, read and written by it
        if not b["tensor"] and b["writer"]:
            writes[b["writer"]].append(b["name"])
            reads.append((b["writer"], b["name"], ""))
    finals = [t for t in g["outputs"]] + [t["name"] for t in g["tensors"] if t.get("updates")]
    updated = {t["updates"] for t in g["tensors"] if t.get("updates")}
    finals += [t["name"] for t in g["tensors"]
               if t["role"] in PERSISTENT - {"input", "label"} and t["name"] not in updated]
    reads += [(END, t, t) for t in finals]

    # The writer of each buffer, from the accesses (not from its `writer` field).
    writer: dict[str, list[str]] = defaultdict(list)
    for op, bs in writes.items():
        for b in bs:
            writer[b].append(op)
    for b in buffers.values():   # a view's buffer is written when its input is
        if not writer[b["name"]] and b["alias_of"] and b["tensor"] and \
                b["tensor"] in _view_outputs(nodes):
            writer[b["name"]] = [_view_outputs(nodes)[b["tensor"]]]
    produced = {t for n in g["nodes"] for t in n["outputs"]}
    for t in g["tensors"]:   # the caller's feeds and the loaded state: written before the step
        if t["role"] in PERSISTENT and t["name"] not in produced and t["name"] in buffers \
                and not writer[t["name"]]:
            writes[START].append(t["name"])
            writer[t["name"]] = [START]
    ranges = [(op, b, buffers[b]["placement"], buffers[b]["offset"],
               buffers[b]["offset"] + buffers[b]["bytes"]) for op, bs in writes.items()
              for b in bs] + spans
    pool = {"device": plan["summary"]["memory"]["arena_bytes"],
            "host": plan["summary"]["memory"].get("host_bytes", 0)}
    for b in buffers.values():
        if b["offset"] + b["bytes"] > pool[b["placement"]]:
            out.append(f"buffer {b['name']} lies outside its pool")
    for x, b, want in reads:
        if b not in buffers:
            out.append(f"{x} reads buffer {b}, which the plan lacks")
            continue
        buf = buffers[b]
        if buf["tensor"] != want:
            out.append(f"{x} reads {want} from {b}, which holds {buf['tensor']}")
            continue
        if want and buf["bytes"] < nbytes[want]:
            out.append(f"{x} reads {nbytes[want]} bytes of {want} from {b}, of {buf['bytes']}")
        ws = writer[b]
        if len(ws) > 1:
            out.append(f"{b} is written by {ws}")
            continue
        if not ws:
            out.append(f"{x} reads {b}, which nothing writes")
            continue
        w = ws[0]
        if w != x and not before(w, x):
            out.append(f"{x} reads {b} before or beside its writer {w}")
        lo, hi, side = buf["offset"], buf["offset"] + buf["bytes"], buf["placement"]
        for y, c, p, a, z in ranges:
            if c == b or p != side or z <= lo or hi <= a or y == x or (y == w != START):
                continue   # (one kernel's own buffers: below)
            if not (before(y, w) or (x != END and before(x, y))):
                out.append(f"{y} writes bytes of {b} between its write and {x}'s read")
    touched: dict[str, set[str]] = defaultdict(set)   # op -> every buffer it reads or writes
    for x, b, _ in reads:
        touched[x].add(b)
    for y, bs in writes.items():
        touched[y].update(bs)
    for y, bs in touched.items():   # one kernel's buffers: apart, but an alias and its base
        bs = sorted(b for b in bs if b in buffers)
        for i, a in enumerate(bs):
            for c in bs[i + 1:]:
                if _overlap(buffers[a], buffers[c]) and (a in writes[y] or c in writes[y]) \
                        and buffers[a]["alias_of"] != c and buffers[c]["alias_of"] != a:
                    out.append(f"{y} reads and writes {a} and {c}, which share bytes")
    colls = [o["name"] for o in ops if o["op"] in COLLECTIVES]
    out += [f"collectives {a} and {c} are unordered" for i, a in enumerate(colls)
            for c in colls[i + 1:] if not before(a, c)]
    return out


def _happens_before(plan: dict[str, Any], ops: list[dict[str, Any]],
                    out: list[str]) -> dict[str, set[str]]:
    """Per op, every op that runs after it, as the executor orders them."""
    pos = {o["name"]: k for k, o in enumerate(ops)}
    succ: dict[str, set[str]] = {o["name"]: set() for o in ops}
    last_run: dict[Any, list[str]] = {}
    run_group: dict[Any, str] = {}
    runs: dict[Any, list[str]] = {}
    for o in ops:   # lanes: runs of one parallel-loop group may run at once
        lane, group = o["lane"], o.get("group") or ""
        if lane in runs and group and run_group.get(lane) == group:
            runs[lane].append(o["name"])
        else:
            if lane in runs:
                last_run[lane] = runs[lane]
            runs[lane], run_group[lane] = [o["name"]], group
        for p in last_run.get(lane, []):
            succ[p].add(o["name"])
    for e in plan["happens_before"]:
        if e["before"] not in pos or e["after"] not in pos or \
                pos[e["before"]] >= pos[e["after"]]:
            out.append(f"edge {e['before']} -> {e['after']} is not followed")
            continue
        succ[e["before"]].add(e["after"])
    after: dict[str, set[str]] = {}
    for o in reversed(ops):
        s: set[str] = set()
        for w in succ[o["name"]]:
            s |= after[w] | {w}
        after[o["name"]] = s
    return after


def _bucket(n: dict[str, Any], buffers: dict[str, Any], nbytes: dict[str, int],
            spans: list, members: list[str] | None = None, ranks: int = 0) -> list[str]:
    """An in-place all-reduce's gradients side by side: the span its kernel reads and writes;
    with `ranks`, a sharded bucket's (a reduce-scatter's gradients, an all-gather's copies),
    whose span runs on to `ranks` shards of a whole number of 64 bytes."""
    out, end, lo = [], None, None
    for t in n["inputs"] if members is None else members:
        b = buffers.get(t)
        if b is None or b["placement"] != "device":
            return [f"{n['name']}: gradient {t} has no device buffer"]
        if end is not None and b["offset"] != -(-end // 64) * 64:
            out.append(f"{n['name']}: gradient {t} is not side by side with the previous one")
        lo = b["offset"] if lo is None else lo
        end = b["offset"] + nbytes[t]
    if lo is not None and ranks:
        per_rank = -(-((end - lo) // 4) // ranks) * 4     # bytes of whole floats
        shard = -(-per_rank // 64) * 64
        end = lo + ranks * shard
    if lo is not None:
        spans.append((n["name"], "", "device", lo, end))
    return out


def _overlap(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return a["placement"] == b["placement"] and a["offset"] < b["offset"] + b["bytes"] and \
        b["offset"] < a["offset"] + a["bytes"]


def _view_outputs(nodes: dict[str, Any]) -> dict[str, str]:
    return {t: name for name, n in nodes.items() if REGISTRY[n["op"]].view for t in n["outputs"]}


def _nbytes(t: dict[str, Any]) -> int:
    n = SIZE[t["dtype"]]
    for d in t["shape"]:
        n *= d
    return n
