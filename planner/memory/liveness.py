"""Liveness under a schedule: every buffer's lifetime, the peak of live bytes (LOAD), naive.

A buffer is live from the start of the op that first writes it to the end of the op that last
reads it, in the schedule's times (so with co-running ops, lifetimes overlap as the ops do):

    op      conv1 ──── relu1 ─── pool1 ─── ... ─── grad/relu1 ───
    conv1   [=========================]                            read by relu1 only
    relu1          [==================================]            read again in backward

Persistent tensors (params, state, optimizer state) are live before, during and after the step;
inputs and labels are written before the step (by the caller); the step's outputs are read after
it. An in-place update (a tensor with `updates`) is written over the bytes of the tensor it
updates: it is an alias, not a buffer of its own, and naive does not count it. So is the output of a
view op (Reshape, Flatten: `OpDef.view`) of a non-persistent tensor: it shares its input's bytes,
whose buffer then lives until the view's last reader (its readers count as the input buffer's
readers too). Codegen follows the same rule (`view_aliases`), so the executor copies nothing.
Likewise an output an op writes over its input's bytes (`OpDef.in_place`: UnscaleGrads), where
that input's value has no reader after the op (`in_place_aliases`): the input's buffer lives on
until the output's last reader, and the step holds the two values in one buffer, one at a time.

    naive  = sum of every buffer's bytes (each tensor its own bytes)
    LOAD   = max over time of the bytes of the buffers live at that time

Intervals are half-open in time, [start, end): a buffer whose last reader ends when another's
writer starts may share bytes with it (if happens-before orders them).

Example:
    >>> s = OpTimes(names=("a", "b"), start=np.array([0.0, 1.0]), end=np.array([1.0, 2.0]))
    >>> bufs = [Buffer("x", "x", 8, -1.0, 1.0, -1, 0, -1, (0,), "input"),
    ...         Buffer("y", "y", 4, 0.0, 2.0, 0, 1, 0, (1,), "activation"),
    ...         Buffer("z", "z", 4, 1.0, 3.0, 1, 2, 1, (), "output")]
    >>> load_bytes(bufs), naive_bytes(bufs)
    (12, 16)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from planner.graph.views import PERSISTENT_ROLES, view_aliases  # noqa: F401 (memory's names)
from planner.ir.graph import Graph

Bytes = int
Seconds = float

EXTERNAL_INPUT_ROLES = frozenset({"input", "label"})


@dataclass(frozen=True)
class OpTimes:
    """The ops of a plan in execution order: names, predicted start and end (seconds)."""

    names: tuple[str, ...]
    start: np.ndarray
    end: np.ndarray

    @property
    def step_seconds(self) -> Seconds:
        return float(self.end.max()) if len(self.end) else 0.0

    @property
    def before(self) -> Seconds:
        """A time before the step: when inputs and persistent state were written."""
        return -1.0

    @property
    def after(self) -> Seconds:
        """A time after the step: when outputs and persistent state are read."""
        return self.step_seconds + 1.0


@dataclass(frozen=True)
class Buffer:
    """One buffer's lifetime. Ops are indices into the schedule; -1 is before the step and
    len(ops) after it. `start`/`end` in seconds, half-open; `kind` says what it holds:
    persistent, input, activation, output (read after the step), workspace, or a memory op's
    copy (prefetch, recompute)."""

    name: str
    tensor: str
    bytes: Bytes
    start: Seconds
    end: Seconds
    first: int
    last: int
    writer: int
    readers: tuple[int, ...]
    kind: str
    alias_of: str = ""
    placement: str = "device"
    # Ops that also write it (a recompute writing its scratch outputs does not count).
    extra: tuple[int, ...] = field(default=())
    # The gradient bucket it lies in, side by side with the bucket's other gradients in
    # order (an in-place AllReduce's inputs: planner.ops.collective), or "".
    bucket: str = ""
    bucket_at: int = 0  # its place in the bucket
    # The bucket's bytes, padding included, when it is split into shards among the ranks
    # (a ReduceScatter's gradients, a ShardedUpdate's parameters); 0: its members' span.
    bucket_bytes: int = 0

    @property
    def accessors(self) -> tuple[int, ...]:
        """Ops touching it inside the step: its writer (if any) and its readers."""
        return ((self.writer,) if self.writer >= 0 else ()) + self.readers


def in_place_aliases(graph: Graph, views: dict[str, str] | None = None) -> dict[str, str]:
    """In-place outputs -> the tensor whose bytes they are written over (the root of its
    chain of views and in-place outputs): output k of an op that may write it over input k
    (`OpDef.in_place`), taken where that input's value is dead once the op has read it, from
    the graph alone, so in every schedule that keeps the graph's data order:

      - the input is written in the step by a node (not persistent, not fed by the caller,
        not a step output) and read by the op once, with output k's bytes;
      - every other reader of its value (of it and of the views sharing its bytes) is an
        ancestor of the op, so it has read the value before the op overwrites it;
      - neither lies in a collective's bucket (a layout of its own).

    Else output k gets bytes of its own. planner.verify.memory checks the first two on the
    plan's stated ordering, not trusting this.

    >>> from planner.frontend.autodiff import make_training_graph
    >>> from planner.graph.optimizer import Optimizer
    >>> from planner.zoo import build
    >>> g = make_training_graph(build("mlp", batch=2, hidden=[4], in_features=3, classes=2),
    ...                         Optimizer(kind="sgd"), precision="fp16-mixed")
    >>> in_place_aliases(g)["grad/fc1/weight/unscaled"]
    'grad/fc1/matmul'
    """
    from planner.ops import get_op

    views = view_aliases(graph) if views is None else views
    tensors = graph.tensor_map
    producer = graph.producer
    family: dict[str, list[str]] = {}   # view root -> the tensors sharing its value
    for v, r in views.items():
        family.setdefault(r, [r]).append(v)
    barred = set(graph.outputs) | set(buckets(graph))
    out: dict[str, str] = {}
    for node in graph.nodes:
        rule = get_op(node.op).in_place
        if rule is None:
            continue
        for k in rule(len(node.inputs)):
            if k >= len(node.outputs):
                continue
            x, y = node.inputs[k], node.outputs[k]
            value = views.get(x, x)
            shared = family.get(value, [value])
            if (node.inputs.count(x) != 1 or tensors[x].nbytes != tensors[y].nbytes
                    or tensors[value].role in PERSISTENT_ROLES | EXTERNAL_INPUT_ROLES
                    or value not in producer or {y, *shared} & barred):
                continue
            readers = {r.name for v in shared
                       for r in graph.consumers.get(v, ()) if r.name != node.name}
            if readers - _ancestors(graph, node.name, readers):
                continue
            out[y] = out.get(value, value)
    return out


def _ancestors(graph: Graph, node: str, wanted: set[str]) -> set[str]:
    """Those of `wanted` that `node` depends on through the graph's data edges."""
    found: set[str] = set()
    if not wanted:
        return found
    producer = graph.producer
    seen, stack = {node}, [node]
    while stack and found != wanted:
        for t in graph.node_map[stack.pop()].inputs:
            p = producer.get(t)
            if p is not None and p.name not in seen:
                seen.add(p.name)
                stack.append(p.name)
                if p.name in wanted:
                    found.add(p.name)
    return found


