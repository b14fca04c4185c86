"""`stream_schedule`: the GPU scheduler. Graph nodes on the compute stream in one order, each
with its predicted time; memory planning (planner.memory.gpu) then adds the copy streams'
offloads and prefetches, recomputes, and each convolution's algorithm, and re-times the step.

Order: the graph's order (forward, backward), except that each update runs as soon as it may,
right after the last op it must follow (its gradient's producer and every other reader of the
value it overwrites, planner.schedule.deps). A gradient then lives from its producer to the
update instead of to the end of the step, so the gradients are never all resident at once.

    graph order   fwd ... bwd(fc8) bwd(fc7) ... bwd(conv1) | upd(fc8) upd(fc7) ... upd(conv1)
    stream order  fwd ... bwd(fc8) upd(fc8) bwd(fc7) upd(fc7) ... bwd(conv1) upd(conv1)

Times: convolutions by algorithm (planner.costs.convalgo; the least-workspace candidate is the
planning baseline, the chosen one comes later), every other op from the cost model's GPU time
(measured launch configuration, whose threads per block the op then carries as its `block`;
else its measured time alone; else the analytical roofline).

Example:
    >>> from planner.costs import CostModel
    >>> from planner.graph.autodiff import Optimizer, make_training_graph
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
from planner.costs.convalgo import ConvAlgo, conv_algorithms, kernel_scratch
from planner.graph.autodiff import node_phase
from planner.graph.ir import Graph, Node
from planner.ops import get_op
from planner.schedule.deps import predecessors
from planner.schedule.options import ScheduleOptions
from planner.schedule.record import Bound, Edge, Schedule, ScheduledOp

# The streams of a GPU plan: graph nodes and recomputes run on `compute`; offloads copy device
# to host on `d2h`, prefetches host to device on `h2d` (planner.memory.materialize).
STREAMS = ("compute", "d2h", "h2d")

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
    update node moved to right after its last predecessor."""
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
    for u in sorted(updates, key=at.__getitem__):
        anchors = [position[p] for p in preds[u] if p in position]
        if anchors:
            after.setdefault(rest[max(anchors)], []).append(u)
        else:
            head.append(u)
    out = list(head)
    for i in rest:
        out.append(i)
        out.extend(_settle(after.get(i, []), preds, updates, after))
    return out


def _settle(us: list[int], preds, updates: set[int], after: dict[int, list[int]]) -> list[int]:
    # Updates that follow other updates (Adam's shared step count) come after them.
    return sorted(us, key=lambda u: (sum(1 for p in preds[u] if p in updates), u))


def compute_steps(graph: Graph, model: CostModel, order: list[str] | None = None,
                  gpu: int = 0) -> ComputeSteps:
    """The stream of `graph` on the model's GPU (module docstring)."""
    if not model.target.gpus:
        raise ValueError(f"target {model.target.name!r} has no GPU")
    device = model.target.gpus[gpu]
    sigs = graph_signatures(graph)
    nodes = [graph.nodes[i] for i in stream_order(graph, order)]
    algos, seconds = [], []
    analytical = 0
    scratch: list[int] = []
    blocks: list[int] = []
    cache: dict[str, tuple[tuple[ConvAlgo, ...], float, bool, int, int]] = {}
    for node in nodes:
        sig = sigs[node.name]
        if sig.key not in cache:
            if get_op(node.op).convolution:
                al = tuple(conv_algorithms(sig, device, model.table))
                cache[sig.key] = (al, al[0].seconds, al[0].source != "measured", 0, 0)
            else:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", MissingCostWarning)
                    p = model.gpu_time(sig, gpu=gpu)
                cache[sig.key] = ((), p.seconds, p.source == "analytical", kernel_scratch(sig),
                                  p.threads_per_block)
        al, t, missing, extra, block = cache[sig.key]
        algos.append(al)
        seconds.append(t)
        scratch.append(extra)
        blocks.append(block)
    analytical = sum(1 for _, _, missing, _, _ in cache.values() if missing)
    return ComputeSteps(graph=graph, nodes=tuple(nodes),
                        phase=tuple(node_phase(graph, n) for n in nodes), algos=tuple(algos),
                        seconds=np.array(seconds, dtype=float), analytical=analytical,
                        scratch=tuple(scratch), blocks=tuple(blocks))


def stream_schedule(graph: Graph, model: CostModel, options: ScheduleOptions | None = None
                    ) -> Schedule:
    """The compute stream of `graph` on the model's GPU: nodes in stream order, one after
    another at their least-workspace algorithm's time; edges are the data and in-place
    dependencies plus the stream's own order. `options.strategy` is recorded; the stream
    order itself has no knobs yet (one compute stream), so CPU options are refused rather
    than dropped."""
    if options is not None and options != ScheduleOptions():
        raise ValueError(f"target {model.target.name!r} is a GPU: its plan is one compute "
                         f"stream, and the scheduling options (strategy "
                         f"{options.strategy!r}, thread counts, co-running) are for CPU targets")
    steps = compute_steps(graph, model)
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
