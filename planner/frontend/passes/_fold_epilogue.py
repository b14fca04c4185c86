"""The rewrite fold_bias.py and fold_conv_bias.py share: a layer's BiasAdd and Relu into the op
that computes its product.

`fold_epilogues(graph, op, bias_axis)` rewrites every chain `op` [-> BiasAdd] [-> Relu] (at
least one of the two) of a two-input `op` without an activation, where the BiasAdd adds a bias
of its own over axis `bias_axis(rank)` of its input, each tensor but the last is read by the
next op alone (as its first input) and is no graph output, and every tensor is float32: the op
takes the bias as its third input and `activation: relu` (planner/ops/fused_activation.py), and
writes the chain's last tensor, in the last op's place in the node order (where the bias is
computed); the other ops and the intermediate tensors go. The why of each rule (float32 only,
after autodiff) is in the two folds' docstrings.

Example:
    >>> from planner.graph.builder import GraphBuilder
    >>> b = GraphBuilder("layer")
    >>> y = b.op("MatMul", [b.input("x", (4, 3)), b.param("w", (3, 2))], name="fc")
    >>> y = b.op("Relu", [y], name="relu")
    >>> g = fold_epilogues(b.build(outputs=[y]), "MatMul", lambda rank: rank - 1)
    >>> [(n.name, n.inputs, n.outputs, n.attrs["activation"]) for n in g.nodes]
    [('fc', ('x', 'w'), ('relu',), 'relu')]
"""

from __future__ import annotations

from collections.abc import Callable

from planner.ir.graph import Graph, Node


def fold_epilogues(graph: Graph, op: str, bias_axis: Callable[[int], int]) -> Graph:
    """The graph with each foldable chain (see the module docstring) headed by an `op` inside
    it; `bias_axis(rank)` is the axis a foldable BiasAdd adds its bias over."""
    chains = [c for n in graph.nodes if (c := _chain(graph, n, op, bias_axis)) is not None]
    if not chains:
        return graph
    last = {c[-1].name: c for c in chains}
    gone = {n.name for c in chains for n in c[:-1]}
    gone_tensors = {n.outputs[0] for c in chains for n in c[:-1]}
    nodes = []
    for n in graph.nodes:
        if n.name in last:
            nodes.append(_folded(last[n.name]))
        elif n.name not in gone:
            nodes.append(n)
    return graph.model_copy(update={"nodes": tuple(nodes),
                                    "tensors": tuple(t for t in graph.tensors
                                                     if t.name not in gone_tensors)})


def _folded(chain: list[Node]) -> Node:
    head, rest = chain[0], chain[1:]
    bias = tuple(n.inputs[1] for n in rest if n.op == "BiasAdd")
    attrs = dict(head.attrs)
    if rest[-1].op == "Relu":
        attrs["activation"] = "relu"
    # written over: the head node now lands where the chain's last op was
    return head.model_copy(update={"inputs": (*head.inputs, *bias), "attrs": attrs,
                                   "outputs": rest[-1].outputs})


def _chain(graph: Graph, head: Node, op: str, bias_axis: Callable[[int], int]
           ) -> list[Node] | None:
    """[head, BiasAdd?, Relu?] when `head` starts a foldable chain, else None."""
    if (head.op != op or len(head.inputs) != 2
            or (head.attrs.get("activation") or "none") != "none"):
        return None
    chain = [head]
    nxt = _sole_reader(graph, head)
    if nxt is not None and nxt.op == "BiasAdd" and _adds_over(graph, nxt, bias_axis):
        chain.append(nxt)
        nxt = _sole_reader(graph, nxt)
    if nxt is not None and nxt.op == "Relu":
        chain.append(nxt)
    if len(chain) == 1 or any(graph.tensor(t).dtype != "float32"
                              for n in chain for t in (*n.inputs, *n.outputs)):
        return None
    return chain


def _sole_reader(graph: Graph, node: Node) -> Node | None:
    """The one node reading `node`'s one output, when that output is no graph output."""
    if len(node.outputs) != 1 or node.outputs[0] in graph.outputs:
        return None
    readers = graph.consumers[node.outputs[0]]
    return readers[0] if len(readers) == 1 and readers[0].inputs[0] == node.outputs[0] \
        and node.outputs[0] not in readers[0].inputs[1:] else None


def _adds_over(graph: Graph, add: Node, bias_axis: Callable[[int], int]) -> bool:
    """Whether BiasAdd `add` adds its bias over the axis the head op takes a bias over."""
    rank = len(graph.tensor(add.inputs[0]).shape)
    return add.attrs.get("axis", 1) % rank == bias_axis(rank)
