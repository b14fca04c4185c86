"""The ranks' gradient collectives, the step pass of data-parallel training: per gradient
bucket one AllReduce, or ZeRO-1's ReduceScatter and sharded update (data_parallel.py), or
ZeRO-3's parameter gathers (sharded_parameters.py), each unscaling and clipping the shards it
holds as the whole gradients would be (sharded_scaling.py). docs/data-parallel.md tells the
story; planner.schedule.parallel sizes the buckets and places the collectives."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from planner.ir.graph import Graph
from planner.ir.record import Record
from planner.ops.collective import DEFAULT_ALIGNMENT
from planner.step.collectives.data_parallel import buckets, with_all_reduce, with_sharded_updates
from planner.step.collectives.sharded_parameters import with_sharded_parameters


class Collectives(Record):
    """The data-parallel rewrite planning chose: how many ranks, which rewrite, the buckets'
    size limit (1 rank: none)."""

    ranks: int = Field(default=1, ge=1)
    ranks_per_host: int = Field(default=1, ge=1)
    rewrite: Literal["all-reduce", "sharded-updates", "sharded-parameters"] = "all-reduce"
    bucket_bytes: int = Field(default=0, ge=0)
    # The bytes ZeRO-1's buckets are aligned to: the arena's (the backend's bucket_alignment,
    # planner.target.backends; planner.step.collectives.data_parallel).
    alignment: int = Field(default=DEFAULT_ALIGNMENT, ge=4)


def collectives(graph: Graph, choice: Collectives) -> Graph:
    """`graph` with the gradient buckets' collectives `choice` names (none for one rank)."""
    if choice.ranks == 1:
        return graph
    bucket_list = buckets(graph, choice.bucket_bytes)
    if choice.rewrite == "sharded-parameters":
        return with_sharded_parameters(graph, bucket_list, choice.ranks, choice.ranks_per_host)
    if choice.rewrite == "sharded-updates":
        return with_sharded_updates(graph, bucket_list, choice.ranks, choice.ranks_per_host,
                                    choice.alignment)
    return with_all_reduce(graph, bucket_list, choice.ranks, choice.ranks_per_host)
