"""Random mutations of a plan's JSON data, the kinds a hostile edit or a planner bug makes:
edges dropped, ops moved to other lanes, added ops' inputs and outputs re-pointed, nodes
made to read a copy of their input, buffers moved or resized, collectives spread over lanes.
Each keeps the plan's bookkeeping true (the buffers' readers, writer and lifetime follow a
re-pointed op; a lane keeps its ops' predicted times apart; the pools' ends do not move), so
what it can break is what runs in what order on which bytes: whether a mutant races or
misreads is for a checker to say.

`mutant(plan, rng)` returns (a mutated copy, what was done).
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np

COLLECTIVES = {"AllReduce", "ReduceScatter", "ShardedUpdate", "AllGather", "ShardedClipGradNorm",
               "ShardedUnscaleGrads"}


def mutant(plan: dict[str, Any], rng: np.random.Generator) -> tuple[dict[str, Any], str]:
    kinds = [k for k, applies in KINDS if applies(plan)]
    for _ in range(20):
        data = copy.deepcopy(plan)
        kind = kinds[int(rng.integers(len(kinds)))]
        done = MUTATIONS[kind](data, rng)
        if done:
            return data, f"{kind}: {done}"
    raise AssertionError("no mutation applies")


def _pick(rng: np.random.Generator, items: list) -> Any:
    return items[int(rng.integers(len(items)))] if items else None


def drop_edge(data, rng) -> str:
    e = _pick(rng, data["happens_before"])
    if e is None:
        return ""
    data["happens_before"].remove(e)
    return f"{e['before']} -> {e['after']}"


def _fits(data, op, lane) -> bool:
    """Whether `op` on `lane` keeps the lane's predicted times apart (a lane runs one op at
    a time) and leaves no lane empty."""
    if sum(o["lane"] == op["lane"] for o in data["ops"]) < 2 and lane != op["lane"]:
        return False
    others = sorted((o for o in data["ops"] if o["lane"] == lane and o is not op),
                    key=lambda o: o["order"])
    before = [o for o in others if o["order"] < op["order"]]
    after = [o for o in others if o["order"] > op["order"]]
    return (not before or before[-1]["end"] <= op["start"]) and \
        (not after or op["end"] <= after[0]["start"])


def move_lane(data, rng) -> str:
    op = _pick(rng, data["ops"])
    fresh = 1 + max(o["lane"] for o in data["ops"])
    lanes = [k for k in range(fresh + 1) if k != op["lane"] and _fits(data, op, k)]
    lane = _pick(rng, lanes)
    if lane is None:
        return ""
    old, op["lane"] = op["lane"], lane
    return f"{op['name']} lane {old} -> {lane}"


def spread_collectives(data, rng) -> str:
    names = {o["name"] for o in data["ops"] if o["op"] in COLLECTIVES}
    # The first stays, so that no lane is left empty.
    moved = sorted((o for o in data["ops"] if o["name"] in names), key=lambda o: o["order"])
    moved = [o for o in moved[1:] if rng.random() < 0.7]
    fresh = 1 + max(o["lane"] for o in data["ops"])
    moved = [o for o in moved if _fits(data, o, fresh)]
    if not moved:
        return ""
    for k, o in enumerate(moved):
        o["lane"] = fresh + k
    if rng.random() < 0.7:
        data["happens_before"] = [e for e in data["happens_before"]
                                  if not (e["before"] in names and e["after"] in names)]
    return f"{[o['name'] for o in moved]} on lanes of their own"


def _order(data, name) -> int:
    return next(o["order"] for o in data["ops"] if o["name"] == name)


def repoint_input(data, rng) -> str:
    m = _pick(rng, data["memory"]["ops"])
    k = int(rng.integers(len(m["inputs"])))
    buffers = {b["name"]: b for b in data["tensors"]}
    old = buffers[m["inputs"][k]]
    at = _order(data, m["name"])
    same = [b for b in data["tensors"] if b["tensor"] == old["tensor"] and b is not old]
    live = [b for b in data["tensors"] if b["first"] < at <= b["last"] and b is not old]
    new = _pick(rng, same if same and rng.random() < 0.5 else live)
    if new is None:
        return ""
    m["inputs"][k] = new["name"]
    if m["name"] not in m["inputs"]:
        old["readers"] = [r for r in old["readers"] if r != m["name"]]
    new["readers"] = sorted({*new["readers"], m["name"]})
    new["last"] = max(new["last"], at)
    return f"{m['name']} input {k}: {old['name']} -> {new['name']}"


def repoint_output(data, rng) -> str:
    m = _pick(rng, data["memory"]["ops"])
    k = int(rng.integers(len(m["outputs"])))
    buffers = {b["name"]: b for b in data["tensors"]}
    old = buffers[m["outputs"][k]]
    new = _pick(rng, [b for b in data["tensors"] if b is not old and not b["alias_of"]
                      and b["placement"] == old["placement"]])
    m["outputs"][k] = new["name"]
    old["writer"] = ""
    new["writer"], new["first"] = m["name"], _order(data, m["name"])
    return f"{m['name']} output {k}: {old['name']} -> {new['name']}"


def read_copy(data, rng) -> str:
    """A graph node made to read a copy of its input (it reads the copy that lists it)."""
    copies = [b for b in data["tensors"] if b["tensor"] and b["name"] != b["tensor"]
              and b["placement"] == "device"]
    c = _pick(rng, copies)
    if c is None:
        return ""
    listed = {r for b in data["tensors"] if b["tensor"] == c["tensor"] and b["name"] != c["tensor"]
              for r in b["readers"]}
    nodes = [n["name"] for n in data["graph"]["nodes"]
             if c["tensor"] in n["inputs"] and n["name"] not in listed]
    node = _pick(rng, nodes)
    if node is None:
        return ""
    own = next((b for b in data["tensors"] if b["name"] == c["tensor"]), None)
    if own is not None:
        own["readers"] = [r for r in own["readers"] if r != node]
    c["readers"] = sorted({*c["readers"], node})
    c["last"] = max(c["last"], _order(data, node))
    return f"{node} reads {c['name']}"


def _movable(data) -> list[dict[str, Any]]:
    """Buffers that can move or grow without moving their pool's end: no alias of or to them."""
    aliased = {b["alias_of"] for b in data["tensors"] if b["alias_of"]}
    return [b for b in data["tensors"] if not b["alias_of"] and b["name"] not in aliased
            and b["bytes"] > 0]


