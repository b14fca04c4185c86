"""Data-parallel training as graph rewrites: the gradients cut into buckets in the order
backward writes them, and per bucket one AllReduce (`with_all_reduce`) or, with ZeRO-1's
sharded optimizer state, one ReduceScatter and one ShardedUpdate (`with_sharded_updates`);
`compute_graph` is the inverse, what the compute lanes run. How large a bucket is and where the
collectives run are planning decisions (planner.schedule.parallel).

Example:
    >>> from planner.frontend.autodiff import make_training_graph
    >>> from planner.graph.optimizer import Optimizer
    >>> from planner.zoo import build
    >>> g = make_training_graph(build("mlp", batch=4, hidden=[8], in_features=3, classes=2),
    ...                         Optimizer(kind="sgd"))
    >>> [len(b) for b in buckets(g, 64)]           # bytes: 8 + 64 | 32 + 96 of fc2, fc1
    [2, 2]
    >>> dp = with_all_reduce(g, buckets(g, 64), ranks=2)
    >>> [n.name for n in dp.nodes if n.op == "AllReduce"]
    ['allreduce/0', 'allreduce/1']
    >>> compute_graph(dp) == g
    True
"""

from __future__ import annotations

from planner.errors import UserError
from planner.graph.deps import in_dependency_order
from planner.graph.optimizer import UPDATE_OPS
from planner.graph.validate import check_graph
from planner.ir.graph import Graph, Node, Tensor
from planner.ops import get_op
from planner.ops.collective import COLLECTIVE_OPS, DEFAULT_ALIGNMENT, SHARDED_UPDATES, shard_floats
from planner.step.collectives.sharded_scaling import with_unscaled_shards, without_loss_scaling

_UPDATES = frozenset(op for op, _ in UPDATE_OPS.values())
# fp16-mixed's loss scaling reads the gradients first (planner/ops/loss_scale.py): it gets the
# averaged ones, so every rank sees the same overflow flag and skips the same steps. Next,
# clip_grad_norm_: the norm of the averaged gradients, as after DDP's backward (clipping each
# rank's own and averaging those would scale by norms no single process computes).
_UNSCALE = "UnscaleGrads"
_ACCUMULATE = "AccumulateGrad"
_CLIP = "ClipGradNorm"


def _gradient_readers(graph: Graph) -> frozenset[str]:
    """The ops whose gradient inputs are the all-reduced ones: the first of UnscaleGrads,
    ClipGradNorm and the updates to read the step's gradients."""
    ops = {n.op for n in graph.nodes}
    for first in (_UNSCALE, _CLIP):
        if first in ops:
            return frozenset({first})
    return _UPDATES


def reduced_gradients(graph: Graph) -> list[str]:
    """The gradients the optimizer updates read (or, with loss scaling, its UnscaleGrads),
    in the order backward writes them. With gradient accumulation those are the sums' new
    values (AccumulateGrad's outputs), so the collectives read them and run once per
    optimizer step, on its last micro-batch (planner.ir.accumulation: every reader of a
    sum's new value is an optimizer-step node), as PyTorch's `no_sync()` does."""
    readers = _gradient_readers(graph)
    sums = _sums(graph)
    read = {t for n in graph.nodes if n.op in readers for t in n.inputs
            if graph.tensor_map[t].role == "grad" or t in sums}
    return [t for n in graph.nodes for t in n.outputs if t in read]


def _sums(graph: Graph) -> set[str]:
    """The new values of the gradient sums of an accumulating graph."""
    return {o for n in graph.nodes if n.op == _ACCUMULATE for o in n.outputs}


def buckets(graph: Graph, limit: int) -> list[list[str]]:
    """The gradients in backward order, cut into buckets of at least `limit` bytes (the last
    one may hold less)."""
    out: list[list[str]] = [[]]
    size = 0
    for g in reduced_gradients(graph):
        out[-1].append(g)
        size += graph.tensor_map[g].nbytes
        if size >= limit:
            out.append([])
            size = 0
    return [b for b in out if b]


def _other_readers(graph: Graph, readers: frozenset[str]) -> set[str]:
    # The tensors read by anything but `readers`, graph outputs, and views' inputs (a view's
    # bytes are another tensor's: not its own to place).
    others = {t for n in graph.nodes if n.op not in readers for t in n.inputs}
    return others | set(graph.outputs) | {n.outputs[0] for n in graph.nodes
                                          if get_op(n.op).view}


