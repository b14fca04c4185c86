"""A budget state -> the ops and buffers of the GPU step, with the edges that order them.

Three streams (and a co-running schedule's other compute streams, each node on its own):
`compute` runs graph nodes and the active recompute ops in key order; `d2h`
copies offloaded checkpoints to pinned host buffers; `h2d` copies them back. Every buffer's
lifetime is in keys (the compute stream's positions, planner.memory.stash), exactly as the
state's profile counts it, and the edges make the executor respect it:

    producer ──► offload/T ──────────► first op of the release step   (T's device bytes free)
    last op before the fetch step ──► prefetch/T ──► T's backward readers

    compute  conv1 relu1 ... fc8 | ... recompute/lrn1 grad/lrn1 ... grad/conv1
    d2h            offload/relu1 ...
    h2d                              prefetch/relu1

Buffers: each tensor as itself; an offloaded one also as `T@host` (pinned host) and
`T@prefetch` (its device copy for backward); a recomputed one as `T@recompute<i>` (instance i
of its segment's recompute); outputs a recompute writes only because its node has them
(BatchNorm's statistics) as `T@scratch<i>`.

Example:
    >>> from planner.costs import CostModel
    >>> from planner.target import preset
    >>> from planner.memory.budget.search import State
    >>> from planner.schedule.streams import compute_steps
    >>> from planner.memory.stash import analyze
    >>> from planner.frontend.autodiff import Optimizer, make_training_graph
    >>> from planner.zoo import build
    >>> g = make_training_graph(build("alexnet", batch=4, image=63, classes=4),
    ...                         Optimizer(kind="sgd"))
    >>> state = State(analyze(compute_steps(g, CostModel(preset("k40c-12gb")))), 12.6e9)
    >>> state.apply(state.best_move())
    >>> m = materialize(state)
    >>> sorted({o.kind for o in m.ops}) == sorted({"node", state.log[0].kind} | (
    ...     {"prefetch"} if state.log[0].kind == "offload" else set()))
    True
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from planner.graph.deps import predecessors
from planner.graph.views import view_aliases
from planner.memory.budget.search import State
from planner.memory.decision import TRANSFER_OPS
from planner.memory.liveness import PERSISTENT_ROLES, Buffer, in_buckets
from planner.memory.stash import Segment, Stash
from planner.schedule.streams import ALL_STREAMS, COMM_STREAM

# The copy streams' indices (planner.schedule.streams.ALL_STREAMS: d2h, h2d); with the comm
# stream's, the streams that use no SMs; every other stream is a compute stream.
COPY_STREAMS = (1, 2)
NO_SMS = (*COPY_STREAMS, ALL_STREAMS.index(COMM_STREAM))


@dataclass
class OpSpec:
    """One op of the step: a graph node, a recompute, or a copy, with its position."""

    name: str
    op: str
    kind: str  # node | recompute | offload | prefetch
    stream: int
    key: float
    seconds: float
    step: int = -1          # the graph step it runs (node, recompute)
    tensor: str = ""        # the tensor it copies (offload, prefetch)
    reads: list[str] = field(default_factory=list)    # buffer names, in input order
    writes: list[str] = field(default_factory=list)   # buffer names, in output order
    lane: int = -1          # the CPU executor lane that runs it (its first CPU); -1: unknown


@dataclass
class Material:
    """Ops in execution order, buffers (key-space lifetimes), ordering edges, data deps."""

    ops: list[OpSpec]
    buffers: list[Buffer]
    edges: list[tuple[int, int]]
    deps: list[list[int]]
    keys: int
    # Seconds an op starts after its last wait ended on another lane (OpSpec.lane; the host's
    # measured hand-off, planner.schedule.simulate); 0 where none is priced.
    handoff: float = 0.0


def materialize(state: State) -> Material:
    """The ops, buffers and edges of `state` (module docstring)."""
    st = state.stash
    steps = st.steps
    graph = steps.graph
    ops = node_specs(st)
    # Which buffer each (reader op name, tensor) reads, when it is not the tensor itself.
    source: dict[tuple[str, str], str] = {}
    for sid in sorted(state.active):
        seg = st.segments[sid]
        ops += recompute_specs(st, seg)
        for c in seg.copies:
            for r in c.readers:
                source[(steps.nodes[r].name, c.tensor)] = c.name
    for t in sorted(state.mode):
        if state.mode[t] != "offload":
            continue
        u = st.uses[t]
        seconds = state.copy_seconds(t)
        put = float(st.key(u.writer)) + 0.25 if u.writer >= 0 else -0.5
        get = float(st.group_start[state.fetch[t]]) - 0.25
        ops.append(OpSpec(f"offload/{t}", TRANSFER_OPS["offload"], "offload", 1, put, seconds,
                          tensor=t, reads=[t], writes=[f"{t}@host"]))
        ops.append(OpSpec(f"prefetch/{t}", TRANSFER_OPS["prefetch"], "prefetch", 2, get, seconds,
                          tensor=t,
                          reads=[f"{t}@host"], writes=[f"{t}@prefetch"]))
        for r in u.backward_reads:
            source[(steps.nodes[r].name, t)] = f"{t}@prefetch"
    ops.sort(key=lambda o: (o.key, o.stream, o.name))
    index = {o.name: i for i, o in enumerate(ops)}
    # Graph nodes read the tensors themselves unless a copy stands in for them.
    for o in ops:
        if o.kind == "node":
            node = steps.nodes[o.step]
            o.reads = [source.get((node.name, i), i) for i in node.inputs]
            o.writes = list(node.outputs)
        elif o.kind == "recompute":
            o.reads = [f"{r}@prefetch" if state.mode.get(r) == "offload" else r
                       for r in o.reads]
    buffers = in_buckets(state.stash.steps.graph, _buffers(state, ops, index))
    writer = {b.name: b.writer for b in buffers}
    deps = [sorted({writer[r] for r in o.reads if writer.get(r, -1) >= 0}) for o in ops]
    # In-place updates also follow every other reader of the value they overwrite.
    preds = predecessors(graph)
    graph_index = {n.name: i for i, n in enumerate(graph.nodes)}
    op_of_node = {o.name: i for i, o in enumerate(ops) if o.kind == "node"}
    for i, o in enumerate(ops):
        if o.kind == "node":
            extra = {op_of_node[graph.nodes[p].name] for p in preds[graph_index[o.name]]}
            deps[i] = sorted(set(deps[i]) | extra)
    edges = _edges(state, ops, index, deps)
    return Material(ops=ops, buffers=buffers, edges=edges, deps=deps, keys=st.keys)


def node_specs(st: Stash) -> list[OpSpec]:
    """The graph nodes' ops, in step order (reads and writes filled in by `materialize`)."""
    steps = st.steps
    # A co-running schedule's node keeps its compute stream (ComputeSteps.stream).
    return [OpSpec(node.name, node.op, "node", steps.stream[s] if steps.stream else 0,
                   float(st.key(s)), float(steps.seconds[s]), step=s)
            for s, node in enumerate(steps.nodes)]


