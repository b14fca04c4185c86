"""A data-parallel executor joins its process group (torch.distributed) at load.

`join(ex, plan_json, group)` is what a generated package's `Executor(process_group=...)`
calls for a plan with collectives (planner.schedule.parallel), on either backend: it refuses
a group of another size than the plan's ranks, checks that every rank loaded the same plan
(the sha256 of its JSON, all-gathered; a mismatch names the ranks on every rank), and hands
the executor its collectives through the one binding both runtimes have,
`ex.set_collective(fn, rank)` (templates/common/bindings.h): fn(what, bucket, stream) gets a
torch view of the bucket in the arena, no copy (a CPU tensor, or a CUDA tensor over the
device arena, by DLPack), and runs `dist.all_reduce` (a sum), or for --shard-optimizer plans
`dist.reduce_scatter_single` (a sum into this rank's shard of the bucket;
`reduce_scatter_tensor` before torch 2.13) and `dist.all_gather_single` (the shards into the
bucket; `all_gather_into_tensor`), both in place on views of the one bucket, with this
process's rank, which picks its shard. On CUDA (NCCL) the collective is issued under
`torch.cuda.ExternalStream` of the op's stream (the plan's comm stream), so the work is
ordered after the bucket's gradients and before the ops that wait on the comm stream's
events, and nothing waits for the GPU in the middle of the step. A rank that dies makes the
others' collective fail within the group's timeout (gloo raises; NCCL's watchdog aborts the
communicator), which the step raises as its error.

Ranks that share a host (a plan with --ranks-per-host L) each take their own cores
(planner.target.shares): the rank's place among its host's is torchrun's LOCAL_RANK (its
LOCAL_WORLD_SIZE must be L), else its rank modulo L (launchers number a host's ranks
consecutively). Every thread of the process, the process group's included, is confined to
the rank's share; the executor maps the plan's CPUs onto it and keeps its comm lane on the
comm engine's CPUs. A rank without a place of its own (two ranks of a host with one
LOCAL_RANK, or one out of range) is refused on every rank, not only its own.

A script may end without `dist.destroy_process_group()` and with a step in flight
(`step_async` not waited for): the step is finished before the interpreter shuts down (its
collectives need Python and the group), so the process exits cleanly.

    import torch.distributed as dist
    dist.init_process_group("gloo")            # torchrun sets the rendezvous environment
    ex = mymodel.Executor()                    # joins the default group
    ex = mymodel.Executor(process_group=pg)    # or this one

Example (a plan without collectives joins nothing):
    >>> join(None, '{"graph": {"nodes": []}}')
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import json
import os
import socket
import time
import weakref
from collections.abc import Mapping
from typing import Any

from planner.errors import UserError
from planner.ops.collective import COLLECTIVE_OPS
from planner.target.granted import narrowing
from planner.target.shares import RankCpus, placement, rank_cpus


def plan_ranks(plan_json: str) -> int:
    """The process count a plan's collectives average over (1: not data-parallel)."""
    return _ranks(json.loads(plan_json))[0]


def _ranks(plan: dict[str, Any]) -> tuple[int, int]:
    # (ranks, ranks per host) of a plan's collectives; (1, 1) when it has none.
    attrs = [n["attrs"] for n in plan["graph"]["nodes"] if n["op"] in COLLECTIVE_OPS]
    return (max((int(a["ranks"]) for a in attrs), default=1),
            max((int(a.get("ranks_per_host", 1)) for a in attrs), default=1))


def local_rank(rank: int, per_host: int, environ: Mapping[str, str] = os.environ) -> int:
    """This process's place among the `per_host` ranks of its host: torchrun's LOCAL_RANK,
    else `rank` modulo per_host. UserError when torchrun started another number of ranks on
    this host than the plan shares it among.

    >>> local_rank(3, 2, {}), local_rank(3, 2, {"LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2"})
    (1, 0)
    """
    size = environ.get("LOCAL_WORLD_SIZE")
    if size is not None and size.strip() != str(per_host):
        raise UserError(f"rank {rank}: the plan shares a host among {per_host} ranks "
                        f"(--ranks-per-host {per_host}) but {size.strip()[:20]} run on this "
                        f"one (LOCAL_WORLD_SIZE): plan with --ranks-per-host "
                        f"{size.strip()[:20]}, else ranks pin the same CPUs")
    here = environ.get("LOCAL_RANK")
    if here is None:
        return rank % per_host
    if not here.strip().isdigit() or int(here) >= per_host:
        raise UserError(f"rank {rank}: LOCAL_RANK={here.strip()[:20]!r} is not one of "
                        f"0..{per_host - 1}")
    return int(here)


