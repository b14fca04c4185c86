"""Transposes folded into the GEMMs around them: attention's head splits and merges become
strides of MatMul's operands and result (planner/ops/matmul.py `perm_a` / `perm_b` /
`perm_y`), not copies.

Multi-head attention moves every head's rows twice per layer and direction: q, k and v are
split (batch, seq, heads, width) -> (batch, heads, seq, width) and the context merged back,
and the backward pass transposes each of their gradients again, 8 Transposes per layer, each
a full read and write of an activation. oneDNN's matmul and cuBLAS read strided operands and
write a strided result at the speed of packed ones, as long as each matrix keeps a unit-stride
axis, so the copies can go:

    x --Transpose(p)--> t --MatMul--> y            x --MatMul(perm_a = p . perm_a)--> y
    a --MatMul--> t --Transpose(p)--> y            a --MatMul(perm_y = perm_y . p)--> y

`fold_transposes` rewrites
  - a Transpose whose every reader is a MatMul (as operand a or b) and whose output is not a
    graph output: each reader takes the Transpose's input through the composed permutation,
    and the Transpose goes;
  - then a Transpose of a MatMul's result that nothing else reads (and that is not a graph
    output): the MatMul writes the Transpose's output through the composed `perm_y`, its own
    output goes, and so does the Transpose;
each only where the composed permutation keeps MatMul's unit-stride rule (an operand's last
axis among its view's matrix axes, the product's rows contiguous), and a MatMul with a third
input is left alone. Node and tensor names are kept (none is made up); nodes keep their
order, a folded result's tensor record takes the place of the MatMul's old output.

Example (one attention head block: q k^T over split heads, the context merged back):
    >>> from planner.graph.builder import GraphBuilder
    >>> b = GraphBuilder("attention")
    >>> x = b.input("x", (2, 5, 3, 4))                    # (batch, seq, heads, width)
    >>> q = b.op("Transpose", [x], {"perm": [0, 2, 1, 3]}, name="q")
    >>> s = b.op("MatMul", [q, q], {"transpose_b": True}, name="scores")
    >>> c = b.op("MatMul", [s, q], name="context")
    >>> y = b.op("Transpose", [c], {"perm": [0, 2, 1, 3]}, name="merge")
    >>> g = fold_transposes(b.build(outputs=[b.op("Relu", [y], name="out")]))
    >>> [(n.name, n.inputs, n.outputs) for n in g.nodes]  # doctest: +NORMALIZE_WHITESPACE
    [('scores', ('x', 'x'), ('scores',)), ('context', ('scores', 'x'), ('merge',)),
     ('out', ('merge',), ('out',))]
    >>> {k: v for k, v in g.node_map["context"].attrs.items() if k.startswith("perm")}
    {'perm_b': [0, 2, 1, 3], 'perm_y': [0, 2, 1, 3]}
"""

from __future__ import annotations

from collections.abc import Sequence

from planner.graph.ir import Graph, Node

_OPERANDS = ("perm_a", "perm_b")


def fold_transposes(graph: Graph) -> Graph:
    """The graph with Transposes next to MatMuls folded into them (see above); the same graph
    object when there is none to fold."""
    nodes = {n.name: n for n in graph.nodes}
    gone_nodes: set[str] = set()
    gone_tensors: set[str] = set()
    renamed: dict[str, str] = {}  # a MatMul's old output -> the Transpose output it now writes
    for t in graph.nodes:
        if t.op != "Transpose" or t.outputs[0] in graph.outputs:
            continue
        readers = graph.consumers.get(t.outputs[0], ())
        folded = [_fold_input(nodes[r.name], t) for r in readers]
        if readers and all(f is not None for f in folded):
            for r, f in zip(readers, folded, strict=True):
                nodes[r.name] = f
            gone_nodes.add(t.name)
            gone_tensors.add(t.outputs[0])
    for t in graph.nodes:
        if t.op != "Transpose" or t.name in gone_nodes:
            continue
        src = t.inputs[0]
        p = graph.producer.get(src)
        if (p is None or src in graph.outputs
                or [c.name for c in graph.consumers.get(src, ())] != [t.name]):
            continue
        folded = _fold_output(nodes[p.name], t)
        if folded is not None:
            nodes[p.name] = folded
            gone_nodes.add(t.name)
            renamed[src] = t.outputs[0]
    if not gone_nodes:
        return graph
    moved = set(renamed.values())
    tensors = tuple(graph.tensor(renamed[rec.name]) if rec.name in renamed else rec
                    for rec in graph.tensors
                    if rec.name not in gone_tensors and rec.name not in moved)
    kept = tuple(nodes[n.name] for n in graph.nodes if n.name not in gone_nodes)
    # A new record, not model_copy (that would carry the old graph's cached lookups).
    return Graph(**{**{f: getattr(graph, f) for f in Graph.model_fields},
                    "tensors": tensors, "nodes": kept})


def _fold_input(reader: Node, t: Node) -> Node | None:
    """`reader` reading `t`'s input through its permutation, or None if it cannot."""
    if reader.op != "MatMul" or len(reader.inputs) != 2:
        return None
    attrs, inputs = dict(reader.attrs), list(reader.inputs)
    for k, key in enumerate(_OPERANDS):
        if inputs[k] != t.outputs[0]:
            continue
        perm = _compose(t.attrs["perm"], attrs.get(key))
        if len(perm) - 1 not in perm[-2:]:  # the operand's rows would lose their unit stride
            return None
        inputs[k] = t.inputs[0]
        _set(attrs, key, perm)
    return reader.model_copy(update={"inputs": tuple(inputs), "attrs": dict(sorted(attrs.items()))})


def _fold_output(producer: Node, t: Node) -> Node | None:
    """`producer`, a MatMul, writing `t`'s output through the composed permutation, or None."""
    if producer.op != "MatMul" or len(producer.inputs) != 2:
        return None
    perm = _compose(producer.attrs.get("perm_y"), t.attrs["perm"])
    if perm[-1] != len(perm) - 1:  # the product's rows would not be contiguous
        return None
    attrs = dict(producer.attrs)
    _set(attrs, "perm_y", perm)
    return producer.model_copy(update={"outputs": t.outputs, "attrs": dict(sorted(attrs.items()))})


def _compose(first: Sequence[int] | None, then: Sequence[int] | None) -> list[int]:
    """The permutation of transpose(transpose(x, first), then); None is the identity."""
    if first is None:
        return list(then) if then is not None else []
    return list(first) if then is None else [first[i] for i in then]


def _set(attrs: dict, key: str, perm: list[int]) -> None:
    """Set a permutation attr, leaving the identity out (absent means identity)."""
    if perm == list(range(len(perm))):
        attrs.pop(key, None)
    else:
        attrs[key] = perm
