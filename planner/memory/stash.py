"""The stash: forward values the backward pass reads, split into checkpoints (kept or offloaded)
and recompute segments (dropped after their last forward read, run again in backward).

Seed 001, Sections 3.3-3.4, on a graph: a stashed tensor is a *checkpoint* when recomputing it
would run an expensive op (a convolution or a matrix product, directly or through values
backward does not keep), when it feeds several forward ops (a fork: the spine of a ResNet,
the input of an Inception module), or when its op cannot run twice (an in-place update).
Every other stashed tensor is *droppable*: recomputed from checkpoints by cheap ops (ReLU,
BatchNorm, LRN, pooling, dropout, additions). Droppable tensors, together with the values
their recomputation passes through, form *segments* (connected groups):

    AlexNet:  conv1 -> bias -> relu1 -> lrn1 -> pool1 -> conv2 ...
                                ^checkpoint  [ segment: lrn1, pool1 ]
    ResNet:   conv1 -> bn1 -> relu1 -> conv2 ...
              ^checkpoint [ segment: bn1 (passed through), relu1 ]

A segment is recomputed one of two ways (Section 3.4, Fig. 9):

    speed-centric    once, before the first backward op that reads any of it; every
                     recomputed value kept until its last backward read
    memory-centric   before each backward op that reads it, only what that op needs, freed
                     after it

Cost-aware recomputation picks speed-centric when the segment's recomputed values plus that
first op's operands fit in the bottleneck layer's memory (the largest op's operands), else
memory-centric. The choice is made here, once, whatever the budget.

BatchNorm in training mode writes running statistics in place, so it cannot simply run again:
its recompute reads the kept saved mean and inverse std in place of the running statistics
(its normalised output depends only on the batch statistics) and writes the statistics it
recomputes to scratch buffers.

Keys: the stream's positions. Each graph step gets a key; before it come slots for every
recompute op that may run before it (one slot per potential op, whether or not its segment
is chosen), so positions never move when decisions change.

Example:
    >>> from planner.costs import CostModel
    >>> from planner.target import preset
    >>> from planner.schedule.streams import compute_steps
    >>> from planner.frontend.autodiff import Optimizer, make_training_graph
    >>> from planner.zoo import build
    >>> g = make_training_graph(build("alexnet", batch=2, image=63, width=0.125, classes=4),
    ...                         Optimizer(kind="sgd"))
    >>> st = analyze(compute_steps(g, CostModel(preset("k40c-12gb"))))
    >>> "relu1" in st.checkpoints, [sorted(s.members) for s in st.segments][0]
    (True, ['lrn1', 'pool1'])
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from networkx.utils import UnionFind

from planner.graph.views import view_aliases
from planner.ir.graph import Graph, Node
from planner.memory.liveness import PERSISTENT_ROLES, in_place_aliases
from planner.ops import get_op
from planner.ops.collective import gathered_again
from planner.schedule.streams import ComputeSteps

Strategy = Literal["speed-centric", "memory-centric"]
Key = int



@dataclass(frozen=True)
class TensorUse:
    """Where a non-persistent tensor is written and read, by step (-1: before the step)."""

    name: str
    bytes: int
    writer: int
    forward_reads: tuple[int, ...]
    backward_reads: tuple[int, ...]
    output: bool  # read after the step


@dataclass(frozen=True)
class RecomputeOp:
    """One potential recompute: run forward node `step` again in the slot `key` before
    `group`. `reads` and `writes` follow the node's inputs and outputs: a value name, or
    ("", name) pairs marking substitutions (see `inputs`)."""

    step: int
    group: int
    key: Key
    segment: int
    instance: int
    # Per node input: the value read (a source tensor, or a member recomputed in this
    # segment's same instance), or an output kept in its place (OpDef.recompute_reads:
    # BatchNorm's saved statistics for inputs 3 and 4).
    inputs: tuple[str, ...]
    # Per node output: the member it recomputes, or "" for a scratch output.
    outputs: tuple[str, ...]


@dataclass(frozen=True)
class Copy:
    """A recomputed value: tensor `tensor`, instance `instance`, live over keys [first, last]."""

    tensor: str
    instance: int
    bytes: int
    first: Key
    last: Key
    readers: tuple[int, ...]  # graph steps reading it (recompute readers are in `ops`)

    @property
    def name(self) -> str:
        return f"{self.tensor}@recompute{self.instance}"


@dataclass
class Segment:
    """A group of droppable values recomputed together (module docstring)."""

    id: int
    members: tuple[str, ...]       # every value dropped and recomputed
    stashed: tuple[str, ...]       # the members backward reads
    sources: tuple[str, ...]       # values the recompute reads that it does not recompute
    strategy: Strategy
    ops: list[RecomputeOp] = field(default_factory=list)
    copies: list[Copy] = field(default_factory=list)
    seconds: float = 0.0


@dataclass
class Stash:
    """Everything budgeted planning needs to know about the stream (module docstring)."""

    steps: ComputeSteps
    uses: dict[str, TensorUse]
    stashed: frozenset[str]
    checkpoints: frozenset[str]
    segments: list[Segment]
    key_of_step: np.ndarray       # graph step -> key
    group_start: np.ndarray       # graph step -> first key of its group (its slots)
    keys: int
    persistent_bytes: int
    bottleneck_bytes: int          # the largest op's non-persistent operands
    # In-place outputs -> the tensor whose bytes they are written over (`in_place`); they own
    # no bytes (no TensorUse): their reads count as that tensor's.
    in_place: dict[str, str] = field(default_factory=dict)

    def key(self, step: int) -> Key:
        """Key of a graph step; -1 (before the step) maps to key 0."""
        return int(self.key_of_step[step]) if step >= 0 else 0


def in_place(steps: ComputeSteps) -> dict[str, str]:
    """The in-place outputs and views of a stream (planner.memory.liveness.in_place_aliases,
    planner.graph.views.view_aliases) over values backward writes, each -> the tensor that
    owns its bytes: a forward value overwritten in place could be a checkpoint the stash keeps,
    which it does not model (none is, so far), and a view of one has bytes of its own here
    (its root may be recomputed or offloaded). A gradient's view (a reshape of a GEMM's
    output) shares its bytes, as without a budget."""
    writer = {t: i for i, node in enumerate(steps.nodes) for t in node.outputs}

    def backward(x: str) -> bool:
        return x in writer and steps.phase[writer[x]] != "forward"

    views = {v: r for v, r in view_aliases(steps.graph).items() if backward(r)}
    links = views | in_place_aliases(steps.graph, views=views)

    def root(t: str) -> str:
        while t in links:
            t = links[t]
        return t

    return {y: root(y) for y in links if backward(root(y))}


def tensor_uses(steps: ComputeSteps,
                aliases: dict[str, str] | None = None) -> dict[str, TensorUse]:
    """Write and read steps of every non-persistent tensor owning bytes; an in-place output
    (`aliases`: output -> the tensor it is written over) owns none, and its reads are its
    root's."""
    graph = steps.graph
    aliases = aliases or {}
    reads: dict[str, list[int]] = {}
    writer: dict[str, int] = {}
    for i, node in enumerate(steps.nodes):
        for t in dict.fromkeys(node.inputs):
            reads.setdefault(aliases.get(t, t), []).append(i)
        for t in node.outputs:
            writer[t] = i
    outputs = {aliases.get(t, t) for t in graph.outputs}
    uses = {}
    for t in graph.tensors:
        if t.role in PERSISTENT_ROLES or t.updates is not None or t.name in aliases:
            continue
        rs = sorted(set(reads.get(t.name, [])))
        fwd = tuple(r for r in rs if steps.phase[r] == "forward")
        bwd = tuple(r for r in rs if steps.phase[r] != "forward")
        uses[t.name] = TensorUse(t.name, t.nbytes, writer.get(t.name, -1), fwd, bwd,
                                 t.name in outputs)
    return uses