def with_all_reduce(graph: Graph, bucket_list: list[list[str]], ranks: int,
                    ranks_per_host: int = 1) -> Graph:
    """`graph` with one AllReduce node per bucket, right after the bucket's last gradient's
    writer; every reader of a gradient but the AllReduce reads `allreduce/<gradient>`, and
    moves after it where it came before (deps.in_dependency_order)."""
    attrs: dict[str, int] = {"ranks": ranks}
    if ranks_per_host > 1:  # named only when used: plans of one rank per host read as before
        attrs["ranks_per_host"] = ranks_per_host
    reduced = {g: f"allreduce/{g}" for b in bucket_list for g in b}
    taken = sorted(set(reduced.values()) & set(graph.tensor_map))
    if taken or any(n.name.startswith("allreduce/") for n in graph.nodes):
        raise UserError(f"graph {graph.name!r}: the names allreduce/... are reserved for "
                        f"data-parallel training ({taken[:1] or 'a node'})")
    last = {b[-1]: k for k, b in enumerate(bucket_list)}
    # A bucket the all-reduce may sum in place, where memory planning lays it out side by
    # side (planner.memory.layout): one whose gradients nothing else reads.
    # (A view's bytes are another tensor's: not its own to place.)
    readers = _gradient_readers(graph)
    # A gradient sum's new value (accumulation) is written over its running sum's bytes, a
    # state tensor's: not a buffer layout can place, so the all-reduce copies it out.
    others = _other_readers(graph, readers) | _sums(graph)
    tensors = list(graph.tensors) + [
        Tensor(name=reduced[g], shape=graph.tensor_map[g].shape,
               dtype=graph.tensor_map[g].dtype, role="grad")
        for b in bucket_list for g in b]
    nodes: list[Node] = []
    for n in graph.nodes:
        nodes.append(n.model_copy(update={"inputs": tuple(reduced.get(t, t) for t in n.inputs)})
                     if n.op in readers else n)
        for out in n.outputs:
            if out in last:
                b = bucket_list[last[out]]
                nodes.append(Node(name=f"allreduce/{last[out]}", op="AllReduce", inputs=tuple(b),
                                  outputs=tuple(reduced[g] for g in b),
                                  attrs={**attrs, "in_place": int(not set(b) & others)}))
    # A gradient's reader may come before the bucket's last gradient (mixed precision casts
    # each gradient to float32 right before its update): it moves after the all-reduce.
    return check_graph(in_dependency_order(graph.model_copy(
        update={"tensors": tuple(tensors), "nodes": tuple(nodes)})))


def scatter_attrs(graph: Graph, bucket: list[str], attrs: dict[str, int]) -> dict[str, int]:
    """A bucket's ReduceScatter attrs: `attrs`, with `in_place` 0 where the bucket holds
    gradient sums' new values (accumulation): a sum's new value is written over its running
    sum's bytes, state that the bucket layout cannot place, so the reduce-scatter sums a copy
    in its scratch area and each rank's sums stay its own."""
    return {**attrs, "in_place": 0} if set(bucket) & _sums(graph) else dict(attrs)


def without_clip(graph: Graph) -> tuple[Graph, Node | None]:
    """`graph` with its ClipGradNorm taken out (the updates reading the gradients it read),
    and that node (None without one): sharding reduce-scatters the gradients first and clips
    their shards after (with_clipped_shards)."""
    clip = next((n for n in graph.nodes if n.op == _CLIP), None)
    if clip is None:
        return graph, None
    back = dict(zip(clip.outputs[:-1], clip.inputs, strict=True))
    nodes = tuple(n.model_copy(update={"inputs": tuple(back.get(t, t) for t in n.inputs)})
                  for n in graph.nodes if n is not clip)
    tensors = tuple(t for t in graph.tensors if t.name not in back)
    return graph.model_copy(update={"tensors": tensors, "nodes": nodes}), clip


def with_clipped_shards(graph: Graph, clip: Node | None, attrs: dict[str, int]) -> Graph:
    """`graph` (sharded) with `clip` (without_clip's) back as a ShardedClipGradNorm over every
    reduce-scatter's gradient shard, right after the last of them: the global norm of the
    averaged gradients from every rank's shards (planner.ops.collective), each update reading
    its shard clipped (`<shard>/clipped`), as clip_grad_norm_ after DDP's backward. Not
    checked: its caller checks the sharded graph once, whole."""
    if clip is None:
        return graph
    shards = [n.outputs[0] for n in graph.nodes if n.op == "ReduceScatter"]
    clipped = {s: f"{s}/clipped" for s in shards}
    last = max(i for i, n in enumerate(graph.nodes) if n.op == "ReduceScatter")
    node = Node(name=clip.name, op="ShardedClipGradNorm", inputs=tuple(shards),
                outputs=(*clipped.values(), clip.outputs[-1]),
                attrs={**{k: v for k, v in attrs.items() if k != "alignment"}, **clip.attrs})
    nodes = [n if n.op == "ReduceScatter" else
             n.model_copy(update={"inputs": tuple(clipped.get(t, t) for t in n.inputs)})
             for n in graph.nodes]
    nodes.insert(last + 1, node)
    tm = graph.tensor_map
    tensors = (*graph.tensors, *(Tensor(name=c, shape=tm[s].shape, role="grad")
                                 for s, c in clipped.items()))
    return in_dependency_order(graph.model_copy(
        update={"tensors": tensors, "nodes": tuple(nodes)}))


