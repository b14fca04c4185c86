"""Graph validation: every rule checked the obvious way, errors naming the node and tensor.

`check_graph` re-derives every node's output types from the op registry, so a graph JSON edited
by hand (or written by another tool) is held to the same rules the builder applies.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING

from planner.ir.accumulation import accumulation_problem
from planner.ir.graph import EXTERNAL_ROLES, Graph, Node
from planner.ops import OpError, TensorType, get_op

if TYPE_CHECKING:  # networkx is imported where it is used: most commands never need it
    import networkx as nx


class GraphError(ValueError):
    """The graph breaks a rule; the message names the node and/or tensor."""


# Output types inferred by (op, input types, attrs' repr: JSON data, so equal reprs mean equal
# values), shared by every check in the process: a pipeline checks its graph again after each
# pass (a dozen times per shape the torch doors plan), and a deep graph repeats a few hundred
# kinds of node. Inference is a pure function of the key. Bounded: emptied past INFERRED_MAX.
_INFERRED: dict[tuple, list[TensorType]] = {}
INFERRED_MAX = 1 << 16


def normalize_attrs(graph: Graph) -> Graph:
    """The same graph with every node's attrs spelled out (defaults filled, kinds coerced)."""
    nodes = []
    for n in graph.nodes:
        try:
            attrs = get_op(n.op).normalize_attrs(n.attrs)
        except OpError as e:
            raise GraphError(f"node {n.name!r}: {e}") from None
        nodes.append(n if attrs == n.attrs else n.model_copy(update={"attrs": attrs}))
    return graph.model_copy(update={"nodes": tuple(nodes)})


# Inside `checked_at_the_end`: check_graph returns its graph unchecked (the caller checks the
# graph it keeps, once).
_AT_THE_END: ContextVar[bool] = ContextVar("checked_at_the_end", default=False)


@contextmanager
def checked_at_the_end() -> Iterator[None]:
    """Within it, `check_graph` checks nothing: for a caller that runs passes already checked
    on a graph of the same program at other shapes (a range plan's: planner/torch/training.py
    runs a shape of its range through the same import and passes) and checks the graph it
    keeps once, in full, after it. Checking after every pass names the pass that breaks a
    rule; the graph the executor runs is held to the same rules either way. Eight of the ten
    checks of a new sequence length's graphs go (about 16 ms of CPU a length for the text
    workload's encoder, bench/first_step_loop.py); its step graph's and its evaluation
    graph's stay.

    >>> from planner.zoo import build
    >>> g = build("mlp", batch=2, hidden=[4], in_features=3, classes=2)
    >>> with checked_at_the_end():
    ...     check_graph(g) is g
    True
    """
    token = _AT_THE_END.set(True)
    try:
        yield
    finally:
        _AT_THE_END.reset(token)


@contextmanager
def checked_each_pass() -> Iterator[None]:
    """Within it, `check_graph` checks as usual, inside a `checked_at_the_end` too: for that
    caller's one check in full, and for planning it does not cover."""
    token = _AT_THE_END.set(False)
    try:
        yield
    finally:
        _AT_THE_END.reset(token)