def _recomputable(graph: Graph, node: Node, output: str, products: bool = False) -> bool:
    # Ops as costly as the pass itself keep their outputs as checkpoints (unless `products`:
    # MemoryOptions.recompute_products); ops that write
    # persistent state in place or fill constants never run twice (planner.ops:
    # OpDef.recompute), unless their recompute reads kept outputs in place of that state
    # (OpDef.recompute_reads: a training BatchNorm, whose y alone is recomputed, the running
    # statistics it writes again going to scratch).
    op = get_op(node.op)
    if op.recompute not in (("cheap", "expensive") if products else ("cheap",)):
        return False
    if op.recompute_reads is None:
        return all(graph.tensor(o).updates is None for o in node.outputs)
    kept = [k for side, k in op.recompute_reads if side == "out"]
    if any(k >= len(node.outputs) for k in kept):
        return False  # a node without those outputs (BatchNorm in inference: y alone)
    return output not in {node.outputs[k] for k in kept} \
        and graph.tensor(output).updates is None


def _droppable(t: str, stack: frozenset[str], steps: ComputeSteps, uses: dict[str, TensorUse],
               stashed: frozenset[str], resolved: dict[str, bool],
               standin: dict[str, str], products: bool = False) -> bool:
    """Whether t can be recomputed from values that are kept, through cheap ops (memoised in
    `resolved`); a value with a stand-in (`standin`: ZeRO-3's forward copy of a parameter ->
    the copy gathered again for backward) is read as that one. A function of the module,
    not a closure of analyze: a recursive closure is a reference cycle, which planning (with
    the cyclic collector off) would not free."""
    if t in resolved:
        return resolved[t]
    graph, phase = steps.graph, steps.phase
    u = uses.get(t)
    ok = (u is not None and u.writer >= 0 and phase[u.writer] == "forward"
          and not u.output and t not in stack
          and _recomputable(graph, steps.nodes[u.writer], t, products)
          and not (t in stashed and len(u.forward_reads) > 1))
    if ok:
        node = steps.nodes[u.writer]
        for k, i in enumerate(node.inputs):
            role = graph.tensor(i).role
            if i in stashed or i in standin or role in ("param", "input", "label"):
                continue
            if not get_op(node.op).recompute_reads_input(k):
                continue  # not read again (BatchNorm: its saved statistics instead)
            if role in PERSISTENT_ROLES or not _droppable(i, stack | {t}, steps, uses, stashed,
                                                          resolved, standin, products):
                ok = False
                break
    resolved[t] = ok
    return ok


