"""The rules an op memory planning added (plan.memory.ops, planner.memory.decision.MemoryOp)
must follow for an executor to run it as it runs a graph node (nothing of planner.memory is
imported: the rules are re-derived from the plan's data):

    buffers     every buffer it reads or writes is one of the plan's (plan.tensors)
    recompute   its node exists, and it reads one buffer per input of the node, each holding
                that input's tensor (but what its op's recompute_reads names in their place,
                planner/ops: a BatchNorm reads the batch statistics its node saved in place of
                its running statistics; and a ZeRO-3 parameter copy may be the one a later
                all-gather of the same shard writes, planner.ops.collective.gathered_again,
                live when the recompute runs: gathered before it) with the tensor's bytes, and
                writes one per output, each holding that output's value
    transfer    one buffer in, one out, holding the same tensor, the source on the side and the
                slot on the other that TRANSFER_PLACEMENTS names; both hold the tensor's
                bytes, so the copy is of the whole tensor
    live        it writes each output (the buffer's writer) and each input is live when it
                runs: the buffer lists it as a reader and its lifetime reaches the op, so
                nothing else may have its bytes yet

Example:
    >>> plan = {"graph": {"nodes": [], "tensors": [{"name": "x", "shape": [4],
    ...         "dtype": "float32"}]}, "ops": [{"name": "offload/x", "order": 0}],
    ...         "tensors": [], "memory": {"ops": [{"name": "offload/x", "kind": "offload",
    ...         "inputs": ["x"], "outputs": ["x@host"]}]}}
    >>> inserted_op_problems(plan)[0]
    "added op 'offload/x' reads buffer 'x', which the plan does not have"
"""

from __future__ import annotations

from typing import Any

from planner.dtypes import DTYPE_BYTES
from planner.ops import REGISTRY
from planner.ops.collective import gathered_again

# The plan format's copies between the device arena and the host store (docs/plans.md): the
# kind of an added op -> (its op type, the side it reads, the side it writes). Spelled here,
# as the format says, not taken from memory planning, whose ops this checks
# (tests/verify/test_independent_vocabulary.py holds the two to one format).
TRANSFERS = {"offload": ("Offload", "device", "host"), "prefetch": ("Prefetch", "host", "device")}
TRANSFER_PLACEMENTS = {kind: (a, b) for kind, (_, a, b) in TRANSFERS.items()}


def inserted_op_problems(plan: dict[str, Any]) -> list[str]:
    """Every rule an added op of the plan (as JSON data) breaks, one line each naming it."""
    added = (plan.get("memory") or {}).get("ops") or []
    if not added:
        return []
    graph = plan.get("graph") or {}
    nodes = {n.get("name"): n for n in graph.get("nodes", [])}
    sizes = {t.get("name"): _nbytes(t) for t in graph.get("tensors", [])}
    buffers = {t.get("name"): t for t in plan.get("tensors") or []}
    order = {o.get("name"): o.get("order") for o in plan.get("ops", [])}
    # ZeRO-3: a parameter's copy gathered again for backward holds its forward copy's floats,
    # which a recompute in backward reads in its place (the forward copy is freed by then).
    again = gathered_again([(n.get("op"), list(n.get("inputs") or []),
                             list(n.get("outputs") or [])) for n in graph.get("nodes", [])])
    problems: list[str] = []
    for m in added:
        problems += _op_problems(m, nodes, sizes, buffers, order, again)
    return problems


