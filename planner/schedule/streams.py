"""`stream_schedule`: the GPU scheduler. Graph nodes in one order, each with its predicted
time, on the compute stream or, when independent kernels that do not fill the GPU gain enough
from running side by side, on several compute streams (planner.schedule.gpu_streams); memory
planning (planner.memory.gpu) then adds the copy streams' offloads and prefetches, recomputes,
and each convolution's algorithm, and re-times the step.

Order: the graph's order (forward, backward), except that each update runs as soon as it may,
right after the last op it must follow (its gradient's producer and every other reader of the
value it overwrites, planner.graph.deps). A gradient then lives from its producer to the
update instead of to the end of the step, so the gradients are never all resident at once.

    graph order   fwd ... bwd(fc8) bwd(fc7) ... bwd(conv1) | upd(fc8) upd(fc7) ... upd(conv1)
    stream order  fwd ... bwd(fc8) upd(fc8) bwd(fc7) upd(fc7) ... bwd(conv1) upd(conv1)

Times: convolutions by algorithm (planner.costs.convalgo; the least-workspace candidate is the
planning baseline, the chosen one comes later), every other op from the cost model's GPU time
(measured launch configuration, whose threads per block the op then carries as its `block`;
else its measured time alone; else the analytical roofline).

Example:
    >>> from planner.costs import CostModel
    >>> from planner.frontend.autodiff import Optimizer, make_training_graph
    >>> from planner.target import preset
    >>> from planner.zoo import build
    >>> g = make_training_graph(build("mlp", batch=2, hidden=[4], in_features=3, classes=2),
    ...                         Optimizer(kind="sgd"))
    >>> s = compute_steps(g, CostModel(preset("k40c-12gb")))
    >>> [n.op for n in s.nodes][-4:]
    ['BiasAddGrad', 'SGD', 'MatMul', 'SGD']
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from planner.costs import CostModel, MissingCostWarning, graph_signatures
from planner.costs.analytical import op_work
from planner.costs.convalgo import ConvAlgo, conv_algorithms, kernel_scratch
from planner.costs.signature import OpSignature
from planner.graph.deps import predecessors
from planner.ir.graph import Graph, Node
from planner.ir.phases import node_phase
from planner.ops import get_op
from planner.schedule.gpu_share import (
    busy_seconds,
    issue_times,
    occupancy,
    simulate_streams,
)
from planner.schedule.gpu_streams import assign_streams
from planner.schedule.options import ScheduleOptions
from planner.schedule.reach import transitive_reduction
from planner.schedule.record import Bound, Edge, Schedule, ScheduledOp

# The streams of a GPU plan: graph nodes and recomputes run on `compute`; offloads copy device
# to host on `d2h`, prefetches host to device on `h2d` (planner.memory.budget.materialize).
STREAMS = ("compute", "d2h", "h2d")
# Compute streams of a co-running plan (planner.schedule.gpu_streams): `compute` and these.
COMPUTE_STREAMS = ("compute", "compute1", "compute2", "compute3")
# A data-parallel plan's gradient all-reduces run on `comm` (planner.schedule.parallel), NCCL
# on its own CUDA stream, events where a dependency crosses to or from it.
COMM_STREAM = "comm"
# Every stream by its index in a plan's ops (planner.memory.budget.materialize's OpSpec.stream).
ALL_STREAMS = STREAMS + COMPUTE_STREAMS[1:] + (COMM_STREAM,)


def is_compute(stream: str) -> bool:
    """Whether ops on `stream` use the SMs (a compute stream, not a copy or comm stream).

    >>> [is_compute(s) for s in ALL_STREAMS]
    [True, False, False, True, True, True, False]
    """
    return stream in COMPUTE_STREAMS

Seconds = float


@dataclass(frozen=True)
class ComputeSteps:
    """Graph nodes in stream order. Per step: its phase, the candidate conv algorithms (empty
    for other ops) and its time with the least-workspace candidate."""

    graph: Graph
    nodes: tuple[Node, ...]
    phase: tuple[str, ...]
    algos: tuple[tuple[ConvAlgo, ...], ...]
    seconds: np.ndarray
    # Signatures the cost table lacked (priced by the analytical model or family defaults).
    analytical: int
    # Per step, the device scratch its CUDA kernel needs (OpDef.gpu_scratch; a convolution's
    # is in each of its algorithms' workspace instead, so 0 there).
    scratch: tuple[int, ...] = ()
    # Per step, the threads per block of its generated kernel: the measured launch
    # configuration its time is (0: none measured, the kernel's default).
    blocks: tuple[int, ...] = ()
    # Per step: the share of the SMs its kernel fills alone and the bytes it moves
    # (planner.schedule.gpu_share).
    occupancy: tuple[float, ...] = ()
    moved: tuple[float, ...] = ()
    # Per step, its stream's index in ALL_STREAMS (empty: every step on `compute`), and the
    # ordering edges (step, step) a co-running schedule adds besides data and stream order.
    stream: tuple[int, ...] = ()
    joins: tuple[tuple[int, int], ...] = ()
    # The GPU's memory bandwidth (bytes/s), which co-running kernels share.
    bandwidth: float = 0.0

    @cached_property
    def index(self) -> dict[str, int]:
        return {n.name: i for i, n in enumerate(self.nodes)}

    @property
    def fastest(self) -> np.ndarray:
        """Per step, its time with the fastest algorithm whatever its workspace."""
        return np.array([min(a.seconds for a in al) if al else t
                         for al, t in zip(self.algos, self.seconds, strict=True)])


def stream_order(graph: Graph, order: list[str] | None = None) -> list[int]:
    """Node indices in stream order: `order` (node names; default the graph's) with every
    update node moved to right after its last predecessor: its last non-update one, or later
    where it reads what another update writes (gradient accumulation's sums, which the
    optimizer step reads; the micro-batch count their sums read before it is incremented)."""
    names = [n.name for n in graph.nodes]
    where = {name: i for i, name in enumerate(names)}
    base = [where[n] for n in order] if order is not None else list(range(len(names)))
    preds = predecessors(graph)
    updates = {i for i in base if node_phase(graph, graph.nodes[i]) == "update"}
    after: dict[int, list[int]] = {}
    head: list[int] = []
    rest = [i for i in base if i not in updates]
    position = {i: k for k, i in enumerate(rest)}
    at = {i: k for k, i in enumerate(base)}
    anchor: dict[int, int] = {}  # an update -> the position it follows (-1: the head)
    for u in sorted(updates, key=at.__getitem__):  # (base is in dependency order)
        anchor[u] = max([position[p] for p in preds[u] if p in position]
                        + [anchor[p] for p in preds[u] if p in anchor], default=-1)
        if anchor[u] >= 0:
            after.setdefault(rest[anchor[u]], []).append(u)
        else:
            head.append(u)
    out = _settle(head, preds, updates)
    for i in rest:
        out.append(i)
        out.extend(_settle(after.get(i, []), preds, updates))
    return out


def _settle(us: list[int], preds, updates: set[int]) -> list[int]:
    # Updates that follow other updates (Adam's shared step count) come after them: by the
    # count of update predecessors, then index, each only once those of its group it reads
    # after are out (a topological order, the same as the sort wherever that one is).
    key = {u: (sum(1 for p in preds[u] if p in updates), u) for u in us}
    waiting = {u: {p for p in preds[u] if p in key} for u in us}
    out: list[int] = []
    while waiting:
        u = min((u for u, ps in waiting.items() if not ps), key=key.__getitem__)
        out.append(u)
        del waiting[u]
        for ps in waiting.values():
            ps.discard(u)
    return out


def compute_steps(graph: Graph, model: CostModel, order: list[str] | None = None,
                  gpu: int = 0, streams: dict[str, str] | None = None,
                  joins: tuple[tuple[str, str], ...] = (),
                  comm: dict[str, float] | None = None) -> ComputeSteps:
    """The stream of `graph` on the model's GPU (module docstring). With `streams` (node name
    -> compute or comm stream, a co-running or data-parallel schedule's) `order` is kept as
    it is, updates included, and `joins` are its edges besides data and stream order. `comm`:
    the seconds of each all-reduce on the comm stream (the interconnect's, priced by
    planner.schedule.parallel; it uses no SMs)."""
    if not model.target.gpus:
        raise ValueError(f"target {model.target.name!r} has no GPU")
    device = model.target.gpus[gpu]
    sigs = graph_signatures(graph, device)
    if streams is not None and order is not None:
        where = {n.name: i for i, n in enumerate(graph.nodes)}
        nodes = [graph.nodes[where[name]] for name in order]
    else:
        nodes = [graph.nodes[i] for i in stream_order(graph, order)]
    algos, seconds = [], []
    analytical = 0
    scratch: list[int] = []
    blocks: list[int] = []
    occ: list[float] = []
    moved: list[float] = []
    cache: dict[str, tuple[tuple[ConvAlgo, ...], float, bool, int, int, float, float]] = {}
    for node in nodes:
        if comm is not None and node.name in comm:
            algos.append(())
            seconds.append(comm[node.name])
            scratch.append(kernel_scratch(sigs[node.name]))  # a bucket not summed in place
            blocks.append(0)
            occ.append(0.0)
            moved.append(0.0)
            continue
        sig = sigs[node.name]
        if sig.key not in cache:
            cache[sig.key] = _kernel(graph, node, sig, model, gpu)
        al, t, missing, extra, block, share, nbytes = cache[sig.key]
        algos.append(al)
        seconds.append(t)
        scratch.append(extra)
        blocks.append(block)
        occ.append(share)
        moved.append(nbytes)
    analytical = sum(1 for entry in cache.values() if entry[2])
    index = {n.name: i for i, n in enumerate(nodes)}
    lane = {s: ALL_STREAMS.index(s) for s in (*COMPUTE_STREAMS, COMM_STREAM)}
    return ComputeSteps(graph=graph, nodes=tuple(nodes),
                        phase=tuple(node_phase(graph, n) for n in nodes), algos=tuple(algos),
                        seconds=np.array(seconds, dtype=float), analytical=analytical,
                        scratch=tuple(scratch), blocks=tuple(blocks), occupancy=tuple(occ),
                        moved=tuple(moved),
                        stream=tuple(lane[streams[n.name]] for n in nodes) if streams else (),
                        joins=tuple((index[a], index[b]) for a, b in joins),
                        bandwidth=device.memory_bandwidth)


def _kernel(graph: Graph, node: Node, sig: OpSignature, model: CostModel, gpu: int
            ) -> tuple[tuple[ConvAlgo, ...], float, bool, int, int, float, float]:
    """One signature's kernel on the GPU: (its convolution algorithms, seconds, whether
    priced analytically, scratch bytes, threads per block, SM share, bytes moved)."""
    device = model.target.gpus[gpu]
    work = op_work(sig)
    launch = None
    if get_op(node.op).convolution:
        al = tuple(conv_algorithms(sig, device, model.table))
        t, missing, extra, block = al[0].seconds, al[0].source != "measured", 0, 0
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", MissingCostWarning)
            p = model.gpu_time(sig, gpu=gpu)
        al, t, missing, extra = (), p.seconds, p.source == "analytical", kernel_scratch(sig)
        block = p.threads_per_block
        if p.blocks:
            launch = (p.threads_per_block, p.blocks)
    if node.op == "MatMul":  # cuBLAS's workspace, planned like cuDNN's
        extra += device.cublas_workspace_bytes or 0
    outputs = sum(graph.tensor(o).size for o in node.outputs if o)
    inputs = max((graph.tensor(i).size for i in node.inputs if i), default=0)
    return (al, t, missing, extra, block,
            occupancy(work.flops, outputs, inputs, device.sm_count, launch), float(work.bytes))


def stream_schedule(graph: Graph, model: CostModel, options: ScheduleOptions | None = None
                    ) -> Schedule:
    """The GPU schedule of `graph`: with strategy `optimized` (the default) the co-running
    streams of planner.schedule.gpu_streams when the simulation predicts them at least
    `options.min_gain` faster than one stream, else (and with `uniform`) one compute stream.
    The other CPU options (strategy `paper`, thread counts, SMT) are refused, not dropped."""
    options = options or ScheduleOptions()
    known = ScheduleOptions(strategy="uniform" if options.strategy == "uniform" else "optimized",
                            min_gain=options.min_gain)
    if options != known:
        raise ValueError(f"target {model.target.name!r} is a GPU: its plan is one compute "
                         f"stream or several (strategy 'optimized' or 'uniform', min_gain), "
                         f"and the scheduling options (strategy {options.strategy!r}, thread "
                         f"counts, co-running on cores) are for CPU targets")
    steps = compute_steps(graph, model)
    one = one_stream(graph, steps)
    if options.strategy == "uniform" or len(steps.nodes) < 2:
        return one
    several = co_running(graph, steps, model.target.gpus[0].memory_bandwidth)
    if several is None or several.step_seconds > one.step_seconds * (1.0 - options.min_gain):
        return one
    return several


def one_stream(graph: Graph, steps: ComputeSteps) -> Schedule:
    """Every node on the compute stream in stream order, one after another at its
    least-workspace algorithm's time; edges are the data and in-place dependencies plus the
    stream's own order."""
    names = [n.name for n in graph.nodes]
    preds = predecessors(graph)
    where = {n.name: i for i, n in enumerate(graph.nodes)}
    ops: list[ScheduledOp] = []
    edges: set[tuple[str, str]] = set()
    t = 0.0
    for k, (node, seconds) in enumerate(zip(steps.nodes, steps.seconds, strict=True)):
        deps = tuple(names[u] for u in preds[where[node.name]])
        ops.append(ScheduledOp(name=node.name, op=node.op, stream=STREAMS[0], deps=deps,
                               block=steps.blocks[k], start=t, end=t + float(seconds)))
        t += float(seconds)
        edges.update((d, node.name) for d in deps)
        if k:
            edges.add((steps.nodes[k - 1].name, node.name))
    rank = {op.name: k for k, op in enumerate(ops)}
    fastest = float(steps.fastest.sum())
    return Schedule(
        backend="cuda", strategy="stream", ops=tuple(ops),
        edges=tuple(Edge(before=a, after=b)
                    for a, b in sorted(edges, key=lambda e: (rank[e[1]], rank[e[0]]))),
        bound=Bound(seconds=fastest, critical_path=fastest, area=fastest),
        utilization=1.0 if ops else 0.0, mean_corun=1.0 if ops else 0.0,
        analytical_signatures=steps.analytical)


