"""The whole state of a sharded data-parallel run (ZeRO-3 `--shard-parameters`, ZeRO-1
`--shard-optimizer`) from and into its executors, as FSDP's full state dict gives it:

    ckpt = ex.state_dict()      # on every rank (a collective): the whole state, every rank
    ex.load_state_dict(ckpt)    # on every rank: each cuts its own shards (no collective)

Each rank holds 1/N of each bucket's parameters (ZeRO-3) and optimizer state; `state_dict()`
all-gathers the shards on the executor's process group and returns on every rank what one
process training the same model would hold: `model` by parameter name (whole), `optimizer`
with `state` and each `param_groups` entry's `params` keyed by parameter name, as
`torch.distributed.checkpoint.state_dict.get_state_dict` gives an FSDP model's optimizer (a
sharded plan orders its parameters by bucket, so an index would name another parameter than
in the unsharded plan), and `planner` as planner.runtime.checkpoint's. So a checkpoint saved on
2 ranks loads on 2 or 4 ranks of either sharding, and its `model` part is the module's
state_dict. Save it from one rank (`if rank == 0: torch.save(...)`); a run resumed from it
continues bit for bit (tests/codegen/test_sharded_checkpoint.py).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from planner.graph.optimizer import parse_hyperparameter_tensor
from planner.ir.graph import Graph
from planner.ops.collective import (
    SHARDED_UPDATES,
    flat_bucket,
    gathered_shapes,
    shard_floats,
    sharded_parts,
)

_COPIES = ("regathered/", "gathered/")


class Bucket(NamedTuple):
    """One sharded bucket: its parameters (names, shapes) as laid out side by side, the
    rank's parameter shard (ZeRO-3; None where the parameters are held whole: ZeRO-1), its
    state shards by torch's slot name, and its parameter group."""

    params: tuple[str, ...]
    shapes: tuple[tuple[int, ...], ...]
    ranks: int
    alignment: int
    shard: str | None
    slots: dict[str, str]
    group: int


class Layout(NamedTuple):
    buckets: tuple[Bucket, ...]
    step: str | None  # the held step count (Adam), None without one


def sharded_layout(graph: Graph, torch_slots: dict[str, str]) -> Layout | None:
    """The buckets of a sharded plan's graph, in the plan's order; None for a plan that
    shards nothing. torch_slots: the update ops' slot names in PyTorch's words."""
    gathers = {n.inputs[0]: n for n in graph.nodes if n.op == "AllGather"}
    buckets: list[Bucket] = []
    step = None
    for n in graph.nodes:
        if n.op == "ShardedUpdate":
            k, slots, has_step = sharded_parts(len(n.inputs), n.attrs)
            params = tuple(n.inputs[:k])
            shapes = tuple(graph.tensor(p).shape for p in params)
            states, count = n.inputs[k + 1:k + 1 + slots], n.inputs[k + 1 + slots]
            shard, attrs = None, n.attrs
        elif n.op in SHARDED_UPDATES and n.inputs[0] in gathers:
            g = gathers[n.inputs[0]]
            params = tuple(o.removeprefix(_COPIES[0]).removeprefix(_COPIES[1])
                           for o in g.outputs)
            shapes = tuple(gathered_shapes(g.attrs))
            slots, has_step = len(SHARDED_UPDATES[n.op]), n.op == "ApplyAdam"
            states, count = n.inputs[2:2 + slots], n.inputs[4] if has_step else ""
            shard, attrs = n.inputs[0], g.attrs
        else:
            continue
        if has_step:  # the update reads this step's count: the held one, incremented
            producer = graph.producer.get(count)
            step = producer.inputs[0] if producer is not None else count
        # the learning rate's tensor names the group (a skipping update reads the flag last)
        parsed = parse_hyperparameter_tensor(n.inputs[-3 if n.attrs.get("skip_on_overflow")
                                                      else -2])
        buckets.append(Bucket(params, shapes, int(attrs["ranks"]),
                              int(attrs.get("alignment", 64)), shard,
                              {torch_slots[s.rsplit("/", 1)[-1]]: s for s in states},
                              parsed[0] if parsed else 0))
    return Layout(tuple(buckets), step) if buckets else None