def settle(ex: Any, plan: dict[str, Any], rank: int) -> RankCpus | None:
    """Put executor `ex` of data-parallel `plan` on this rank's CPUs (module docstring); the
    CPUs, or None where the plan names CPUs this host lacks (the OS places the threads) or
    none at all (a GPU plan)."""
    ranks, per_host = _ranks(plan)
    core_of = plan["target"]["core_of"]
    if ranks == 1 or not core_of:
        return None
    here = local_rank(rank, per_host)
    cpus = rank_cpus(core_of, per_host, here)
    if per_host == 1 and cpus.comm == cpus.compute:
        return None  # the whole host, every thread anywhere on it: as without placement
    mine = set(cpus.compute) | set(cpus.comm)
    if not hasattr(os, "sched_setaffinity") or not mine <= os.sched_getaffinity(0):
        return None
    # Every thread there is now (the process group's among them; threads made later inherit
    # their maker's), then the executor's teams and comm lane within it. The mask granted
    # before is remembered: this host, detected later in this process, is the whole host.
    narrowing()
    for tid in os.listdir("/proc/self/task"):
        with contextlib.suppress(OSError):  # a thread that ended meanwhile
            os.sched_setaffinity(int(tid), mine)
    ex.place(placement(core_of, per_host, here), list(cpus.comm))
    return cpus


def join(ex: Any, plan_json: str, group: Any = None) -> None:
    """Connect executor `ex` of plan `plan_json` to `group` (default: torch.distributed's
    default group); UserError for a group of the wrong size, no group, or ranks whose plans
    differ."""
    plan = json.loads(plan_json)
    ranks = _ranks(plan)[0]
    if ranks == 1:
        return
    try:
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
    # One exchange: every rank's plan and place on its host, so that every rank refuses
    # what any rank got wrong (a rank refusing alone leaves the others waiting in a step).
    facts: list[Any] = [None] * size
    dist.all_gather_object(facts, (mine, *_host_place(me, _ranks(plan)[1])), group=group)
    digests = [f[0] for f in facts]
    if len(set(digests)) > 1:
        by: dict[str, list[int]] = {}
        for rank, d in enumerate(digests):
            by.setdefault(d, []).append(rank)
        raise UserError(f"rank {me}: the ranks run different plans: " + "; ".join(
            f"ranks {r} plan {d[:12]}" for d, r in by.items()) + " (build every rank from "
            "one plan file)")

    _check_places(me, [(f[1], f[2]) for f in facts], _ranks(plan)[1])
    ex.set_collective(collective_callback(group, size, me), me)
    settle(ex, plan, me)
    _JOINED.add(ex)
    _GROUPS[ex] = (group, me)


def _host_place(rank: int, per_host: int) -> tuple[str, int | str]:
    """(this host's name, this rank's place on it), or the reason it has none."""
    try:
        return socket.gethostname(), local_rank(rank, per_host)
    except UserError as e:
        return socket.gethostname(), str(e)