def recompute_specs(st: Stash, seg: Segment) -> list[OpSpec]:
    """The ops recomputing segment `seg`, at their slots: each node run again into
    `T@recompute<i>` (a scratch output as `T@scratch<i>`), reading the segment's own copies."""
    steps = st.steps
    out = []
    for op in seg.ops:
        node = steps.nodes[op.step]
        writes = [f"{t}@recompute{op.instance}" if t else f"{o}@scratch{op.instance}"
                  for t, o in zip(op.outputs, node.outputs, strict=True)]
        reads = [f"{i}@recompute{op.instance}" if i in seg.members else i for i in op.inputs]
        out.append(OpSpec(f"recompute/{node.name}/{op.instance}", node.op, "recompute", 0,
                          float(op.key), float(steps.seconds[op.step]), step=op.step,
                          reads=reads, writes=writes))
    return out


def _buffers(state: State, ops: list[OpSpec], index: dict[str, int]) -> list[Buffer]:
    st = state.stash
    graph = st.steps.graph
    keys = st.keys
    readers: dict[str, list[int]] = {}
    for i, o in enumerate(ops):
        for r in dict.fromkeys(o.reads):
            readers.setdefault(r, []).append(i)
    writers = {w: i for i, o in enumerate(ops) for w in o.writes}
    before, after = -1.0, float(keys + 1)
    out: list[Buffer] = []

    def span(name: str, default_first: float) -> tuple[int, list[int], float, float]:
        w = writers.get(name, -1)
        rs = sorted(readers.get(name, []))
        first = ops[w].key if w >= 0 else default_first
        last = max([ops[r].key for r in rs], default=first)
        return w, rs, first, last

    over: dict[str, list[str]] = {}   # a tensor -> the in-place outputs written over it
    for y, x in st.in_place.items():
        over.setdefault(x, []).append(y)
    placed: dict[str, Buffer] = {}
    for t in graph.tensors:
        if t.updates is not None or t.role in PERSISTENT_ROLES:
            w, rs, _, _ = span(t.name, before)
            out.append(Buffer(t.name, t.name, t.nbytes, before, after, -1, len(ops), w,
                              tuple(rs), "persistent", alias_of=t.updates or ""))
            continue
        if t.name in st.in_place:
            continue  # an alias of its root's bytes, below
        u = st.uses[t.name]
        w, rs, first, last = span(t.name, before)
        for y in over.get(t.name, ()):  # its bytes live on until they are read as y's
            _, yrs, _, ylast = span(y, before)
            rs, last = sorted(set(rs) | set(yrs)), max(last, ylast)
        kind = "input" if w < 0 else "activation"
        end = last + 1
        if u.output:
            end, kind = after, "output"
        if state.mode.get(t.name) == "offload":
            end = float(st.group_start[state.release[t.name]])
        out.append(Buffer(t.name, t.name, t.nbytes, first, max(end, first + 1),
                          -1 if w < 0 else w, len(ops) if u.output else max(rs, default=w),
                          w, tuple(rs), kind))
        placed[t.name] = out[-1]
        if state.mode.get(t.name) == "offload":
            host, dev = f"{t.name}@host", f"{t.name}@prefetch"
            hw, hrs, hfirst, hlast = span(host, first)
            out.append(Buffer(host, t.name, t.nbytes, hfirst, hlast + 1, hw, max(hrs), hw,
                              tuple(hrs), "host", placement="host"))
            dw, drs, _, dlast = span(dev, first)
            dfirst = float(st.group_start[state.fetch[t.name]])
            out.append(Buffer(dev, t.name, t.nbytes, dfirst, dlast + 1, dw, max(drs), dw,
                              tuple(drs), "prefetch"))
    views = view_aliases(graph)
    for y, x in sorted(st.in_place.items()):
        root, size = placed[x], graph.tensor(y).nbytes
        w, rs, _, _ = span(y, before)
        out.append(Buffer(y, y, size, root.start, root.end, root.first, root.last, w,
                          tuple(rs), "view" if y in views else "in-place", alias_of=x))
    for sid in sorted(state.active):
        seg = st.segments[sid]
        for op in seg.ops:
            node = st.steps.nodes[op.step]
            for t, o in zip(op.outputs, node.outputs, strict=True):
                name = f"{t}@recompute{op.instance}" if t else f"{o}@scratch{op.instance}"
                w, rs, first, last = span(name, 0.0)
                size = graph.tensor(o).nbytes
                out.append(Buffer(name, o, size, first, last + 1, w, max(rs, default=w), w,
                                  tuple(rs), "recompute" if t else "scratch"))
    return out


