"""Data-parallel training: gradient buckets, their all-reduce, and the communication lane.

Every rank runs the same plan on its shard of the batch; after backward, each bucket of
gradients is averaged over the process group by one `AllReduce` op (planner.ops.collective)
before the optimizer updates read it. The planner decides the buckets and where the
all-reduces run, as steps of `planner.pipeline.plan` (the graph rewrites are
planner.step.collectives.data_parallel's; the bucket size, the cost model and the comm lane are
here):

    graph    = with_all_reduce(graph, buckets(graph, bucket_bytes(...)), ranks)
                 # AllReduce nodes; updates read the averaged gradients
    schedule = cpu_schedule(compute_graph(graph), ...)      # backward as without them
    schedule = comm_lane(graph, schedule, link, ranks)      # the all-reduces on lane "comm",
                 # each after its bucket's last gradient, before the updates that read it,
                 # one at a time; the rest of backward keeps running meanwhile

Averaging: a sum all-reduce, then 1/ranks applied as the executor copies the bucket out (not
folded into the loss gradient, so a one-rank run of the plan is the single-process step).
A bucket whose gradients nothing but its all-reduce reads is summed in place (`in_place`):
memory planning lays its gradients out side by side, and the all-reduce runs on that view
of the arena, copying nothing in.

With `shard_optimizer` (ZeRO-1, `with_sharded_updates`) a bucket is reduce-scattered instead:
each rank gets its shard of the averaged gradients (`ReduceScatter`), updates its shard of the
parameters with its shard of the optimizer state, which is all it holds, and all-gathers the
parameters (`ShardedUpdate`, on the comm lane too); planner.ops.collective has the layout.

The cost model is alpha-beta: a ring all-reduce of b bytes over r ranks takes
2 (r - 1) (alpha + b / (r * bandwidth)). Buckets follow the order backward writes the
gradients (the graph's node order) and close once they hold `bucket_bytes`: the size at which
the latency terms are at most a tenth of the bucket's time, b >= 9 r alpha bandwidth; smaller
buckets would pay mostly latency, larger ones start their transfer later than needed.

Example:
    >>> from planner.step.collectives.data_parallel import buckets, with_all_reduce
    >>> from planner.graph.optimizer import Optimizer
    >>> from planner.frontend.options import GraphOptions
    >>> from planner.frontend.prepare import prepare
    >>> g = prepare("zoo:mlp?batch=4&hidden=8&in_features=3&classes=2",
    ...             GraphOptions(optimizer=Optimizer(kind="sgd")))
    >>> [len(b) for b in buckets(g, 64)]           # bytes: 8 + 64 | 32 + 96 of fc2, fc1
    [2, 2]
    >>> dp = with_all_reduce(g, buckets(g, 64), ranks=2)
    >>> [n.name for n in dp.nodes if n.op == "AllReduce"]
    ['allreduce/0', 'allreduce/1']
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from typing import Literal, TypeVar

from pydantic import Field, model_validator

from planner.errors import UserError
from planner.graph.deps import predecessors
from planner.ir.graph import Graph, Node
from planner.ir.record import Record
from planner.ops import get_op
from planner.ops.collective import COLLECTIVE_OPS
from planner.schedule.record import Edge, Schedule, ScheduledOp
from planner.step.collectives import Collectives, GatherChoice, collectives
from planner.step.collectives.data_parallel import reduced_gradients
from planner.target.backends import traits
from planner.target.interconnect import Interconnect, interconnect, ring_link
from planner.target.records import Target

COMM_LANE = "comm"
# The collectives that all-reduce one float of their own (the rest is each rank's shards).
Op = TypeVar("Op", bound=ScheduledOp)


class DataParallelOptions(Record):
    """`ranks` processes each step a shard of the batch (1: no data parallelism);
    `bucket_bytes` overrides the bucket size the cost model chooses; `ranks_per_host` of
    them share one host, each on its own cores (planner.target.shares); `link` replaces the
    target's estimated interconnect (a measured one: planner.costs.link)."""

    ranks: int = Field(default=1, ge=1, le=4096)
    bucket_bytes: int | None = Field(default=None, ge=1)
    ranks_per_host: int = Field(default=1, ge=1, le=4096)
    link: Interconnect | None = None
    shard_optimizer: bool = False
    # ZeRO-3: the parameters sharded too (planner.step.collectives.sharded_parameters); implies
    # shard_optimizer's sharded optimizer state.
    shard_parameters: bool = False
    # ZeRO-3's memory decisions (keep or free each bucket's forward copy, each all-gather's
    # prefetch depth); None: planning chooses them, with the bucket size, from the costs
    # (planner.pipeline.gathers), and the plan records its choice here.
    gathers: GatherChoice | None = None

    @model_validator(mode="after")
    def _hosts(self) -> DataParallelOptions:
        if self.ranks % self.ranks_per_host:
            raise ValueError(f"--ranks-per-host {self.ranks_per_host} does not divide "
                             f"--data-parallel {self.ranks} (every host runs as many ranks)")
        if self.shard_optimizer and self.ranks == 1:
            raise ValueError("--shard-optimizer shards the optimizer state among the ranks of "
                             "--data-parallel N (N >= 2)")
        if self.shard_parameters and self.ranks == 1:
            raise ValueError("--shard-parameters shards the parameters among the ranks of "
                             "--data-parallel N (N >= 2)")
        if self.gathers is not None and not self.shard_parameters:
            raise ValueError("gathers: the all-gathers' decisions are --shard-parameters' "
                             "(ZeRO-3)")
        return self