def sharded_gradients(graph: Graph, bucket_list: list[list[str]], flag: str) -> list[list[Node]]:
    """Per bucket, the optimizer updates of its gradients, in bucket order; UserError (naming
    `flag`) where a gradient has a reader besides its update or a bucket mixes updates."""
    update_of = {n.inputs[1]: n for n in graph.nodes if n.op in SHARDED_UPDATES}
    others = _other_readers(graph, frozenset(SHARDED_UPDATES))
    for g in (g for b in bucket_list for g in b):
        if g in others or g not in update_of:
            raise UserError(f"graph {graph.name!r}: {flag} needs the optimizer "
                            f"update to be gradient {g!r}'s only reader")
    for u in update_of.values():
        if u.attrs.get("dampening") or u.attrs.get("amsgrad") or u.attrs.get("momentum_input"):
            what = ("SGD's dampening" if u.attrs.get("dampening") else "Adam's amsgrad"
                    if u.attrs.get("amsgrad") else "a momentum read each step (cycle_momentum)")
            raise UserError(f"graph {graph.name!r}: {flag}: {what} (node {u.name!r}) is not "
                            f"built for a sharded update; train without it or without {flag}")
    out = []
    for k, b in enumerate(bucket_list):
        ups = [update_of[g] for g in b]
        # the update op, its attrs and its scalar inputs (step count, group hyperparameters)
        kinds = {(u.op, tuple(sorted(u.attrs.items())), u.inputs[2 + len(SHARDED_UPDATES[u.op]):])
                 for u in ups}
        if len(kinds) > 1:
            raise UserError(f"graph {graph.name!r}: {flag}: the parameters of "
                            f"bucket {k} are updated by different optimizers or parameter "
                            f"groups")
        out.append(ups)
    return out


