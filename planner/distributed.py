"""A data-parallel executor joins its process group (torch.distributed) at load.

`join(ex, plan_json, group)` is what a generated CPU package's `Executor(process_group=...)`
calls for a plan with AllReduce ops (planner.schedule.parallel): it refuses a group of another size
than the plan's ranks, checks that every rank loaded the same plan (the sha256 of its JSON,
all-gathered; a mismatch names the ranks on every rank), and hands the executor the
all-reduce its comm lane runs: `dist.all_reduce` (a sum) on a torch view of the bucket in the
arena, no copy. A rank that dies makes the others' all-reduce fail within the group's timeout
(gloo raises), which the step raises as its error.

    import torch.distributed as dist
    dist.init_process_group("gloo")            # torchrun sets the rendezvous environment
    ex = mymodel.Executor()                    # joins the default group
    ex = mymodel.Executor(process_group=pg)    # or this one

Example (a plan without AllReduce ops joins nothing):
    >>> join(None, '{"graph": {"nodes": []}}')
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from planner.errors import UserError


def plan_ranks(plan_json: str) -> int:
    """The process count a plan's all-reduces average over (1: not data-parallel)."""
    nodes = json.loads(plan_json)["graph"]["nodes"]
    return max((int(n["attrs"]["ranks"]) for n in nodes if n["op"] == "AllReduce"), default=1)


def join(ex: Any, plan_json: str, group: Any = None) -> None:
    """Connect executor `ex` of plan `plan_json` to `group` (default: torch.distributed's
    default group); UserError for a group of the wrong size, no group, or ranks whose plans
    differ."""
    ranks = plan_ranks(plan_json)
    if ranks == 1:
        return
    try:
        import torch
        import torch.distributed as dist
    except ImportError:
        raise UserError(f"this plan averages gradients over {ranks} processes; it needs "
                        f"torch.distributed, which is not installed") from None
    if group is None:
        if not (dist.is_available() and dist.is_initialized()):
            raise UserError(f"this plan averages gradients over {ranks} processes: call "
                            f"torch.distributed.init_process_group first (torchrun sets its "
                            f"environment) or pass process_group=")
        group = dist.group.WORLD
    size, me = dist.get_world_size(group), dist.get_rank(group)
    if size != ranks:
        raise UserError(f"rank {me}: the plan was made for {ranks} processes "
                        f"(--data-parallel {ranks}) but the process group has {size}")
    mine = hashlib.sha256(plan_json.encode()).hexdigest()
    digests: list[Any] = [None] * size
    dist.all_gather_object(digests, mine, group=group)
    if len(set(digests)) > 1:
        by: dict[str, list[int]] = {}
        for rank, d in enumerate(digests):
            by.setdefault(d, []).append(rank)
        raise UserError(f"rank {me}: the ranks run different plans: " + "; ".join(
            f"ranks {r} plan {d[:12]}" for d, r in by.items()) + " (build every rank from "
            "one plan file)")

    def all_reduce(bucket: Any) -> None:
        try:
            dist.all_reduce(torch.from_numpy(bucket), group=group)
        except RuntimeError as e:  # gloo: a peer closed the connection, or the timeout passed
            lines = str(e).strip().splitlines()
            raise RuntimeError(f"rank {me}: the all-reduce on the process group failed (a "
                               f"rank died or timed out): {lines[0] if lines else e!r}"
                               ) from None

    ex.set_all_reduce(all_reduce)