def held_shards(layout: Layout) -> set[str]:
    """The tensors a rank holds 1/N of (state_dict writes them whole, by parameter)."""
    return {t for b in layout.buckets for t in ([b.shard] if b.shard else [])
            + list(b.slots.values())}


def _group(ex: Any) -> tuple[Any, int]:
    from planner.runtime.distributed import group_of

    joined = group_of(ex)
    if joined is None:
        raise ValueError("state_dict: a sharded plan's state lies on every rank; this "
                         "executor has joined no process group")
    return joined


def _all_gather(x: np.ndarray, group: Any) -> np.ndarray:
    import torch
    import torch.distributed as dist

    mine = torch.from_numpy(np.asarray(x, dtype=np.float32, order="C"))
    parts = [torch.empty_like(mine) for _ in range(dist.get_world_size(group))]
    dist.all_gather(parts, mine, group=group)
    return torch.cat(parts).numpy()


def _cut(flat: np.ndarray, b: Bucket) -> list[np.ndarray]:
    """The bucket's members from its whole flat layout."""
    from planner.ops.collective import bucket_places

    sizes = [int(np.prod(s, dtype=np.int64)) for s in b.shapes]
    places, _ = bucket_places(sizes, b.alignment)
    return [flat[at:at + n].reshape(s).copy()
            for at, n, s in zip(places, sizes, b.shapes, strict=True)]


def whole_state(ex: Any, layout: Layout, held: dict[str, np.ndarray]
                ) -> tuple[dict[str, np.ndarray], dict[str, dict[str, np.ndarray]]]:
    """(every sharded bucket's parameters whole, their optimizer state whole by torch's slot
    name), all-gathered from every rank's shards (every rank calls it, in one order)."""
    group, _ = _group(ex)
    params: dict[str, np.ndarray] = {}
    state: dict[str, dict[str, np.ndarray]] = {}
    for b in layout.buckets:
        whole = (_cut(_all_gather(held[b.shard], group), b) if b.shard
                 else [held[p] for p in b.params])
        params.update(zip(b.params, whole, strict=True))
        for slot in sorted(b.slots):
            for p, x in zip(b.params, _cut(_all_gather(held[b.slots[slot]], group), b),
                            strict=True):
                state.setdefault(p, {})[slot] = x
    return params, state


def _checked(value: Any, shape: tuple[int, ...], what: str) -> np.ndarray:
    try:
        x = np.asarray(value, dtype=np.float32)
    except (TypeError, ValueError):
        raise ValueError(f"load_state_dict: {what} is not an array of numbers") from None
    if x.shape != tuple(shape):
        raise ValueError(f"load_state_dict: {what} has shape {list(x.shape)}, the plan's is "
                         f"{list(shape)}")
    return x


def own_shards(ex: Any, layout: Layout, model: dict[str, Any],
               state: dict[str, Any]) -> dict[str, np.ndarray]:
    """This rank's shards (and ZeRO-1's whole parameters) from a whole state: ValueError
    naming the first parameter or state entry missing or misshapen."""
    _, rank = _group(ex)
    out: dict[str, np.ndarray] = {}
    for b in layout.buckets:
        size = shard_floats([int(np.prod(s, dtype=np.int64)) for s in b.shapes], b.ranks,
                            b.alignment)
        mine = slice(rank * size, (rank + 1) * size)
        for p in b.params:
            if p not in model:
                raise ValueError(f"load_state_dict: the checkpoint's model part lacks {p!r}")
        xs = [_checked(model[p], s, f"parameter {p!r}") for p, s in zip(b.params, b.shapes,
                                                                          strict=True)]
        if b.shard:
            out[b.shard] = flat_bucket(xs, b.ranks, b.alignment)[mine].copy()
        else:
            out.update(zip(b.params, xs, strict=True))
        for slot, tensor in b.slots.items():
            ys = []
            for p, s in zip(b.params, b.shapes, strict=True):
                try:
                    ys.append(_checked(state[p][slot], s, f"optimizer state {slot!r} of {p!r}"))
                except (KeyError, TypeError):
                    raise ValueError(f"load_state_dict: optimizer state of parameter {p!r} "
                                     f"lacks {slot!r}") from None
            out[tensor] = flat_bucket(ys, b.ranks, b.alignment)[mine].copy()
    return out