def _op_problems(m: dict[str, Any], nodes: dict[str, Any], sizes: dict[str, int],
                 buffers: dict[str, Any], order: dict[str, Any], again: dict[str, str]
                 ) -> list[str]:
    name, kind, label = m.get("name"), m.get("kind"), f"added op {m.get('name')!r}"
    ins, outs = list(m.get("inputs") or []), list(m.get("outputs") or [])
    out = [f"{label} {verb} buffer {b!r}, which the plan does not have"
           for verb, bs in (("reads", ins), ("writes", outs)) for b in bs if b not in buffers]
    if out:
        return out
    if kind == "recompute":
        node = nodes.get(m.get("node"))
        if node is None:
            return [f"{label} recomputes node {m.get('node')!r}, which the graph does not have"]
        held = [buffers[b].get("tensor") for b in outs]
        reads = recompute_reads(node)
        if len(ins) != len(reads) or held != list(node.get("outputs", [])):
            return [f"{label} does not read one buffer per input of node "
                    f"{m.get('node')!r} and write copies of its outputs, in order"]
        # The kernel runs on these buffers as its node's inputs: each must hold that value,
        # whole, or the recompute reads another tensor's bytes (or past a smaller one's end).
        for b, want in zip(ins, reads, strict=True):
            has, need = buffers[b].get("tensor"), sizes.get(want, 0)
            if has != want and (has is None or again.get(want) != has):
                out.append(f"{label} reads buffer {b!r} as tensor {want!r} of node "
                           f"{m.get('node')!r}, but the buffer holds {has or 'no tensor'!r}")
            elif buffers[b].get("bytes", 0) < need:
                out.append(f"{label} reads {need} bytes of tensor {want!r} from buffer {b!r}, "
                           f"a buffer of {buffers[b].get('bytes', 0)} bytes")
    elif kind in TRANSFER_PLACEMENTS:
        if len(ins) != 1 or len(outs) != 1:
            return [f"{label} copies {len(ins)} buffer(s) into {len(outs)}; a transfer copies "
                    f"one into one"]
        src, dst = buffers[ins[0]], buffers[outs[0]]
        sides = (src.get("placement", "device"), dst.get("placement", "device"))
        if sides != TRANSFER_PLACEMENTS[kind]:
            out.append(f"{label} copies {sides[0]} to {sides[1]}; an {kind} copies "
                       f"{TRANSFER_PLACEMENTS[kind][0]} to {TRANSFER_PLACEMENTS[kind][1]}")
        if src.get("tensor") != dst.get("tensor") or not src.get("tensor"):
            out.append(f"{label} copies {ins[0]!r} into {outs[0]!r}, which hold different "
                       f"values")
        need = sizes.get(src.get("tensor"), 0)
        for b in (src, dst):
            if b.get("bytes", 0) < need:
                out.append(f"{label} copies {need} bytes of {src.get('tensor')!r} through "
                           f"{b.get('name')!r}, a slot of {b.get('bytes', 0)} bytes")
    else:
        return [f"{label} is of unknown kind {kind!r}"]
    at = order.get(name)
    if at is None:
        return out + [f"{label} is not scheduled"]
    for b in outs:
        if buffers[b].get("writer") != name:
            out.append(f"{label} writes buffer {b!r}, whose writer is "
                       f"{buffers[b].get('writer')!r}")
    for b in ins:
        t = buffers[b]
        if name not in (t.get("readers") or ()) or not t.get("first", 0) <= at <= t.get("last", -1):
            out.append(f"{label} reads buffer {b!r}, which is not live when it runs (its "
                       f"bytes are free from op {t.get('last')} on, it runs at {at})")
    return out


def recompute_reads(node: dict[str, Any]) -> list[str]:
    """The tensors a recompute of `node` (graph JSON) reads, in its input order: the node's
    inputs, or what its op's recompute_reads names (planner/ops: a BatchNorm's running mean and
    variance, inputs 3 and 4, which its training run has overwritten by then, give way to the
    batch statistics the node saved, outputs 3 and 4, on which its normalised output depends
    alone). An op the table lacks: its inputs (the graph's own check names it).

    >>> recompute_reads({"op": "BatchNorm", "inputs": ["x", "g", "b", "rm", "rv"],
    ...                  "outputs": ["y", "rm'", "rv'", "mean", "istd"]})
    ['x', 'g', 'b', 'mean', 'istd']
    """
    ins, outs = list(node.get("inputs", [])), list(node.get("outputs", []))
    op = REGISTRY.get(node.get("op")) if isinstance(node.get("op"), str) else None
    return ins if op is None else list(op.recompute_operands(ins, outs))


def _nbytes(t: dict[str, Any]) -> int:
    n = DTYPE_BYTES.get(t.get("dtype"), 0)
    for d in t.get("shape") or []:
        n *= int(d)
    return n
