"""Parameters of a ZeRO-3 plan (planner plan --shard-parameters) in and out of rank shards.

Such a plan holds no parameter by its name: rank r holds `shard/<k>/param`, floats
[r s, (r + 1) s) of bucket k's parameters laid side by side (planner.ops.collective's layout,
padded with zeros). `shard_params` cuts whole parameters into one rank's shards, for
`ex.load_params`; `gather_params` puts every rank's `ex.params()` back together.

Example:
    >>> import numpy as np
    >>> plan = {"graph": {"nodes": [{"op": "AllGather", "inputs": ["shard/0/param"],
    ...     "outputs": ["gathered/b", "gathered/w"], "attrs": {"ranks": 2, "ndims": [1, 2],
    ...     "dims": [3, 2, 5]}}]}}
    >>> full = {"b": np.arange(3, dtype=np.float32), "w": np.ones((2, 5), np.float32)}
    >>> shards = [shard_params(plan, full, r) for r in range(2)]
    >>> shards[0]["shard/0/param"].shape
    (16,)
    >>> back = gather_params(plan, shards)
    >>> bool(np.array_equal(back["b"], full["b"]) and np.array_equal(back["w"], full["w"]))
    True
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from planner.errors import UserError
from planner.ops.collective import bucket_places, flat_bucket, gathered_shapes, shard_floats

_COPIES = ("gathered/", "regathered/")


def sharded_buckets(plan: Mapping[str, Any] | str) -> dict[str, tuple[list[str], list[tuple[
        int, ...]], int]]:
    """Shard tensor -> (its parameters' names in bucket order, their shapes, ranks) of a plan
    (its JSON or that parsed); {} for a plan that shards no parameters."""
    data = json.loads(plan) if isinstance(plan, str) else plan
    out: dict[str, tuple[list[str], list[tuple[int, ...]], int]] = {}
    for n in data["graph"]["nodes"]:
        if n["op"] == "AllGather":
            names = [o.removeprefix(_COPIES[1]).removeprefix(_COPIES[0]) for o in n["outputs"]]
            out[n["inputs"][0]] = (names, gathered_shapes(n["attrs"]), int(n["attrs"]["ranks"]))
    return out


def shard_params(plan: Mapping[str, Any] | str, params: Mapping[str, np.ndarray],
                 rank: int) -> dict[str, np.ndarray]:
    """Rank `rank`'s shards of `params` (every parameter the plan shards, by name) for
    `ex.load_params`; other entries of params pass through. UserError naming a missing or
    misshapen parameter."""
    out = {k: v for k, v in params.items()}
    for shard, (names, shapes, ranks) in sharded_buckets(plan).items():
        xs = []
        for name, shape in zip(names, shapes, strict=True):
            if name not in params:
                raise UserError(f"shard_params: parameter {name!r} is missing")
            try:
                x = np.asarray(params[name], dtype=np.float32)
            except (TypeError, ValueError):
                raise UserError(f"shard_params: parameter {name!r} is not an array of "
                                f"numbers") from None
            if x.shape != shape:
                raise UserError(f"shard_params: parameter {name!r} has shape {list(x.shape)}, "
                                f"the plan's is {list(shape)}")
            xs.append(x)
            out.pop(name)
        size = shard_floats([x.size for x in xs], ranks)
        out[shard] = flat_bucket(xs, ranks)[rank * size:(rank + 1) * size].copy()
    return out


def gather_params(plan: Mapping[str, Any] | str,
                  shards: Sequence[Mapping[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """The whole parameters from every rank's shards (`ex.params()` of ranks 0..N-1)."""
    out: dict[str, np.ndarray] = {}
    for shard, (names, shapes, ranks) in sharded_buckets(plan).items():
        if len(shards) != ranks:
            raise UserError(f"gather_params: the plan shards over {ranks} ranks, got "
                            f"{len(shards)} ranks' shards")
        flat = np.concatenate([np.asarray(s[shard], dtype=np.float32) for s in shards])
        places, _ = bucket_places([int(np.prod(s, dtype=np.int64)) for s in shapes])
        for name, shape, at in zip(names, shapes, places, strict=True):
            out[name] = flat[at:at + int(np.prod(shape, dtype=np.int64))].reshape(shape).copy()
    return out
