"""ZeRO-3 (planner plan --shard-parameters) as a graph rewrite: every rank holds 1/N of each
parameter bucket, of its gradients and of its optimizer state between steps, and gathers a
bucket's parameters only while the step reads them.

Per bucket k (the gradient buckets of planner.step.collectives.data_parallel.buckets, whose
parameters lie side by side as their gradients do, so a parameter shard and a gradient shard
cover the same floats):

    shard/k/param                 persistent: this rank's shard of the parameters' bucket
    allgather/k                   AllGather -> gathered/<p>: before the bucket's first forward
                                  reader; its copy lives until its last reader
    allgather/k/backward          AllGather -> regathered/<p>: before its first backward
                                  reader, unless the forward copy is kept (`keep` 1)
    reducescatter/k               ReduceScatter of the gradients -> shard/k/grad (as ZeRO-1)
    shardedupdate/k               the optimizer's own update (SGD, ApplyMomentum, ApplyAdam) on
                                  the shards: shard/k/param, shard/k/grad, shard/k/<slot>; no
                                  all-gather after it (the next step's gathers are that)

Keeping the forward copy for backward is, by default, a decision made here from the graph: a
bucket is kept where no other bucket's parameter is read between its last forward reader and
its first backward reader (the last layers, whose gap is the loss): freeing it there would save
its bytes only over parameter-free ops, at the price of one more all-gather. Planning may
choose otherwise per bucket from the costs and the memory timeline (`keep`, chosen by
planner.pipeline.gathers: a kept copy held over the step's peak is freed there). How far ahead
of its first reader each all-gather is issued is the schedule's decision
(planner.schedule.parallel), within the prefetch depth planning chose for it.

Example:
    >>> from planner.frontend.autodiff import make_training_graph
    >>> from planner.graph.optimizer import Optimizer
    >>> from planner.step.collectives.data_parallel import buckets
    >>> from planner.zoo import build
    >>> g = make_training_graph(build("mlp", batch=4, hidden=[8, 8], in_features=3,
    ...                               classes=2), Optimizer(kind="adam"))
    >>> z = with_sharded_parameters(g, buckets(g, 64), ranks=2)
    >>> [(n.name, n.attrs.get("keep")) for n in z.nodes if n.op == "AllGather"]
    [('allgather/2', 0), ('allgather/1', 0), ('allgather/0', 1), ('allgather/1/backward', None)]
    >>> z.tensor_map["shard/2/param"].shape, z.tensor_map["gathered/fc1/weight"].role
    ((32,), 'activation')

fc1's weight has no backward reader (no gradient of the input is needed); fc3's copy is kept
over the loss; fc2's is freed after fc2 and gathered again for grad/fc2/matmul.
"""

from __future__ import annotations

from planner.errors import UserError
from planner.graph.deps import in_dependency_order
from planner.graph.validate import check_graph
from planner.ir.graph import Graph, Node, Tensor
from planner.ops.collective import SHARDED_UPDATES, shard_floats
from planner.step.collectives.data_parallel import (
    scatter_attrs,
    sharded_gradients,
    with_clipped_shards,
    without_clip,
)
from planner.step.collectives.sharded_scaling import with_unscaled_shards, without_loss_scaling


def backward_start(graph: Graph) -> int:
    """The index of the first node that writes a gradient: backward starts there."""
    return next((i for i, n in enumerate(graph.nodes)
                 if any(graph.tensor_map[t].role == "grad" for t in n.outputs)), len(graph.nodes))


def gather_bucket(name: str) -> int:
    """The bucket of an all-gather the rewrite named (allgather/<k>, allgather/<k>/backward)."""
    return int(name.split("/")[1])


def kept_buckets(graph: Graph) -> tuple[bool, ...]:
    """Per bucket of a rewritten graph (one reduce-scatter each), whether its forward copy is
    kept for backward."""
    count = sum(1 for n in graph.nodes if n.name.startswith("reducescatter/"))
    kept = {gather_bucket(n.name) for n in graph.nodes
            if n.name.startswith("allgather/") and n.attrs.get("keep") == 1}
    return tuple(k in kept for k in range(count))


RESERVED = ("reducescatter/", "shardedupdate/", "shard/", "allgather/", "gathered/",
            "regathered/")