def check_graph(graph: Graph) -> Graph:
    """Raise GraphError on the first broken rule; return the graph unchanged otherwise.

    Rules: unique names; known ops with valid attrs and arity; every input defined before use
    (a use before definition is reported as a cycle when there is one); each tensor produced
    once; inferred output shape and dtype equal to the declared tensor; graph outputs defined;
    a marked loss (Graph.loss) is a float scalar output; with gradient accumulation, the
    optimizer step reads summed gradients only (planner.ir.accumulation). Nothing is checked
    inside `checked_at_the_end`.
    """
    if _AT_THE_END.get():
        return graph
    _check_names(graph)
    tensors = graph.tensor_map
    written: set[str] = set()
    updated: dict[str, str] = {}  # persistent tensor -> the tensor holding its next value
    position = {n.name: k for k, n in enumerate(graph.nodes)}
    if len(_INFERRED) > INFERRED_MAX:
        _INFERRED.clear()
    for n in graph.nodes:
        for i in n.inputs:
            if i not in tensors:
                raise GraphError(f"node {n.name!r}: input tensor {i!r} is not defined")
            t = tensors[i]
            if t.role not in EXTERNAL_ROLES and i not in written:
                _check_acyclic(graph)  # a cycle explains it better; looked for only here
                raise GraphError(f"node {n.name!r}: input tensor {i!r} is used before the node "
                                 f"that produces it (nodes must be in topological order)")
        for o in n.outputs:
            if o not in tensors:
                raise GraphError(f"node {n.name!r}: output tensor {o!r} is not declared")
            if o in written:
                raise GraphError(f"tensor {o!r} is produced twice (again by node {n.name!r})")
            if tensors[o].updates is not None:
                _check_update(graph, n, o, updated, position)
            elif tensors[o].role in EXTERNAL_ROLES:
                raise GraphError(f"node {n.name!r}: output tensor {o!r} has role "
                                 f"{tensors[o].role!r}, which is fed from outside the step")
            written.add(o)
        _check_node_types(graph, n, _INFERRED)
    for o in graph.outputs:
        if o not in tensors:
            raise GraphError(f"graph output {o!r} is not a tensor of the graph")
    if graph.loss is not None:
        check_loss(graph, graph.loss)
    problem = accumulation_problem(graph)
    if problem is not None:
        raise GraphError(problem)
    return graph


def check_loss(graph: Graph, loss: str) -> None:
    """A marked loss is a float scalar the graph returns (what autodiff seeds with 1)."""
    if loss not in graph.outputs:
        raise GraphError(f"graph loss {loss!r} is not one of the graph's outputs "
                         f"{list(graph.outputs)}")
    t = graph.tensor_map[loss]
    if t.shape != () or not t.dtype.startswith(("float", "bfloat")):
        raise GraphError(f"graph loss {loss!r} must be a float scalar (shape []), got "
                         f"{t.dtype} {list(t.shape)}")


def _check_update(graph: Graph, node: Node, name: str, updated: dict[str, str],
                  position: dict[str, int]) -> None:
    """An in-place update must match its target and come after every other reader of it."""
    tensors = graph.tensor_map
    new = tensors[name]
    old = tensors.get(new.updates or "")
    if old is None or old.role not in ("param", "state", "optimizer-state"):
        raise GraphError(f"tensor {name!r} updates {new.updates!r}, which is not a param, state "
                         f"or optimizer-state tensor of the graph")
    if (new.shape, new.dtype, new.role) != (old.shape, old.dtype, old.role):
        raise GraphError(f"tensor {name!r} updates {old.name!r} but differs in shape, dtype or "
                         f"role")
    if old.name in updated:
        raise GraphError(f"tensor {old.name!r} is updated twice ({updated[old.name]!r} and "
                         f"{name!r})")
    updated[old.name] = name
    for reader in graph.consumers.get(old.name, ()):
        if reader.name != node.name and position[reader.name] > position[node.name]:
            raise GraphError(f"node {reader.name!r} reads {old.name!r} after node {node.name!r} "
                             f"updated it in place")


def _check_names(graph: Graph) -> None:
    bad = control_character(graph.name)
    if bad:
        raise GraphError(f"graph name {graph.name!r} holds control character {bad}")
    for kind, names in (("tensor", [t.name for t in graph.tensors]),
                        ("node", [n.name for n in graph.nodes])):
        for name in names:
            bad = control_character(name)
            if bad:
                raise GraphError(f"{kind} name {name!r} holds control character {bad}; names "
                                 f"must be printable text")
    seen: set[str] = set()
    for t in graph.tensors:
        if t.name in seen:
            raise GraphError(f"tensor {t.name!r} is declared twice")
        seen.add(t.name)
    seen = set()
    for n in graph.nodes:
        if n.name in seen:
            raise GraphError(f"node name {n.name!r} is used twice")
        seen.add(n.name)


def control_character(text: str) -> str:
    """The first control character of `text` (C0, DEL or C1, which terminals and C tools read
    as commands or string ends) as U+XXXX, or "" when there is none.

    Names and attribute strings are refused rather than escaped wherever they are shown: a NUL
    truncates a name in C, a carriage return ends a line for GCC, an ESC drives the terminal.
    A lone UTF-16 surrogate (from a JSON escape) is refused too: no file can hold it as UTF-8.

    >>> control_character("conv1/relu"), control_character("a\\rb"), control_character("\\udc80")
    ('', 'U+000D', 'U+DC80 (a lone surrogate)')
    """
    m = _CONTROL.search(text)
    if not m:
        return ""
    code = ord(m.group())
    return f"U+{code:04X}" + (" (a lone surrogate)" if code >= 0xD800 else "")


