"""What must run before what: data dependencies plus the in-place update rule.

A node depends on the producers of its inputs, and a node writing `updates=<p>` (the next value
of a param or state tensor, written over p's bytes) also depends on every other reader of p, so
nobody reads the overwritten value.

Example:
    >>> from planner.graph.builder import GraphBuilder
    >>> b = GraphBuilder("t")
    >>> y = b.op("Relu", [b.input("x", (2,))], name="a")
    >>> z = b.op("Neg", [y], name="b")
    >>> predecessors(b.build(outputs=[z]))
    ((), (0,))
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from planner.ir.graph import Graph


def predecessors(graph: Graph) -> tuple[tuple[int, ...], ...]:
    """Per node index, the indices of the nodes that must finish before it starts (ascending)."""
    producer = {out: i for i, n in enumerate(graph.nodes) for out in n.outputs}
    readers: dict[str, list[int]] = {}
    for i, n in enumerate(graph.nodes):
        for t in n.inputs:
            readers.setdefault(t, []).append(i)
    tensors = graph.tensor_map
    preds: list[tuple[int, ...]] = []
    for i, n in enumerate(graph.nodes):
        before = {producer[t] for t in n.inputs if t in producer}
        for out in n.outputs:
            tensor = tensors.get(out)
            if tensor is not None and tensor.updates is not None:
                before.update(readers.get(tensor.updates, ()))
        before.discard(i)
        preds.append(tuple(sorted(before)))
    return tuple(preds)


def successors(preds: Sequence[Sequence[int]]) -> tuple[tuple[int, ...], ...]:
    """The reverse of `predecessors`."""
    succ: list[list[int]] = [[] for _ in preds]
    for i, ps in enumerate(preds):
        for p in ps:
            succ[p].append(i)
    return tuple(tuple(s) for s in succ)


def in_dependency_order(graph: Graph) -> Graph:
    """`graph` with its nodes in an order every `predecessors` edge points forward in, as close
    to the order they were given in as that allows (each node as early as its position among
    the ready ones says): a rewrite that inserts a node whose outputs nodes before it read
    (data parallelism's all-reduce after a bucket's last gradient) moves those readers after
    it, whatever order the front end's passes left them in. The graph is returned as given
    where it already is in order.

    >>> from planner.graph.builder import GraphBuilder
    >>> b = GraphBuilder("t")
    >>> y = b.op("Relu", [b.input("x", (2,))], name="a")
    >>> z = b.op("Neg", [y], name="b")
    >>> g = b.build(outputs=[z])
    >>> swapped = g.model_copy(update={"nodes": g.nodes[::-1]})
    >>> [n.name for n in in_dependency_order(swapped).nodes]
    ['a', 'b']
    """
    preds = predecessors(graph)
    if all(p < i for i, ps in enumerate(preds) for p in ps):
        return graph
    waiting = [len(ps) for ps in preds]
    after = successors(preds)
    ready = [i for i, w in enumerate(waiting) if not w]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for s in after[i]:
            waiting[s] -= 1
            if not waiting[s]:
                heapq.heappush(ready, s)
    if len(order) < len(preds):
        return graph  # a cycle: left for check_graph to name
    return graph.model_copy(update={"nodes": tuple(graph.nodes[i] for i in order)})