def analyze(steps: ComputeSteps, strategy: str = "cost-aware", products: bool = False
            ) -> Stash:
    """Stash, checkpoints and segments of a stream (module docstring). `strategy`:
    cost-aware (default), speed-centric or memory-centric for every segment. `products`:
    matrix products and convolutions may be recomputed too (MemoryOptions.recompute_products).

    ZeRO-3: a forward op reading a gathered parameter copy that is freed after forward and
    gathered again for backward (planner.ops.collective.gathered_again) is recomputed from
    the second copy, where that gather runs before every recompute of it; else the copy is
    not there to read, and the op's output is a checkpoint."""
    aliases = in_place(steps)
    uses = tensor_uses(steps, aliases)
    phase = steps.phase
    stashed = frozenset(u.name for u in uses.values() if u.backward_reads
                        and (u.writer < 0 or phase[u.writer] == "forward"))
    again = gathered_again([(n.op, n.inputs, n.outputs) for n in steps.nodes])
    standin = {a: b for a, b in again.items() if a in uses and b in uses}
    while True:  # each round drops the stand-ins read before their gather: at most their count
        stash = _analyzed(steps, strategy, uses, aliases, stashed, standin, products)
        late = _read_before_gathered(stash, standin)
        if not late:
            return stash
        standin = {a: b for a, b in standin.items() if a not in late}