def _check(graph: Graph, buckets: int, keep: tuple[bool, ...]) -> None:
    """UserError when the graph already uses a name the rewrite reserves, or `keep` is not
    one decision per bucket."""
    if keep and len(keep) != buckets:
        raise UserError(f"graph {graph.name!r}: --shard-parameters keeps {len(keep)} buckets' "
                        f"forward copies; the step has {buckets} buckets")
    taken = sorted(t.name for t in graph.tensors if t.name.startswith(RESERVED)) + sorted(
        n.name for n in graph.nodes if n.name.startswith(RESERVED))
    if taken:
        raise UserError(f"graph {graph.name!r}: the names {', '.join(r + '...' for r in RESERVED)}"
                        f" are reserved for --shard-parameters ({taken[0]!r})")


def _readers(graph: Graph, params: list[str], updates: set[str]) -> dict[str, list[int]]:
    """Per parameter, the indices of the nodes reading it (its update aside); UserError for a
    parameter the rewrite cannot shard."""
    readers: dict[str, list[int]] = {p: [] for p in params}
    for i, n in enumerate(graph.nodes):
        if n.name in updates:
            continue
        for t in dict.fromkeys(n.inputs):
            if t in readers:
                readers[t].append(i)
    tm = graph.tensor_map
    for p in params:
        if tm[p].dtype != "float32" or tm[p].role != "param" or p in graph.outputs:
            raise UserError(f"graph {graph.name!r}: --shard-parameters shards float32 parameters "
                            f"that the step does not output; {p!r} is not one")
    return readers


def _gathers(graph: Graph, k: int, params: list[str], own: Tensor, fwd: list[int],
             back: list[int], keep: bool, attrs: dict) -> list[tuple[Node, list[Tensor],
                                                                       list[int], str]]:
    """Bucket k's all-gathers: per phase that reads its parameters, the AllGather, its copies,
    the indices of the nodes that read them and the copies' name prefix (module docstring)."""
    tm = graph.tensor_map
    gather_attrs = {**attrs, "ndims": [len(tm[p].shape) for p in params],
                    "dims": [d for p in params for d in tm[p].shape]}
    out = []
    for phase, at, prefix in (("forward", fwd + (back if keep else []), "gathered/"),
                              ("backward", [] if keep else back, "regathered/")):
        if not at:
            continue
        copies = [Tensor(name=f"{prefix}{p}", shape=tm[p].shape) for p in params]
        name = f"allgather/{k}" + ("/backward" if phase == "backward" else "")
        extra = {"keep": int(keep)} if phase == "forward" else {}
        out.append((Node(name=name, op="AllGather", inputs=(own.name,),
                         outputs=tuple(c.name for c in copies),
                         attrs={**gather_attrs, **extra}), copies, at, prefix))
    return out


def _kept(fwd: list[int], back: list[int], others: set[int], keep: bool | None) -> bool:
    """Whether a bucket read in forward (at `fwd`) and backward (`back`) keeps its forward copy
    for backward: as planning chose (`keep`, GatherChoice), else the graph's rule (module
    docstring: no other bucket's parameter read in between, at `others`)."""
    if not (fwd and back):
        return False
    return keep if keep is not None else not any(fwd[-1] < i < back[0] for i in others)


def _rewritten(graph: Graph, before: dict[int, list[Node]], update_at: dict[str, Node],
               scatter_after: dict[str, Node], renamed: dict[int, dict[str, str]],
               gone: set[str]) -> list[Node]:
    """The graph's nodes with the gathers before their first readers, the sharded updates in
    place of the last of their bucket's, the reduce-scatters after their bucket's last
    gradient, the readers reading the gathered copies, and what the shards replace gone."""
    nodes: list[Node] = []
    for i, n in enumerate(graph.nodes):
        nodes += before.get(i, [])
        if n.name in update_at:
            nodes.append(update_at[n.name])
        elif n.name not in gone:
            names = renamed.get(i, {})
            nodes.append(n.model_copy(update={"inputs": tuple(names.get(t, t)
                                                               for t in n.inputs)})
                         if names else n)
        nodes += [scatter_after[o] for o in n.outputs if o in scatter_after]
    return nodes