def byte_roots(graph: Graph) -> dict[str, str]:
    """Every tensor that shares another's bytes (views and in-place outputs) -> the tensor
    that owns them."""
    views = view_aliases(graph)
    links = views | in_place_aliases(graph, views)

    def root(t: str) -> str:
        while t in links:
            t = links[t]
        return t

    return {t: root(t) for t in links}


def buckets(graph: Graph) -> dict[str, tuple[str, int, int]]:
    """Tensor -> (the collective whose bucket holds it, its place there, the bucket's bytes
    when padded to shards, else 0): the buffers layout places side by side, in that order
    (planner.memory.layout.place; planner.ops.collective.collective_buckets)."""
    from planner.ops.collective import collective_buckets

    return collective_buckets(graph.nodes, lambda t: graph.tensor_map[t].size)


def in_buckets(graph: Graph, buffers: list[Buffer]) -> list[Buffer]:
    """`buffers` with their bucket named (buckets(graph))."""
    of = buckets(graph)
    return [replace(b, bucket=of[b.tensor][0], bucket_at=of[b.tensor][1],
                    bucket_bytes=of[b.tensor][2])
            if b.tensor in of else b for b in buffers]


def graph_buffers(graph: Graph, schedule: OpTimes) -> list[Buffer]:
    """One buffer per graph tensor (aliases for in-place updates and views), lifetimes from
    `schedule`.

    Every graph node must be an op of the schedule (KeyError naming it otherwise).
    """
    index = {name: i for i, name in enumerate(schedule.names)}
    n = len(schedule.names)
    readers: dict[str, list[int]] = {t.name: [] for t in graph.tensors}
    writer: dict[str, int] = {}
    for node in graph.nodes:
        if node.name not in index:
            raise KeyError(f"graph node {node.name!r} is not an op of the plan")
        i = index[node.name]
        for t in dict.fromkeys(node.inputs):
            readers[t].append(i)
        for t in node.outputs:
            writer[t] = i
    outputs = set(graph.outputs)
    views = view_aliases(graph)
    roots = byte_roots(graph)
    for alias, root in roots.items():
        readers[root] += readers[alias]
        if alias in outputs:
            outputs.add(root)
    # The step's bounds once (`after` is a max over every op), the ops' times as Python floats
    # (numpy scalars are slow to read one at a time).
    times = (schedule.before, schedule.after, schedule.start.tolist(), schedule.end.tolist())
    buffers = [_buffer(t, writer.get(t.name, -1), sorted(set(readers[t.name])),
                       t.name in outputs, times, n) for t in graph.tensors]
    return in_buckets(graph, [
        replace(b, kind="view" if b.tensor in views else "in-place", alias_of=roots[b.tensor])
        if b.tensor in roots else b for b in buffers])