def _analyzed(steps: ComputeSteps, strategy: str, uses: dict[str, TensorUse],
              aliases: dict[str, str], stashed: frozenset[str],
              standin: dict[str, str], products: bool) -> Stash:
    """analyze with the stand-ins `standin` a recompute reads in place of a freed copy."""
    graph = steps.graph
    producer = {t: i for i, n in enumerate(steps.nodes) for t in n.outputs}
    resolved: dict[str, bool] = {}
    drop = {t for t in stashed
            if _droppable(t, frozenset(), steps, uses, stashed, resolved, standin, products)}
    checkpoints = frozenset(stashed - drop)
    members = set(drop)
    frontier = list(drop)
    while frontier:  # the values recomputation passes through
        t = frontier.pop()
        node = steps.nodes[uses[t].writer]
        for k, i in enumerate(node.inputs):
            if not get_op(node.op).recompute_reads_input(k):
                continue
            if i not in stashed and i not in standin and i in uses and uses[i].writer >= 0 \
                    and i not in members:
                members.add(i)
                frontier.append(i)
    groups = _components(members, uses, steps.nodes)
    operand = [sum(uses[t].bytes for t in dict.fromkeys([*n.inputs, *n.outputs]) if t in uses)
               for n in steps.nodes]
    bottleneck = max(operand, default=0)
    segments = [_segment(k, sorted(g, key=lambda t: (uses[t].writer, t)), stashed, uses, steps,
                         producer, operand, bottleneck, strategy, standin)
                for k, g in enumerate(groups)]
    stash = Stash(steps=steps, uses=uses, stashed=stashed, checkpoints=checkpoints,
                  segments=segments, key_of_step=np.zeros(0, dtype=np.int64),
                  group_start=np.zeros(0, dtype=np.int64), keys=0,
                  persistent_bytes=sum(t.nbytes for t in graph.tensors
                                       if t.role in PERSISTENT_ROLES and t.updates is None),
                  bottleneck_bytes=bottleneck, in_place=aliases)
    _assign_keys(stash)
    return stash


def _read_before_gathered(stash: Stash, standin: dict[str, str]) -> set[str]:
    """The copies in `standin` whose stand-in some recompute would read before the gather
    that writes it (its slot precedes its group's step; the gather must come earlier)."""
    late = set()
    for seg in stash.segments:
        for op in seg.ops:
            for i in _inputs(stash.steps.nodes[op.step]):
                if i in standin and stash.uses[standin[i]].writer >= op.group:
                    late.add(i)
    return late


def _components(members: set[str], uses: dict[str, TensorUse], nodes) -> list[set[str]]:
    joined = UnionFind(sorted(members))
    for t in members:
        # Inputs, and outputs of one node, which are recomputed together.
        for i in (*nodes[uses[t].writer].inputs, *nodes[uses[t].writer].outputs):
            if i in members:
                joined.union(i, t)
    return sorted(joined.to_sets(), key=lambda g: min(uses[t].writer for t in g))