def _check_places(me: int, places: list[tuple[str, int | str]], per_host: int) -> None:
    """UserError (on every rank) when a rank has no place on its host or, where a plan
    shares a host among `per_host` > 1 ranks, two ranks of one host have the same one (they
    would pin the same CPUs; with one rank per host, each rank takes its whole host).

    >>> _check_places(0, [("a", 0), ("a", 1), ("b", 0)], 2)
    >>> _check_places(0, [("a", 0), ("a", 0)], 1)
    >>> _check_places(1, [("a", 0), ("a", 0)], 2)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    planner.errors.UserError: rank 1: ranks 0 and 1 both have LOCAL_RANK 0 on host 'a' ...
    """
    bad = next((why for _, why in places if isinstance(why, str)), None)
    if bad is not None:
        raise UserError(bad if bad.startswith(f"rank {me}:") else f"rank {me}: {bad}")
    if per_host == 1:
        return
    seen: dict[tuple[str, int | str], int] = {}
    for rank, place in enumerate(places):
        if place in seen:
            raise UserError(f"rank {me}: ranks {seen[place]} and {rank} both have LOCAL_RANK "
                            f"{place[1]} on host {place[0]!r} (they would pin the same CPUs): "
                            f"give each rank of a host its own LOCAL_RANK")
        seen[place] = rank


# Executors joined to a process group: a step still in flight when the script ends is waited
# for before the interpreter finalizes (its collective needs Python and the group), not cut.
_JOINED: weakref.WeakSet[Any] = weakref.WeakSet()
# Each joined executor's process group and its rank there (a sharded plan's state_dict
# gathers its shards on it).
_GROUPS: weakref.WeakKeyDictionary[Any, tuple[Any, int]] = weakref.WeakKeyDictionary()


def group_of(ex: Any) -> tuple[Any, int] | None:
    """(the process group executor `ex` joined, its rank there), None if it joined none."""
    return _GROUPS.get(ex)


@atexit.register
def _finish_steps() -> None:
    for ex in list(_JOINED):
        with contextlib.suppress(Exception):  # its error was the step's: nobody waits for it
            ex.wait_for_all()


_NAMES = ("all-reduce", "reduce-scatter", "all-gather")


def collective_callback(group: Any, size: int, me: int) -> Any:
    """fn(what, bucket, stream) of `ex.set_collective` for rank `me` of `group` (`size`
    ranks); what: 0 all-reduce, 1 reduce-scatter, 2 all-gather (the runtime's
    CollectiveKind)."""
    import torch
    import torch.distributed as dist

    def collective(what: int, whole: Any, stream: int) -> None:
        shard = whole.numel() // size
        mine = whole[me * shard:(me + 1) * shard]
        # On CUDA, ProcessGroupNCCL orders its own stream after the current one and the
        # current one after the collective (a stream wait, not a host one): the current one
        # is the op's stream here.
        on = (torch.cuda.stream(torch.cuda.ExternalStream(stream, device=whole.device))
              if whole.is_cuda else contextlib.nullcontext())
        held = (whole._use_count(), mine._use_count())
        try:
            with on:
                if what == 0:
                    dist.all_reduce(whole, group=group)
                elif what == 1:  # (torch 2.13 renamed reduce_scatter_tensor)
                    (getattr(dist, "reduce_scatter_single", None)
                     or dist.reduce_scatter_tensor)(mine, whole, group=group)
                else:
                    (getattr(dist, "all_gather_single", None)
                     or dist.all_gather_into_tensor)(whole, mine, group=group)
        except RuntimeError as e:  # a peer closed the connection, or the timeout passed
            lines = str(e).strip().splitlines()
            raise RuntimeError(f"rank {me}: the {_NAMES[what]} on the process group failed (a "
                               f"rank died or timed out): {lines[0] if lines else e!r}"
                               ) from None
        if not whole.is_cuda:
            _released(whole, mine, held)

    return collective


def _released(whole: Any, mine: Any, held: tuple[int, int], seconds: float = 10.0) -> None:
    """Wait (bounded) until the process group holds no reference to the bucket's tensors.

    A gloo worker thread drops its work (and the tensors in it) a moment after the
    collective's caller is woken. Were the Python tensors freed first, torch would hand them
    to that thread, which would free them later taking the GIL: during the interpreter's
    finalization (a script ending right after its last step) that thread is ended by
    pthread_exit, and the process aborts ("terminate called without an active exception").
    Waiting here keeps every release of them on this thread, with the GIL."""
    deadline = time.monotonic() + seconds
    while ((whole._use_count() > held[0] or mine._use_count() > held[1])
           and time.monotonic() < deadline):
        time.sleep(0)  # lets the worker run (the GIL released)