def _room(data, b) -> int:
    """The pool's end without `b`: where it may end at most."""
    return max(t["offset"] + t["bytes"] for t in data["tensors"]
               if t is not b and t["placement"] == b["placement"])


def move_offset(data, rng) -> str:
    b = _pick(rng, _movable(data))
    top = (_room(data, b) - b["bytes"]) // 64
    if b is None or top < 1:
        return ""
    old, b["offset"] = b["offset"], 64 * int(rng.integers(top + 1))
    return f"{b['name']} offset {old} -> {b['offset']}"


def resize(data, rng) -> str:
    b = _pick(rng, _movable(data))
    grow = 64 * int(rng.integers(1, 64))
    old = b["bytes"]
    if rng.random() < 0.5 and b["offset"] + b["bytes"] + grow <= _room(data, b):
        b["bytes"] += grow
    elif b["tensor"] and b["bytes"] > 4:   # (a scratch's size is its kernel's to check)
        b["bytes"] -= min(b["bytes"] - 4, 4 * int(rng.integers(1, 16)))
    else:
        return ""
    memory = data["summary"]["memory"]   # its figures follow: every tensor its own bytes,
    if b["tensor"] and b["name"] == b["tensor"]:   # and twice what offloads copy
        memory["naive_bytes"] += b["bytes"] - old
    if any(b["name"] in m["inputs"] for m in data["memory"]["ops"] if m["kind"] == "offload"):
        memory["transfer_bytes"] += 2 * (b["bytes"] - old)
    return f"{b['name']} bytes {old} -> {b['bytes']}"


MUTATIONS = {"drop_edge": drop_edge, "move_lane": move_lane,
             "spread_collectives": spread_collectives, "repoint_input": repoint_input,
             "repoint_output": repoint_output, "read_copy": read_copy,
             "move_offset": move_offset, "resize": resize}
KINDS = [("drop_edge", lambda p: bool(p["happens_before"])),
         ("move_lane", lambda p: True),
         ("spread_collectives", lambda p: any(o["op"] in COLLECTIVES for o in p["ops"])),
         ("repoint_input", lambda p: bool(p["memory"]["ops"])),
         ("repoint_output", lambda p: bool(p["memory"]["ops"])),
         ("read_copy", lambda p: bool(p["memory"]["ops"])),
         ("move_offset", lambda p: True),
         ("resize", lambda p: True)]