def _segment(sid: int, members: list[str], stashed: frozenset[str],
             uses: dict[str, TensorUse], steps: ComputeSteps, producer: dict[str, int],
             operand: list[int], bottleneck: int, strategy: str,
             standin: dict[str, str]) -> Segment:
    member_set = set(members)
    nodes = sorted({uses[t].writer for t in members})
    wanted = tuple(t for t in members if t in stashed)
    sources = sorted({standin.get(i, i) for s in nodes for i in _inputs(steps.nodes[s])
                      if i not in member_set})
    first = min(uses[t].backward_reads[0] for t in wanted)
    if strategy == "cost-aware":
        speed = sum(uses[t].bytes for t in members) + operand[first] <= bottleneck
        chosen: Strategy = "speed-centric" if speed else "memory-centric"
    elif strategy in ("speed-centric", "memory-centric"):
        chosen = strategy  # type: ignore[assignment]
    else:
        raise ValueError(f"unknown recompute strategy {strategy!r}; expected cost-aware, "
                         f"speed-centric or memory-centric")
    seg = Segment(id=sid, members=tuple(members), stashed=wanted, sources=tuple(sources),
                  strategy=chosen)
    if chosen == "speed-centric":
        plans = [(first, nodes, set(wanted))]
    else:
        readers = sorted({r for t in wanted for r in uses[t].backward_reads})
        plans = []
        for b in readers:
            needed = {t for t in wanted if b in uses[t].backward_reads}
            plans.append((b, _ancestors(needed, member_set, uses, steps), needed))
    for instance, (group, run, _) in enumerate(plans):
        for s in run:
            node = steps.nodes[s]
            outs = tuple(o if o in member_set else "" for o in node.outputs)
            ins = tuple(standin.get(i, i) for i in _inputs(node))
            seg.ops.append(RecomputeOp(step=s, group=group, key=-1, segment=sid,
                                       instance=instance, inputs=ins, outputs=outs))
        seg.seconds += float(sum(steps.seconds[s] for s in run))
    return seg


def _inputs(node: Node) -> tuple[str, ...]:
    """The values a recompute of `node` reads (OpDef.recompute_reads)."""
    return get_op(node.op).recompute_operands(node.inputs, node.outputs)


def _ancestors(needed: set[str], members: set[str], uses: dict[str, TensorUse],
               steps: ComputeSteps) -> list[int]:
    """Steps (forward order) recomputing `needed` from outside `members`."""
    todo, seen = list(needed), set()
    while todo:
        t = todo.pop()
        s = uses[t].writer
        if s in seen:
            continue
        seen.add(s)
        todo.extend(i for i in _inputs(steps.nodes[s]) if i in members)
    return sorted(seen)


def _assign_keys(stash: Stash) -> None:
    """Keys for graph steps and every potential recompute op; copies' lifetimes in keys."""
    n = len(stash.steps.nodes)
    slots: dict[int, list[tuple[int, int]]] = {}
    for seg in stash.segments:
        for k, op in enumerate(seg.ops):
            slots.setdefault(op.group, []).append((seg.id, k))
    key_of_step = np.zeros(n, dtype=np.int64)
    group_start = np.zeros(n, dtype=np.int64)
    next_key = 0
    for s in range(n):
        group_start[s] = next_key
        for sid, k in slots.get(s, []):
            op = stash.segments[sid].ops[k]
            stash.segments[sid].ops[k] = RecomputeOp(
                step=op.step, group=op.group, key=next_key, segment=sid,
                instance=op.instance, inputs=op.inputs, outputs=op.outputs)
            next_key += 1
        key_of_step[s] = next_key
        next_key += 1
    stash.key_of_step, stash.group_start, stash.keys = key_of_step, group_start, next_key
    for seg in stash.segments:
        seg.copies = _copies(seg, stash)


def _copies(seg: Segment, stash: Stash) -> list[Copy]:
    """Each recomputed value's lifetime: from its recompute to its last reader in the same
    instance (recompute ops, and graph steps from the group on for speed-centric, the group's
    step only for memory-centric)."""
    out = []
    by_instance: dict[int, list[RecomputeOp]] = {}
    for op in seg.ops:
        by_instance.setdefault(op.instance, []).append(op)
    for instance, ops in sorted(by_instance.items()):
        group = ops[0].group
        for op in ops:
            for t in op.outputs:
                if not t:
                    continue
                u = stash.uses[t]
                if seg.strategy == "speed-centric":
                    readers = tuple(r for r in u.backward_reads if r >= group)
                else:
                    readers = (group,) if group in u.backward_reads else ()
                last = max([stash.key(r) for r in readers]
                           + [o.key for o in ops if t in o.inputs] + [op.key])
                out.append(Copy(t, instance, u.bytes, op.key, last, readers))
    return out