def with_sharded_parameters(graph: Graph, bucket_list: list[list[str]], ranks: int,
                            ranks_per_host: int = 1, keep: tuple[bool, ...] = ()) -> Graph:
    """`graph` with its parameters, gradients and optimizer state sharded over `ranks`
    (module docstring), clip_grad_norm's over the gradient shards (with_clipped_shards),
    fp16-mixed's loss scaling over them (planner.step.collectives.sharded_scaling); `keep`:
    _kept's, per bucket. UserError for a gradient read by more than its update, a bucket of
    mixed updates, reserved names in use, a `keep` of another length than the buckets."""
    graph, scaling = without_loss_scaling(graph)
    graph, clip = without_clip(graph)
    _check(graph, len(bucket_list), keep)
    attrs: dict[str, int] = {"ranks": ranks}
    if ranks_per_host > 1:
        attrs["ranks_per_host"] = ranks_per_host
    tm = graph.tensor_map
    groups = sharded_gradients(graph, bucket_list, "--shard-parameters")
    bwd = backward_start(graph)
    params_of = [[u.inputs[0] for u in ups] for ups in groups]
    bucket_of = {p: k for k, ps in enumerate(params_of) for p in ps}
    readers = _readers(graph, list(bucket_of), {u.name for ups in groups for u in ups})
    gone: set[str] = set()
    added: list[Tensor] = []
    before: dict[int, list[Node]] = {}     # node index -> the gathers inserted before it
    renamed: dict[int, dict[str, str]] = {}  # node index -> {parameter: its gathered copy}
    update_at: dict[str, Node] = {}
    scatter_after: dict[str, Node] = {}
    for k, (b, ups, params) in enumerate(zip(bucket_list, groups, params_of, strict=True)):
        slots = SHARDED_UPDATES[ups[0].op]
        shard = (shard_floats([tm[p].size for p in params], ranks),)
        own = Tensor(name=f"shard/{k}/param", shape=shard, role="param", init="zeros")
        grad = Tensor(name=f"shard/{k}/grad", shape=shard, role="grad")
        state = [Tensor(name=f"shard/{k}/{s}", shape=shard, role="optimizer-state",
                        init="zeros") for s in slots]
        nexts = [Tensor(name=f"{t.name}/next", shape=shard, role=t.role, updates=t.name)
                 for t in (own, *state)]
        added += [own, grad, *state, *nexts]
        gone |= set(params) | {t for u in ups for t in (*u.inputs[2:2 + len(slots)], *u.outputs)}
        gone |= {u.name for u in ups}
        fwd = sorted({i for p in params for i in readers[p] if i < bwd})
        back = sorted({i for p in params for i in readers[p] if i >= bwd})
        others = {i for p, ks in bucket_of.items() if ks != k for i in readers[p]}
        kept = _kept(fwd, back, others, keep[k] if keep else None)
        for node, copies, at, prefix in _gathers(graph, k, params, own, fwd, back, kept, attrs):
            added += copies
            before.setdefault(at[0], []).append(node)
            for i in at:
                renamed.setdefault(i, {}).update({p: f"{prefix}{p}" for p in params})
        scatter_after[b[-1]] = Node(name=f"reducescatter/{k}", op="ReduceScatter",
                                    inputs=tuple(b), outputs=(grad.name,),
                                    attrs=scatter_attrs(graph, b, attrs))
        step = ups[0].inputs[2 + len(slots):]
        update_at[max(ups, key=graph.nodes.index).name] = Node(
            name=f"shardedupdate/{k}", op=ups[0].op,
            inputs=(own.name, grad.name, *(t.name for t in state), *step),
            outputs=tuple(t.name for t in nexts), attrs=dict(ups[0].attrs))
    nodes = _rewritten(graph, before, update_at, scatter_after, renamed, gone)
    tensors = tuple(t for t in graph.tensors if t.name not in gone) + tuple(added)
    # Checked once, with its clip and loss scaling back (each puts its ops in unchecked).
    return check_graph(with_unscaled_shards(with_clipped_shards(in_dependency_order(
        graph.model_copy(update={"tensors": tensors, "nodes": tuple(nodes)})), clip, attrs),
        scaling, attrs))
