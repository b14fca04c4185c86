"""fp16-mixed's dynamic loss scaling under sharding (--shard-optimizer, --shard-parameters), as
a pair of graph rewrites around the sharded ones (planner.step.collectives.data_parallel,
planner.step.collectives.sharded_parameters).

Unsharded, one UnscaleGrads reads every averaged gradient and writes the overflow flag
`grad/found_inf` that the step's SkipOnOverflow nodes and UpdateLossScale read
(planner.frontend.autodiff). After a reduce-scatter a rank holds only its shards of the averaged
gradients, so:

    without_loss_scaling   takes UnscaleGrads, the SkipOnOverflow nodes and UpdateLossScale
                           out: the updates read the (scaled) gradients and write the next
                           values themselves, as in a float32 graph, which the sharded
                           rewrites then shard as they do any
    with_unscaled_shards   puts them back over the shards: one ShardedUnscaleGrads
                           (planner.ops.collective) right after the last reduce-scatter
                           unscales every gradient shard and writes the flag reduced over
                           the ranks (1 where any rank's shards hold an inf or NaN), which
                           the clip and the updates read (`<shard>/unscaled`); every next
                           value an optimizer update writes is guarded by a SkipOnOverflow
                           reading that flag, but a ShardedUpdate's (ZeRO-1: its update and
                           its all-gather are one op), which reads the flag itself
                           (`skip_on_overflow`) and leaves its parameters and state shards
                           on an overflowing step; UpdateLossScale reads the flag, last

So every rank skips the same steps and updates its scale alike, as torch.amp's GradScaler does
with FSDP's ShardedGradScaler (whose found_inf is all-reduced across the ranks).

Example:
    >>> from planner.frontend.autodiff import make_training_graph
    >>> from planner.step.collectives.data_parallel import buckets, with_sharded_updates
    >>> from planner.graph.optimizer import Optimizer
    >>> from planner.zoo import build
    >>> g = make_training_graph(build("mlp", batch=4, hidden=[8], in_features=3, classes=2),
    ...                         Optimizer(kind="adam"), precision="fp16-mixed")
    >>> z = with_sharded_updates(g, buckets(g, 64), ranks=2)
    >>> u = z.node_map["grad/unscale"]
    >>> u.op, u.inputs[-1], u.outputs[-1]
    ('ShardedUnscaleGrads', 'optim/loss_scale', 'grad/found_inf')
    >>> [(n.name, n.inputs[-1]) for n in z.nodes if n.op == "ShardedUpdate"]
    [('shardedupdate/1', 'grad/found_inf'), ('shardedupdate/0', 'grad/found_inf')]
"""

from __future__ import annotations

from typing import NamedTuple

from planner.graph.deps import in_dependency_order
from planner.ir.graph import Graph, Node, Tensor
from planner.ops.collective import SHARDED_UPDATES

_UNSCALE = "UnscaleGrads"
_SKIP = "SkipOnOverflow"
_UPDATE_SCALE = "UpdateLossScale"
_UNCHECKED = "/unchecked"


class ScalingNodes(NamedTuple):
    """What without_loss_scaling took out of a graph: its UnscaleGrads, its SkipOnOverflow
    nodes and its UpdateLossScale, with the tensors only they wrote."""

    unscale: Node
    skips: tuple[Node, ...]
    update: Node | None   # (a graph of the user's own may scale its loss but keep the scale)
    tensors: tuple[Tensor, ...]