def _edges(state: State, ops: list[OpSpec], index: dict[str, int],
           deps: list[list[int]]) -> list[tuple[int, int]]:
    st = state.stash
    edges: set[tuple[int, int]] = set()
    last_on: dict[int, int] = {}
    compute = [i for i, o in enumerate(ops) if o.stream not in NO_SMS]
    # A co-running schedule's joins (around ops that fill the GPU) hold between its nodes.
    op_of_step = {o.step: i for i, o in enumerate(ops) if o.kind == "node"}
    edges.update((op_of_step[u], op_of_step[w]) for u, w in st.steps.joins)
    for i, o in enumerate(ops):
        if o.stream in last_on:
            edges.add((last_on[o.stream], i))
        last_on[o.stream] = i
        edges.update((d, i) for d in deps[i])
    keys = [ops[i].key for i in compute]
    for t, mode in state.mode.items():
        if mode != "offload":
            continue
        off, pre = index[f"offload/{t}"], index[f"prefetch/{t}"]
        release = float(st.group_start[state.release[t]])
        k = bisect.bisect_left(keys, release)
        if k < len(compute):
            edges.add((off, compute[k]))
        fetch = float(st.group_start[state.fetch[t]])
        k = bisect.bisect_left(keys, fetch) - 1
        if k >= 0:
            edges.add((compute[k], pre))
    return sorted(e for e in edges if e[0] != e[1])
