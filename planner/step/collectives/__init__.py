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
    # ZeRO-3: per bucket, whether its forward copy is kept for backward (() : the graph's
    # rule, sharded_parameters.py; planning chooses them from the costs, GatherChoice).
    keep: tuple[bool, ...] = ()


class GatherChoice(Record):
    """ZeRO-3's memory decisions, as planning chose them (planner.pipeline.gathers) or as given:
    per bucket, whether its gathered forward copy is kept for backward or freed after its last
    forward reader and gathered again (FSDP2's reshard_after_forward, per bucket); per
    all-gather, the most compute ops ahead of its first reader it may be issued (its prefetch
    depth; a gather not named: the schedule's choice within its memory bound,
    planner.schedule.parallel). GatherChoice() is the default decisions themselves.
    `default_*`: what the default decisions were and gave where planning searched (for
    `planner show`; 0: not searched).

        {"keep": [false, true, false], "prefetch": [["allgather/0/backward", 0]],
         "default_bucket_bytes": 470528, "default_keep": [false, false, true],
         "default_arena_bytes": 12184832, "default_step_seconds": 0.0123}
    """

    keep: tuple[bool, ...] = ()
    prefetch: tuple[tuple[str, int], ...] = ()
    default_bucket_bytes: int = Field(default=0, ge=0)
    default_keep: tuple[bool, ...] = ()
    default_arena_bytes: int = Field(default=0, ge=0)
    default_step_seconds: float = Field(default=0.0, ge=0)

    def prefetch_limits(self) -> dict[str, int]:
        """{all-gather: the most compute ops ahead of its first reader it may be issued}."""
        return dict(self.prefetch)


def collectives(graph: Graph, choice: Collectives) -> Graph:
    """`graph` with the gradient buckets' collectives `choice` names (none for one rank)."""
    if choice.ranks == 1:
        return graph
    bucket_list = buckets(graph, choice.bucket_bytes)
    if choice.rewrite == "sharded-parameters":
        return with_sharded_parameters(graph, bucket_list, choice.ranks, choice.ranks_per_host,
                                       choice.keep)
    if choice.rewrite == "sharded-updates":
        return with_sharded_updates(graph, bucket_list, choice.ranks, choice.ranks_per_host,
                                    choice.alignment)
    return with_all_reduce(graph, bucket_list, choice.ranks, choice.ranks_per_host)