def all_reduce_seconds(nbytes: int, ranks: int, link: Interconnect) -> float:
    """A ring all-reduce's time: 2 (r - 1) (alpha + b / (r beta)), on the ring's bottleneck
    link (planner.target.interconnect.ring_link); 0 for one rank.

    >>> round(all_reduce_seconds(10**6, 2, Interconnect(bandwidth=1e9, latency_seconds=1e-5)), 6)
    0.00102
    """
    if ranks <= 1:
        return 0.0
    link = ring_link(link, ranks)
    return 2 * (ranks - 1) * (link.latency_seconds + nbytes / (ranks * link.bandwidth))


def bucket_bytes(ranks: int, link: Interconnect) -> int:
    """The bucket size whose latency terms are a tenth of its all-reduce: 9 r alpha beta
    (at least one float)."""
    link = ring_link(link, ranks)
    return max(4, int(9 * ranks * link.latency_seconds * link.bandwidth))


def gathered_bucket_bytes(graph: Graph, ranks: int) -> int:
    """ZeRO-3's memory bound on a bucket: (r - 1) / (2 r) of the parameters' bytes (at least
    one float), so that two gathered buckets (the prefetch bound lets two wait ahead of
    compute) hold less than the shards save, (r - 1) / r of them.

    >>> from planner.graph.optimizer import Optimizer
    >>> from planner.frontend.options import GraphOptions
    >>> from planner.frontend.prepare import prepare
    >>> g = prepare("zoo:mlp?batch=4&hidden=8&in_features=3&classes=2",
    ...             GraphOptions(optimizer=Optimizer(kind="sgd")))
    >>> gathered_bucket_bytes(g, 2)     # 200 bytes of parameters
    50
    """
    total = sum(graph.tensor_map[g].nbytes for g in reduced_gradients(graph))
    return max(4, (ranks - 1) * total // (2 * ranks))


def collective_seconds(op: str, nbytes: int, ranks: int, link: Interconnect) -> float:
    """A ring collective's time on a bucket of `nbytes`: an all-reduce (of one float: the
    sharded clip's sum of squares, the sharded unscale's overflow flag), or half of one (a
    reduce-scatter, or the all-gather of a ShardedUpdate)."""
    whole = all_reduce_seconds(nbytes, ranks, link)
    return whole * get_op(op).ring_traffic[1] / 2  # OpDef.ring_traffic: its ring passes


def issue_point(seconds: float, start: float, ends: Sequence[float]) -> int:
    """Which op an all-gather of `seconds` is issued behind, of the candidates the memory
    bound allows (their predicted ends, `ends`, in schedule order; the first one the earliest
    allowed), for a first reader predicted to start at `start`: the one ending last that still
    leaves the gather's time before `start` (it hides the gather and holds the copy the
    least), else the one ending first (its reader waits the least). Times, not op counts:
    on co-running CPU lanes an op ordered just before the reader may end long after it starts.

    >>> issue_point(3.0, 10.0, [1.0, 6.0, 8.0, 9.5])     # 6 + 3 <= 10; 8 + 3 > 10
    1
    >>> issue_point(3.0, 10.0, [9.0, 30.0, 9.5])         # none hides it: the earliest end
    0
    """
    fits = [i for i, e in enumerate(ends) if e + seconds <= start]
    if fits:
        return max(fits, key=lambda i: (ends[i], i))
    return min(range(len(ends)), key=lambda i: (ends[i], i))


def comm_lane(graph: Graph, schedule: Schedule, link: Interconnect,
              prefetch: dict[str, int] | None = None) -> Schedule:
    """`schedule` (of compute_graph(graph)) with graph's collectives on lane "comm".

    Order: the compute ops keep theirs, but the updates that read averaged gradients (and,
    with loss scaling, its UnscaleGrads and the updates after it) move after the rest of
    backward (a lane never holds backward up waiting for the network); an
    all-reduce (or reduce-scatter) comes right after its bucket's last gradient's writer,
    a sharded update right after the last op it depends on. Edges: every data and
    in-place dependency of `graph`, the previous op on each of an op's CPUs, the previous
    collective on the comm lane. Times: each op starts when the last op ordered before it
    ends (the executor's rule), a collective taking collective_seconds of its bucket.
    `prefetch`: ZeRO-3's depth limits, {all-gather: the most compute ops ahead of its first
    reader it may be issued} (GatherChoice)."""
    ar = [n for n in graph.nodes if n.op in COLLECTIVE_OPS]
    if not ar:
        return schedule
    names = [n.name for n in graph.nodes]
    deps = {names[i]: tuple(names[p] for p in ps) for i, ps in enumerate(predecessors(graph))}
    seconds = {n.name: collective_seconds(n.op, _bucket_bytes(graph, n), n.attrs["ranks"],
                                          link) for n in ar}
    rank = _late_updates_rank(graph, schedule, ar)
    _rank_reductions(schedule, ar, deps, seconds, rank)
    issue_after, ahead = _gather_ranks(graph, schedule, rank, seconds, prefetch or {})
    ops, edges = _retimed(graph, schedule, rank, deps, seconds, issue_after, ahead)
    # Execution order is start order (as cpu_schedule's), so memory planning's reuse edges
    # point forward; every edge does already (a successor starts when its predecessor ends).
    ops.sort(key=lambda op: (op.start, op.end, rank[op.name]))
    step = max(op.end for op in ops)
    busy = sum(op.end - op.start for op in ops if op.cpus)
    return schedule.model_copy(update={
        "ops": tuple(ops), "edges": tuple(edges),
        "utilization": schedule.utilization * schedule.step_seconds / step if step else 0.0,
        "mean_corun": busy / step if step else 0.0})


def _late_updates_rank(graph: Graph, schedule: Schedule, ar: list[Node]) -> dict[str, float]:
    """The compute ops' ranks: their schedule order, but the readers of averaged gradients and
    what depends on them (after loss scaling's UnscaleGrads, the updates) after the rest."""
    reduced = {r for n in ar if n.op != "AllGather" for r in n.outputs}
    late: set[str] = set()
    for n in graph.nodes:  # in graph order
        if n.op not in COLLECTIVE_OPS and set(n.inputs) & reduced:
            late.add(n.name)
            reduced |= set(n.outputs)
    return {op.name: k + (len(schedule.ops) if op.name in late else 0)
            for k, op in enumerate(schedule.ops)}


def _rank_reductions(schedule: Schedule, ar: list[Node], deps: dict[str, tuple[str, ...]],
                     seconds: dict[str, float], rank: dict[str, float]) -> None:
    """Rank each all-reduce, reduce-scatter and sharded update (in `rank`) right after the
    last op it depends on.

    ZeRO-3: a lane of all-gathers that readers wait for runs its collectives in the order
    they are ready (a reduce-scatter once its bucket's last gradient is predicted written),
    not in the order their inputs' writers started: a reduce-scatter behind a long
    weight-gradient GEMM would otherwise hold up the gathers of the layers before it. And
    a reduce-scatter, which only the updates after backward wait for, yields to a gather
    ready before it would end: it goes in the order as if ready at its own end."""
    gathering = any(n.op == "AllGather" for n in ar)
    when = _ready_rank(schedule, rank) if gathering else None
    ends = {op.name: op.end for op in schedule.ops}
    for n in ar:  # in graph order: a sharded update after its reduce-scatter
        if n.op != "AllGather":
            rank[n.name] = max((rank[d] for d in deps[n.name]), default=-1.0) + 0.5
            if when is not None:
                rank[n.name] = max(rank[n.name], when(seconds[n.name] + max(
                    (ends[d] for d in deps[n.name] if d in ends), default=0.0)))


def _retimed(graph: Graph, schedule: Schedule, rank: dict[str, float],
             deps: dict[str, tuple[str, ...]], seconds: dict[str, float],
             issue_after: dict[str, tuple[str, ...]], prefetch: dict[str, int]
             ) -> tuple[list[ScheduledOp], list[Edge]]:
    """Every op in rank order, started when the last op ordered before it on its places
    (its CPUs, its stream, or the comm lane) and its dependencies end; and those edges."""
    order = sorted(rank, key=rank.__getitem__)  # topological: data edges point forward
    at = {op.name: op for op in schedule.ops}
    edges: list[Edge] = []
    last_on: dict[int | str, ScheduledOp] = {}
    # Per place, the last op before the run of one group's members that ends there: a member
    # runs beside the others of its group, but after whatever ran there before any of them.
    before_run: dict[int | str, ScheduledOp] = {}
    end: dict[str, float] = {}
    ops: list[ScheduledOp] = []
    for name in order:
        before = set(deps[name]) | set(issue_after.get(name, ()))
        places: tuple[int | str, ...] = ((at[name].cpus or (at[name].stream,)) if name in at
                                         else (COMM_LANE,))
        group = at[name].group if name in at else ""
        joins = {c: bool(group) and c in last_on and last_on[c].group == group for c in places}
        for c in places:
            if not joins[c] and c in last_on:
                before_run[c] = last_on[c]
            elif not joins[c]:
                before_run.pop(c, None)
        before.update(before_run[c].name for c in places if c in before_run)
        ready = max((end[p] for p in before), default=0.0)
        if name in seconds:
            op = ScheduledOp(name=name, op=graph.node_map[name].op, stream=COMM_LANE,
                             deps=deps[name], start=ready, end=ready + seconds[name],
                             prefetch=prefetch.get(name, 0))
        else:
            old = at[name]
            op = old.model_copy(update={"start": ready, "end": ready + old.end - old.start,
                                        "deps": deps[name]})
        edges += [Edge(before=b, after=name) for b in sorted(before, key=rank.__getitem__)]
        for c in places:
            # a run's member that a collective delayed may end after the members ordered
            # after it: what follows the run there waits for the one that ends last
            if not joins[c] or op.end >= last_on[c].end:
                last_on[c] = op
        end[name] = op.end
        ops.append(op)
    return ops, edges


def _ready_rank(schedule: Schedule, rank: dict[str, float]) -> Callable[[float], float]:
    """A function: predicted time t -> the rank just before the first compute op (in rank
    order, of those that keep their place: not the updates moved after backward) predicted to
    start at or after t, where an op ready at t goes in the order; after the last of them if
    none does (still before the updates moved after it)."""
    compute = sorted((op for op in schedule.ops if rank[op.name] < len(schedule.ops)),
                     key=lambda op: rank[op.name])
    highest, peaks = 0.0, []
    for op in compute:  # the running maximum of the starts: the first op at or after t
        highest = max(highest, op.start)
        peaks.append(highest)
    last = rank[compute[-1].name] + 0.25 if compute else -0.5

    def when(t: float) -> float:
        i = bisect.bisect_left(peaks, t)
        return rank[compute[i].name] - 0.5 if i < len(compute) else last

    return when


def _gather_ranks(graph: Graph, schedule: Schedule, rank: dict[str, float],
                  seconds: dict[str, float], limits: dict[str, int]
                  ) -> tuple[dict[str, tuple[str, ...]], dict[str, int]]:
    """Place each AllGather (ZeRO-3) in `rank`, issued behind the op issue_point chooses of
    those between its memory bound (and its prefetch depth in `limits`, if named) and its first
    reader, on the compute schedule's predicted times; ({gather: the compute op it is issued
    after}, {gather: how many compute ops ahead of its first reader that is})."""
    gathers = [n for n in graph.nodes if n.op == "AllGather"]
    if not gathers:
        return {}, {}
    compute = sorted((op for op in schedule.ops), key=lambda op: rank[op.name])
    index = {op.name: i for i, op in enumerate(compute)}
    when = _ready_rank(schedule, rank)
    step = max((op.end for op in compute), default=0.0)
    readers: dict[str, list[int]] = {}
    for n in graph.nodes:
        if n.name in index:
            for t in n.inputs:
                readers.setdefault(t, []).append(index[n.name])
    first = {g.name: min(i for t in g.outputs for i in readers.get(t, [len(compute)]))
             for g in gathers}
    issue_after: dict[str, tuple[str, ...]] = {}
    prefetch: dict[str, int] = {}
    # Memory bounds a gather's issue: not before the previous first reader (at most the
    # copies of two readers' buckets wait ahead of compute), nor before the last reader of
    # its own bucket's earlier copy (a backward gather would hold both).
    bound, previous = 0, 0
    last: dict[str, int] = {}
    for g in sorted(gathers, key=lambda g: (first[g.name], graph.nodes.index(g))):
        at = first[g.name]
        if at != previous:
            bound, previous = previous, at
        low = max(bound, last.get(g.inputs[0], -1) + 1, at - limits.get(g.name, at))
        # behind compute[low - 1] at the earliest (the step's start: -1, ending at 0); where
        # the bound falls after the reader (its bucket's earlier copy read later still: both
        # copies are held whatever the issue), right behind the op before the reader
        behind = list(range(min(low, at) - 1, at))
        i = behind[issue_point(seconds[g.name], compute[at].start if at < len(compute)
                               else step, [compute[j].end if j >= 0 else 0.0
                                           for j in behind])]
        prefetch[g.name] = at - 1 - i
        # where an op ready when its issuer ends goes, after the issuer and before the reader
        # (ties, gathers issued at one place: in the order their readers need them)
        top = rank[compute[at].name] if at < len(compute) else max(rank.values()) + 1
        low_rank = rank[compute[i].name] if i >= 0 else -1.0
        rank[g.name] = min(max(when(compute[i].end if i >= 0 else 0.0), low_rank + 0.5),
                           top - 0.5) + len(prefetch) * 1e-6
        if i >= 0:
            issue_after[g.name] = (compute[i].name,)
        last[g.inputs[0]] = max(i for t in g.outputs for i in readers.get(t, [at]))
    return issue_after, prefetch


def planned_prefetch(graph: Graph, ops: Sequence[Op], edges: Sequence[Edge]) -> list[Op]:
    """`ops` (in execution order) with each all-gather's `prefetch` as the plan runs it: the
    compute ops between the last one ordered before it (the op it is issued behind; memory
    planning's reuse edges may move that later than the schedule's choice) and its first
    reader."""
    pos = {op.name: k for k, op in enumerate(ops)}
    compute = [k for k, op in enumerate(ops) if op.cpus]
    into: dict[str, list[int]] = {}
    for e in edges:
        if e.before in pos and ops[pos[e.before]].cpus:
            into.setdefault(e.after, []).append(pos[e.before])
    read_at: dict[str, int] = {}  # tensor -> its first reader's place
    for r in graph.nodes:
        for t in r.inputs:
            if r.name in pos:
                read_at[t] = min(read_at.get(t, len(ops)), pos[r.name])
    out = list(ops)
    for n in graph.nodes:
        if n.op != "AllGather" or n.name not in pos:
            continue
        first = min((read_at.get(t, len(ops)) for t in n.outputs), default=len(ops))
        after = max(into.get(n.name, []), default=-1)
        out[pos[n.name]] = ops[pos[n.name]].model_copy(
            update={"prefetch": sum(after < k < first for k in compute)})
    return out


def _bucket_bytes(graph: Graph, n: Node) -> int:
    # The bytes a collective moves (OpDef.ring_traffic): its gradients (a sharded update: its
    # parameters; an all-gather: the gathered bucket; a flag or a sum of squares: one float).
    moves = get_op(n.op).ring_traffic[0]
    if moves == "one float":
        return 4
    tensors = [graph.tensor_map[t] for t in (n.inputs if moves == "inputs" else n.outputs)]
    return sum(t.nbytes for t in tensors if moves != "param outputs" or t.role == "param")


def data_parallel_graph(graph: Graph, target: Target, options: DataParallelOptions) -> Graph:
    """The graph every rank runs: `graph` itself for one rank, else with its gradient
    buckets' all-reduces (UserError for an inference graph)."""
    return collectives(graph, chosen_collectives(graph, target, options))


def chosen_collectives(graph: Graph, target: Target, options: DataParallelOptions,
                       link: Interconnect | None = None) -> Collectives:
    """The data-parallel rewrite of `graph` (planner.step): its buckets sized by the
    link's model (`link`, else the options', else the target's), unless the options size them.
    UserError for an inference graph, or ZeRO-3 (or a sharded clip) on a backend that does
    not run it."""
    if options.ranks == 1:
        return Collectives()
    if graph.kind != "training":
        raise UserError(f"graph {graph.name!r}: --data-parallel needs a training graph "
                        f"(--train sgd|momentum|adam)")
    limit = options.bucket_bytes or bucket_bytes(options.ranks,
                                                 link or options.link or interconnect(target))
    rewrite: Literal["all-reduce", "sharded-updates", "sharded-parameters"] = "all-reduce"
    keep: tuple[bool, ...] = ()
    if options.shard_parameters:
        keep = options.gathers.keep if options.gathers is not None else ()
        if not traits(target).shards_parameters:
            raise UserError(f"graph {graph.name!r}: --shard-parameters runs on the CPU executor "
                            f"only yet (target backend {target.backend!r})")
        if options.bucket_bytes is None:
            limit = min(limit, gathered_bucket_bytes(graph, options.ranks))
        rewrite = "sharded-parameters"
    elif options.shard_optimizer:
        if not traits(target).clips_shards and any(n.op == "ClipGradNorm"
                                                   for n in graph.nodes):
            raise UserError(f"graph {graph.name!r}: --shard-optimizer with clip_grad_norm runs "
                            f"on the CPU executor only yet (target backend "
                            f"{target.backend!r} has no ShardedClipGradNorm kernel)")
        if not traits(target).unscales_shards and any(n.op == "UnscaleGrads"
                                                      for n in graph.nodes):
            raise UserError(f"graph {graph.name!r}: --shard-optimizer with fp16-mixed's loss "
                            f"scaling runs on the CPU executor only yet (target backend "
                            f"{target.backend!r} has no ShardedUnscaleGrads kernel)")
        rewrite = "sharded-updates"
    return Collectives(ranks=options.ranks, ranks_per_host=options.ranks_per_host,
                       rewrite=rewrite, bucket_bytes=limit,
                       alignment=traits(target).bucket_alignment, keep=keep)