def with_sharded_updates(graph: Graph, bucket_list: list[list[str]], ranks: int,
                         ranks_per_host: int = 1, alignment: int = DEFAULT_ALIGNMENT) -> Graph:
    """`graph` with ZeRO-1's sharded updates: per bucket, a ReduceScatter node right after
    its last gradient's writer, and one ShardedUpdate in place of its parameters' updates
    (where the last of them was), holding shards of the optimizer state
    (`shard/<k>/<slot>`) in place of the per-parameter slots; the buckets aligned as the
    arena aligns them (`alignment` bytes: the backend's bucket_alignment, named in the ops'
    `alignment` attr where it is not DEFAULT_ALIGNMENT); clip_grad_norm over the gradient
    shards (with_clipped_shards) and fp16-mixed's loss scaling over them
    (planner.step.collectives.sharded_scaling). UserError where a gradient has a reader besides its
    update or a bucket mixes updates.

    >>> from planner.frontend.autodiff import make_training_graph
    >>> from planner.graph.optimizer import Optimizer
    >>> from planner.zoo import build
    >>> g = make_training_graph(build("mlp", batch=4, hidden=[8], in_features=3, classes=2),
    ...                         Optimizer(kind="adam"))
    >>> z = with_sharded_updates(g, buckets(g, 64), ranks=2)
    >>> [n.name for n in z.nodes if n.op in COLLECTIVE_OPS]
    ['reducescatter/0', 'reducescatter/1', 'shardedupdate/1', 'shardedupdate/0']
    >>> z.tensor_map["shard/1/m"].shape   # fc1: 24 + 8 floats (the bias at 32) over 2 ranks
    (32,)
    >>> gpu = with_sharded_updates(g, buckets(g, 64), ranks=2, alignment=256)  # a GPU arena
    >>> gpu.tensor_map["shard/1/m"].shape  # the bias at 64 (256 bytes): 88 over 2, rounded up
    (64,)
    """
    graph, scaling = without_loss_scaling(graph)
    graph, clip = without_clip(graph)
    attrs: dict[str, int] = {"ranks": ranks}
    if ranks_per_host > 1:
        attrs["ranks_per_host"] = ranks_per_host
    if alignment != DEFAULT_ALIGNMENT:  # named only when used: CPU plans read as before
        attrs["alignment"] = alignment
    reserved = ("reducescatter/", "shardedupdate/", "shard/")
    taken = sorted(t.name for t in graph.tensors if t.name.startswith(reserved)) + sorted(
        n.name for n in graph.nodes if n.name.startswith(reserved))
    if taken:
        raise UserError(f"graph {graph.name!r}: the names reducescatter/..., "
                        f"shardedupdate/... and shard/... are reserved for --shard-optimizer "
                        f"({taken[0]!r})")
    scatter_after = {b[-1]: k for k, b in enumerate(bucket_list)}
    update_at: dict[str, int] = {}   # the last update of a bucket -> the bucket
    gone: set[str] = set()           # per-parameter state slots and updates replaced
    added: list[Tensor] = []
    sharded: dict[int, Node] = {}
    scatter: dict[int, Node] = {}
    tm = graph.tensor_map
    for k, (b, ups) in enumerate(zip(bucket_list, sharded_gradients(
            graph, bucket_list, "--shard-optimizer"), strict=True)):
        op, slots = ups[0].op, SHARDED_UPDATES[ups[0].op]
        params = [u.inputs[0] for u in ups]
        shard = (shard_floats([tm[p].size for p in params], ranks, alignment),)
        grad = Tensor(name=f"shard/{k}/grad", shape=shard, role="grad")
        state = [Tensor(name=f"shard/{k}/{s}", shape=shard, role="optimizer-state",
                        init="zeros") for s in slots]
        nexts = [Tensor(name=f"shard/{k}/{s}/next", shape=shard, role="optimizer-state",
                        updates=t.name) for s, t in zip(slots, state, strict=True)]
        added += [grad, *state, *nexts]
        gone |= {t for u in ups for t in (*u.inputs[2:2 + len(slots)], *u.outputs[1:])}
        gone |= {u.name for u in ups}
        scatter[k] = Node(name=f"reducescatter/{k}", op="ReduceScatter", inputs=tuple(b),
                          outputs=(grad.name,), attrs=scatter_attrs(graph, b, attrs))
        step = ups[0].inputs[2 + len(slots):]
        sharded[k] = Node(name=f"shardedupdate/{k}", op="ShardedUpdate",
                          inputs=(*params, grad.name, *(t.name for t in state), *step),
                          outputs=(*(u.outputs[0] for u in ups), *(t.name for t in nexts)),
                          attrs={"update": op, **ups[0].attrs, **attrs})
        update_at[max(ups, key=graph.nodes.index).name] = k
    nodes: list[Node] = []
    for n in graph.nodes:
        if n.name in update_at:
            nodes.append(sharded[update_at[n.name]])
        elif n.name not in gone:
            nodes.append(n)
        nodes += [scatter[scatter_after[o]] for o in n.outputs if o in scatter_after]
    tensors = tuple(t for t in graph.tensors if t.name not in gone) + tuple(added)
    # Checked once, with its clip and loss scaling back (each puts its ops in unchecked).
    return check_graph(with_unscaled_shards(with_clipped_shards(in_dependency_order(
        graph.model_copy(update={"tensors": tensors, "nodes": tuple(nodes)})), clip, attrs),
        scaling, attrs))


def compute_graph(graph: Graph) -> Graph:
    """`graph` without its collectives, the updates reading the gradients again: what the
    compute lanes run (the inverse of with_all_reduce; with_sharded_updates' updates are
    collectives, gone with their outputs; what ZeRO-3's compute ops read of theirs stays,
    unwritten, as inputs are)."""
    ar = [n for n in graph.nodes if n.op in COLLECTIVE_OPS]
    if not ar:
        return graph
    back = {r: g for n in ar if n.op == "AllReduce"
            for g, r in zip(n.inputs, n.outputs, strict=True)}
    # What compute ops read stays (ZeRO-3's gathered copies and gradient shards), written
    # before they run as inputs are.
    read = {t for n in graph.nodes if n.op not in COLLECTIVE_OPS for t in n.inputs}
    dropped = {t for n in ar if n.op != "AllReduce" for t in n.outputs if t not in read}
    nodes = tuple(n.model_copy(update={"inputs": tuple(back.get(t, t) for t in n.inputs)})
                  for n in graph.nodes if n.op not in COLLECTIVE_OPS)
    tensors = tuple(t for t in graph.tensors if t.name not in back and t.name not in dropped)
    return graph.model_copy(update={"tensors": tensors, "nodes": nodes})