def co_running(graph: Graph, steps: ComputeSteps, bandwidth: float) -> Schedule | None:
    """The co-running schedule of `steps` (planner.schedule.gpu_streams), timed by the
    contended simulation; None when it uses one stream."""
    names = [n.name for n in graph.nodes]
    graph_preds = predecessors(graph)
    where = {n.name: i for i, n in enumerate(graph.nodes)}
    step_of = {n.name: k for k, n in enumerate(steps.nodes)}
    preds = [tuple(sorted(step_of[names[u]] for u in graph_preds[where[n.name]]))
             for n in steps.nodes]
    occ = steps.occupancy
    a = assign_streams(steps.fastest, preds, occ, len(COMPUTE_STREAMS))
    if a.streams < 2:
        return None
    pos = {j: k for k, j in enumerate(a.order)}
    edges = {(pos[p], pos[j]) for j in range(len(preds)) for p in preds[j]}
    edges.update((pos[u], pos[w]) for u, w in a.joins)
    chain: set[tuple[int, int]] = set()
    last: dict[int, int] = {}
    for k, j in enumerate(a.order):
        if a.stream[j] in last:
            chain.add((last[a.stream[j]], k))
        last[a.stream[j]] = k
    n = len(a.order)
    reduced = transitive_reduction(n, edges | chain, keep=chain)
    into: list[list[int]] = [[] for _ in range(n)]
    for u, w in reduced:
        into[w].append(u)
    seconds = [float(steps.seconds[j]) for j in a.order]
    run = simulate_streams(seconds, into, [occ[j] for j in a.order],
                           [steps.moved[j] / s if s > 0 else 0.0
                            for j, s in zip(a.order, seconds, strict=True)], bandwidth,
                           issue_times([a.stream[j] for j in a.order], reduced))
    ops = tuple(ScheduledOp(name=steps.nodes[j].name, op=steps.nodes[j].op,
                            stream=COMPUTE_STREAMS[a.stream[j]],
                            deps=tuple(names[u] for u in graph_preds[where[steps.nodes[j].name]]),
                            block=steps.blocks[j], start=run.start[k], end=run.end[k])
                  for k, j in enumerate(a.order))
    step = run.step
    fastest = steps.fastest
    critical = [0.0] * len(preds)
    for j in range(len(preds)):  # steps are in a topological order
        critical[j] = max((critical[p] for p in preds[j]), default=0.0) + float(fastest[j])
    path = max(critical, default=0.0)
    area = float(sum(min(o, 1.0) * f for o, f in zip(occ, fastest, strict=True)))
    busy = busy_seconds((o.start, o.end) for o in ops)
    return Schedule(
        backend="cuda", strategy="streams", ops=ops,
        edges=tuple(Edge(before=ops[u].name, after=ops[w].name)
                    for u, w in sorted(reduced, key=lambda e: (e[1], e[0]))),
        bound=Bound(seconds=max(path, area), critical_path=path, area=area),
        utilization=busy / step if step else 0.0,
        mean_corun=sum(o.end - o.start for o in ops) / step if step else 0.0,
        analytical_signatures=steps.analytical)
