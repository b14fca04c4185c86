"""ZeRO-3's rules (planner plan --shard-parameters), re-derived from the embedded graph and the
plan's stated ordering; no code shared with planner.step.collectives.sharded_parameters:

    shards     a sharded parameter (a persistent param an AllGather reads) is read by
               all-gathers and by the update writing its next value only: every other reader
               reads a gathered copy
    gathered   every reader of a gathered copy is ordered after the AllGather writing it (the
               copy is complete: the whole bucket, every rank's shard); the bytes of a copy
               are not reused before its last reader (planner.verify.memory's buffer rules)
    stale      every all-gather of a shard is ordered before the update that writes the
               shard's next value (else it would gather the next step's parameters)
    updates    the update of a shard reads one gradient shard, written by one ReduceScatter
               ordered before it, over gradients of the very shapes, in the very order, the
               shard's all-gathers write: the same floats of the same bucket (through a
               ShardedClipGradNorm, clip_grad_norm_ over the shards, and a
               ShardedUnscaleGrads, fp16-mixed's, each ordered before it: the shard it
               clips or unscales); with fp16-mixed, the update writes the next value that a
               SkipOnOverflow writes over the shard, ordered after every gather of it
    ranks      every all-gather and reduce-scatter names the same ranks
An evaluation plan's graph (kind "inference": ZeRO-3's forward with its all-gathers) has the
shards and gathered rules; no update.

Collectives in one order on every rank: planner.verify.order.collective_problems (AllGather is
a collective op).
"""

from __future__ import annotations

from planner.ir.graph import Graph, Node
from planner.verify.order import StatedOrder


def sharding_problems(graph: Graph, hb: StatedOrder) -> list[str]:
    """Every rule of the module docstring the plan breaks; [] when it holds (or the graph
    shards no parameter)."""
    gathers = [n for n in graph.nodes if n.op == "AllGather"]
    if not gathers:
        return []
    tm = graph.tensor_map
    shards = {n.inputs[0] for n in gathers}
    writer = {o: n for n in graph.nodes for o in n.outputs}
    problems: list[str] = []
    update_of: dict[str, str] = {}
    skip_of: dict[str, str] = {}   # fp16-mixed: the SkipOnOverflow writing a shard's next value
    for n in graph.nodes:
        for o in n.outputs:
            if tm[o].updates in shards:
                update_of[tm[o].updates] = n.name
                if n.op == "SkipOnOverflow" and n.inputs[1] in writer:
                    skip_of[tm[o].updates] = n.name
                    update_of[tm[o].updates] = writer[n.inputs[1]].name
    for s in sorted(shards):
        if tm[s].role != "param" or tm[s].updates is not None:
            problems.append(f"all-gathered tensor {s!r} is not a persistent parameter shard")
    for n in graph.nodes:
        for t in n.inputs:
            if t in shards and n.op != "AllGather" and n.name not in (update_of.get(t),
                                                                       skip_of.get(t)):
                problems.append(f"op {n.name!r} reads parameter shard {t!r} itself, 1/N of the "
                                f"bucket, not a gathered copy")
    gathered = {o: g for g in gathers for o in g.outputs}
    for n in graph.nodes:
        for t in dict.fromkeys(n.inputs):
            g = gathered.get(t)
            if g is not None and not _ordered(hb, g.name, n.name):
                problems.append(f"op {n.name!r} reads gathered copy {t!r} but nothing the "
                                f"executor enforces orders all-gather {g.name!r} before it")
    for g in gathers:
        for up in (update_of.get(g.inputs[0]), skip_of.get(g.inputs[0])):
            if up is not None and not _ordered(hb, g.name, up):
                problems.append(f"all-gather {g.name!r} is not ordered before {up!r}, which "
                                f"writes the next value of shard {g.inputs[0]!r}")
    ranks = {int(n.attrs["ranks"]) for n in graph.nodes
             if n.op in ("AllGather", "ReduceScatter")}
    if len(ranks) > 1:
        problems.append(f"the collectives name different ranks {sorted(ranks)}")
    for s in sorted(shards):
        up = update_of.get(s)
        if up is None:
            if graph.kind == "training":  # (an evaluation reads the shards, updates none)
                problems.append(f"parameter shard {s!r} has no update")
            continue
        node = graph.node_map[up]
        grads = [_unclipped(t, writer, hb, up, problems) for t in node.inputs
                 if tm[t].role == "grad"]
        rs = [writer.get(t) for t in grads]
        if len(grads) != 1 or rs[0] is None or rs[0].op != "ReduceScatter":
            problems.append(f"update {up!r} of shard {s!r} reads no gradient shard a "
                            f"reduce-scatter writes ({grads})")
            continue
        scatter = rs[0]
        if not _ordered(hb, scatter.name, up):
            problems.append(f"update {up!r} is not ordered after {scatter.name!r}")
        scattered = [tm[t].shape for t in scatter.inputs]
        for g in (g for g in gathers if g.inputs[0] == s):
            if [tm[o].shape for o in g.outputs] != scattered:
                problems.append(f"update {up!r} steps shard {s!r} (gathered by {g.name!r} as "
                                f"{[list(tm[o].shape) for o in g.outputs]}) with the shard of "
                                f"{scatter.name!r}'s bucket {[list(x) for x in scattered]}: "
                                f"not the same floats")
    readers: dict[str, list[str]] = {}
    for n in graph.nodes:
        for t in n.inputs:
            readers.setdefault(t, []).append(n.name)
    for t in (t for n in graph.nodes if n.op == "ReduceScatter" for t in n.outputs):
        if len(readers.get(t, [])) != 1:
            problems.append(f"gradient shard {t!r} is read by {readers.get(t, [])}: one update "
                            f"(or the clip, then one update) steps it")
    return problems


def _unclipped(t: str, writer: dict[str, Node], hb: StatedOrder, up: str,
               problems: list[str]) -> str:
    """The gradient shard `t` is made of: through a ShardedClipGradNorm and a
    ShardedUnscaleGrads (fp16-mixed) whose output it is, their input at the same place (each
    ordered before update `up`), else `t` itself."""
    op = writer.get(t)
    if op is None or op.op not in _SHARD_STEPS or t not in op.outputs[:-1]:
        return t
    if not _ordered(hb, op.name, up):
        what = "the clip" if op.op == "ShardedClipGradNorm" else "the unscale"
        problems.append(f"update {up!r} is not ordered after {what} {op.name!r}")
    return _unclipped(op.inputs[op.outputs.index(t)], writer, hb, up, problems)


# The collectives between a reduce-scatter and the update that steps its shard.
_SHARD_STEPS = ("ShardedClipGradNorm", "ShardedUnscaleGrads")


def _ordered(hb: StatedOrder, a: str, b: str) -> bool:
    return a in hb.position and b in hb.position and hb.before(a, b)