def _buffer(t, w: int, rs: list[int], is_output: bool,
            times: tuple[Seconds, Seconds, list[Seconds], list[Seconds]], n: int) -> Buffer:
    before, after, starts, ends = times
    persistent = t.role in PERSISTENT_ROLES
    if t.updates is not None:
        # Written over the bytes of `t.updates` by its writer; lives as long as that does.
        return Buffer(t.name, t.name, t.nbytes, before, after, -1, n, w, tuple(rs),
                      "persistent", alias_of=t.updates)
    if persistent:
        return Buffer(t.name, t.name, t.nbytes, before, after, -1, n, -1, tuple(rs),
                      "persistent")
    start = before if w < 0 else starts[w]
    first = -1 if w < 0 else w
    if is_output:
        return Buffer(t.name, t.name, t.nbytes, start, after, first, n, w, tuple(rs),
                      "output")
    end = max([ends[r] for r in rs], default=start if w < 0 else ends[w])
    last = max(rs, default=first)
    kind = "input" if w < 0 else "activation"
    return Buffer(t.name, t.name, t.nbytes, start, end, first, last, w, tuple(rs), kind)


def owners(buffers: Sequence[Buffer]) -> list[Buffer]:
    """The buffers that own bytes (every buffer but in-place aliases)."""
    return [b for b in buffers if not b.alias_of]


def naive_bytes(buffers: Sequence[Buffer]) -> Bytes:
    """Every buffer its own bytes (aliases share their target's)."""
    return sum(b.bytes for b in owners(buffers) if b.placement == "device")


def live_profile(buffers: Sequence[Buffer]) -> tuple[np.ndarray, np.ndarray]:
    """(times, live bytes from each time to the next), over the device buffers' events."""
    own = [b for b in owners(buffers) if b.placement == "device" and b.end > b.start]
    if not own:
        return np.zeros(1), np.zeros(1, dtype=np.int64)
    times = np.array([b.start for b in own] + [b.end for b in own])
    deltas = np.array([b.bytes for b in own] + [-b.bytes for b in own], dtype=np.int64)
    # Ends before starts at equal times: half-open intervals.
    order = np.lexsort((deltas, times))
    live = np.cumsum(deltas[order])
    return times[order], live


def load_bytes(buffers: Sequence[Buffer]) -> Bytes:
    """LOAD: the peak of live device bytes."""
    return int(max(0, live_profile(buffers)[1].max()))


def resident_bytes(graph: Graph) -> Bytes:
    """Persistent state: params, state and optimizer state (not their in-place next values),
    live before, during and after every step."""
    return sum(t.nbytes for t in graph.tensors
               if t.role in PERSISTENT_ROLES and t.updates is None)


def per_op_bound(graph: Graph, workspace: dict[str, Bytes] | None = None) -> Bytes:
    """The per-op lower bound: the largest single op's inputs + outputs + workspace, plus the
    resident state (`resident_bytes`), each tensor counted once.

    No plan can go below it: while an op runs, its operands and workspace are live, and so is
    the persistent state. Gradients count where an op reads or writes them, not all at once:
    a schedule that runs each update as soon as its gradient is ready (as the CPU schedulers
    and the GPU stream plan do) never holds them all (seed 001's l_peak + resident state).
    """
    workspace = workspace or {}
    # A view or an in-place output shares its root's bytes: counted once, as the root's
    # (liveness gives the two one buffer, so a Reshape's own bound never exceeds its load).
    roots = byte_roots(graph)
    # Each tensor's bytes once, however many ops touch it (persistent ones: counted apart).
    transient = {t.name: 0 if t.role in PERSISTENT_ROLES else t.nbytes for t in graph.tensors}
    largest = 0
    for node in graph.nodes:
        own = sum(transient[t] for t in dict.fromkeys(
            roots.get(t, t) for t in (*node.inputs, *node.outputs)))
        largest = max(largest, own + workspace.get(node.name, 0))
    return largest + resident_bytes(graph)