def without_loss_scaling(graph: Graph) -> tuple[Graph, ScalingNodes | None]:
    """`graph` without its loss scaling (module docstring), and what was taken out (None for a
    graph that scales no loss). The result is not checked: its scale is read (the backward
    seed) and no longer updated, which the caller's with_unscaled_shards mends."""
    unscale = next((n for n in graph.nodes if n.op == _UNSCALE), None)
    if unscale is None:
        return graph, None
    skips = tuple(n for n in graph.nodes if n.op == _SKIP)
    update = next((n for n in graph.nodes if n.op == _UPDATE_SCALE), None)
    scaled = update.outputs if update is not None else ()
    # readers of an unscaled gradient read it scaled; a writer of `<next>/unchecked` writes
    # `<next>` (Adam's updates read the step count's, `update/step/unchecked`, too)
    back = dict(zip(unscale.outputs[:-1], unscale.inputs[:-1], strict=True))
    back |= {s.inputs[1]: s.outputs[0] for s in skips}
    gone = {unscale.name} | {s.name for s in (*skips, update) if s is not None}
    nodes = tuple(n.model_copy(update={"inputs": tuple(back.get(t, t) for t in n.inputs),
                                       "outputs": tuple(back.get(t, t) for t in n.outputs)})
                  for n in graph.nodes if n.name not in gone)
    dropped = set(back) | {unscale.outputs[-1], *scaled}
    kept = tuple(t for t in graph.tensors if t.name not in dropped)
    taken = tuple(t for t in graph.tensors if t.name in dropped)
    return graph.model_copy(update={"tensors": kept, "nodes": nodes}), ScalingNodes(
        unscale, skips, update, taken)


def with_unscaled_shards(graph: Graph, scaling: ScalingNodes | None,
                         attrs: dict[str, int]) -> Graph:
    """`graph` (sharded, its collectives' `attrs`) with `scaling` (without_loss_scaling's) put
    back over the gradient shards (module docstring). Not checked: its caller checks the
    sharded graph once, whole."""
    if scaling is None:
        return graph
    tm = graph.tensor_map
    found, scale = scaling.unscale.outputs[-1], scaling.unscale.inputs[-1]
    shards = [n.outputs[0] for n in graph.nodes if n.op == "ReduceScatter"]
    unscaled = {s: f"{s}/unscaled" for s in shards}
    own = {s.outputs[0]: s for s in scaling.skips}   # (the step count's stays as it was)
    unchecked: dict[str, str] = {}   # next value -> the update's own, before the skip
    nodes: list[Node] = []
    skips: list[Node] = []
    for n in graph.nodes:
        ins = tuple(unscaled.get(t, t) for t in n.inputs)
        if n.op == "ShardedUpdate":
            nodes.append(n.model_copy(update={"inputs": (*ins, found), "attrs": {
                **n.attrs, "skip_on_overflow": True}}))
            continue
        guarded = [o for o in n.outputs if tm[o].updates and (
            o in own or n.op in SHARDED_UPDATES)]
        unchecked |= {o: o + _UNCHECKED for o in guarded}
        nodes.append(n.model_copy(update={
            "inputs": ins, "outputs": tuple(unchecked.get(o, o) for o in n.outputs)}))
        skips += [own.get(o) or Node(name=f"update/{o}/skip_on_overflow", op=_SKIP,
                                     inputs=(found, o + _UNCHECKED, tm[o].updates),
                                     outputs=(o,))
                  for o in guarded]
    # Adam's updates read the step count as it is before its skip (unsharded, too)
    nodes = [n.model_copy(update={"inputs": tuple(unchecked.get(t, t) for t in n.inputs)})
             if n.op in SHARDED_UPDATES or n.op == "ShardedUpdate" else n for n in nodes]
    last = max(i for i, n in enumerate(nodes) if n.op == "ReduceScatter")
    nodes.insert(last + 1, Node(
        name=scaling.unscale.name, op="ShardedUnscaleGrads", inputs=(*shards, scale),
        outputs=(*unscaled.values(), found),
        attrs={k: v for k, v in attrs.items() if k != "alignment"}))
    nodes += [*skips, *([scaling.update] if scaling.update is not None else [])]
    old = {t.name: t for t in scaling.tensors}
    tensors = (*graph.tensors,
               *(Tensor(name=u, shape=tm[s].shape, role="grad") for s, u in unscaled.items()),
               *(old.get(u) or Tensor(name=u, shape=tm[o].shape, dtype=tm[o].dtype,
                                      role="activation")
                 for o, u in unchecked.items()),
               *(t for t in scaling.tensors if t.name == found or scaling.update is not None
                 and t.name in scaling.update.outputs))
    return in_dependency_order(graph.model_copy(
        update={"tensors": tensors, "nodes": tuple(nodes)}))