_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")


def _check_acyclic(graph: Graph) -> None:
    if _acyclic(graph):
        return
    import networkx as nx

    g = to_networkx(graph)
    try:
        cycle = nx.find_cycle(g)
    except nx.NetworkXNoCycle:
        return
    path = " -> ".join([u for u, _v, *_ in cycle] + [cycle[0][0]])
    raise GraphError(f"graph contains a cycle: {path}")


def _acyclic(graph: Graph) -> bool:
    """True when the node-level dataflow has no cycle (Kahn's algorithm; a cycle is then found
    and named by networkx, which is slower to import than this is to run)."""
    producer: dict[str, int] = {}
    for i, n in enumerate(graph.nodes):
        for o in n.outputs:
            producer.setdefault(o, i)
    succs: list[set[int]] = [set() for _ in graph.nodes]
    for i, n in enumerate(graph.nodes):
        for t in n.inputs:
            if t in producer:
                succs[producer[t]].add(i)
    waiting = [0] * len(succs)
    for out in succs:
        for j in out:
            waiting[j] += 1
    ready = [i for i, w in enumerate(waiting) if w == 0]
    done = 0
    while ready:
        i = ready.pop()
        done += 1
        for j in succs[i]:
            waiting[j] -= 1
            if waiting[j] == 0:
                ready.append(j)
    return done == len(succs)


def _check_node_types(graph: Graph, n: Node, inferred: dict[tuple, list[TensorType]]) -> None:
    tensors = graph.tensor_map
    ins = [TensorType(tensors[i].shape, tensors[i].dtype) for i in n.inputs]
    alike = (n.op, tuple(ins), repr(n.attrs))
    outs = inferred.get(alike)
    if outs is None:
        try:
            opdef = get_op(n.op)
            opdef.check_arity(len(n.inputs))
            outs = inferred[alike] = opdef.infer(ins, opdef.normalize_attrs(n.attrs))
        except OpError as e:
            raise GraphError(f"node {n.name!r}: {e}") from None
    if len(outs) != len(n.outputs):
        raise GraphError(f"node {n.name!r}: {n.op} produces {len(outs)} output(s), "
                         f"{len(n.outputs)} declared")
    for name, t in zip(n.outputs, outs, strict=True):
        d = tensors[name]
        if tuple(d.shape) != tuple(t.shape):
            raise GraphError(f"node {n.name!r}: output tensor {name!r} is declared with shape "
                             f"{list(d.shape)} but {n.op} gives {list(t.shape)}")
        if d.dtype != t.dtype:
            raise GraphError(f"node {n.name!r}: output tensor {name!r} is declared {d.dtype} "
                             f"but {n.op} gives {t.dtype}")


def to_networkx(graph: Graph) -> nx.DiGraph:
    """Node-level dataflow view: an edge u -> v for every tensor u writes and v reads.

    Edge attribute `tensors` lists those tensors; node attribute `op` is the op type.

    >>> from planner.ir.graph import Graph, Node, Tensor
    >>> g = Graph(tensors=(Tensor(name="x", shape=(1,), role="input"), Tensor(name="y", shape=(1,)),
    ...     Tensor(name="z", shape=(1,))), nodes=(Node(name="a", op="Relu", inputs=("x",),
    ...     outputs=("y",)), Node(name="b", op="Relu", inputs=("y",), outputs=("z",))))
    >>> list(to_networkx(g).edges)
    [('a', 'b')]
    """
    import networkx as nx

    g = nx.DiGraph()
    producer: dict[str, str] = {}
    for n in graph.nodes:
        g.add_node(n.name, op=n.op)
        for o in n.outputs:
            producer.setdefault(o, n.name)
    for n in graph.nodes:
        for i in n.inputs:
            if i in producer:
                u = producer[i]
                if g.has_edge(u, n.name):
                    g.edges[u, n.name]["tensors"].append(i)
                else:
                    g.add_edge(u, n.name, tensors=[i])
    return g
