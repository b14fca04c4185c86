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

from collections.abc import Sequence

from planner.graph.ir import Graph


def predecessors(graph: Graph) -> tuple[tuple[int, ...], ...]:
    """Per node index, the indices of the nodes that must finish before it starts (ascending)."""
    index = {n.name: i for i, n in enumerate(graph.nodes)}
    producer = {out: index[n.name] for n in graph.nodes for out in n.outputs}
    readers: dict[str, list[int]] = {}
    for i, n in enumerate(graph.nodes):
        for t in n.inputs:
            readers.setdefault(t, []).append(i)
    preds: list[set[int]] = [set() for _ in graph.nodes]
    for i, n in enumerate(graph.nodes):
        preds[i].update(producer[t] for t in n.inputs if t in producer)
        for out in n.outputs:
            old = graph.tensor_map[out].updates if out in graph.tensor_map else None
            if old is not None:
                preds[i].update(r for r in readers.get(old, ()) if r != i)
    for i in range(len(preds)):
        preds[i].discard(i)
    return tuple(tuple(sorted(p)) for p in preds)


def successors(preds: Sequence[Sequence[int]]) -> tuple[tuple[int, ...], ...]:
    """The reverse of `predecessors`."""
    succ: list[list[int]] = [[] for _ in preds]
    for i, ps in enumerate(preds):
        for p in ps:
            succ[p].append(i)
    return tuple(tuple(s) for s in succ)
