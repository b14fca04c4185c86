"""Transposes folded into the GEMMs around them: attention's head splits and merges become
strides of MatMul's operands and result (planner/ops/matmul.py `perm_a` / `perm_b` /
`perm_y`), not copies.

Multi-head attention moves every head's rows twice per layer and direction: q, k and v are
split (batch, seq, heads, width) -> (batch, heads, seq, width) and the context merged back,
and the backward pass transposes each of their gradients again, 8 Transposes per layer, each
a full read and write of an activation. oneDNN's brgemm matmul and cuBLAS read strided
operands and write a strided result about as fast as packed ones, as long as each matrix keeps
a unit-stride axis (and, for oneDNN, the batch axes stay outermost), so the copies can go:

    x --Transpose(p)--> t --MatMul--> y            x --MatMul(perm_a = p . perm_a)--> y
    a --MatMul--> t --Transpose(p)--> y            a --MatMul(perm_y = perm_y . p)--> y

`fold_transposes` rewrites
  - a Transpose whose every reader is a MatMul (as operand a or b) and whose output is not a
    graph output: each reader takes the Transpose's input through the composed permutation,
    and the Transpose goes;
  - a Transpose whose one reader is a Reshape that only splits axes, itself read only by
    MatMuls ((batch, seq, groups x heads, width) -> (batch, groups, heads, seq, width)): the
    Reshape splits the Transpose's input instead, and the MatMuls read its result through the
    permutation that moves the split axes;
  - then a Transpose of a MatMul's result that nothing else reads (and that is not a graph
    output): the MatMul writes the Transpose's output through the composed `perm_y`, its own
    output goes, and so does the Transpose;
  - a Transpose of a Reshape that only merges axes of a MatMul's result (the gradients of the
    split above): the MatMul writes the permuted unmerged axes, the Reshape merges them into
    the Transpose's output;
each only where the composed permutation keeps MatMul's unit-stride rule (an operand's last
axis among its view's matrix axes, the product's rows contiguous) and its batch axes outermost
(what oneDNN's fast matmul takes, `_batch_outermost`: nn.MultiheadAttention's seq-first heads,
(seq, batch x heads, width) read as (batch x heads, seq, width), stay Transposes), where no
other node reads what the rewrite changes; a MatMul with a third input is left alone. Node and
tensor names are kept (none is made up) and nodes keep their order: a folded result's tensor
record takes the place of the MatMul's old output; a Reshape moved across a Transpose keeps its
name, and its output (or the MatMul's, for a merge) takes the permuted shape.

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
from dataclasses import dataclass, field

from planner.ir.graph import Graph, Node, Tensor

_OPERANDS = ("perm_a", "perm_b")


def fold_transposes(graph: Graph) -> Graph:
    """The graph with Transposes next to MatMuls folded into them (see above); the same graph
    object when there is none to fold."""
    f = _Folding(graph, {n.name: n for n in graph.nodes})
    # (a Transpose writing a persistent tensor's next value is an update: left alone)
    transposes = [t for t in graph.nodes
                  if t.op == "Transpose" and graph.tensor(t.outputs[0]).updates is None]
    for t in transposes:
        if t.outputs[0] not in graph.outputs:
            f.into_readers(t) or f.through_split(t)
    for t in transposes:
        if t.name not in f.gone:
            f.into_producer(t) or f.through_merge(t)
    if not f.gone:
        return graph
    tensors = tuple(f.records.get(rec.name, rec) for rec in graph.tensors)
    kept = tuple(f.nodes[n.name] for n in graph.nodes if n.name not in f.gone)
    # A new record, not model_copy (that would carry the old graph's cached lookups).
    return Graph(**{**{k: getattr(graph, k) for k in Graph.model_fields},
                    "tensors": tuple(t for t in tensors if t is not None), "nodes": kept})


@dataclass
class _Folding:
    """The rewrite under way: current nodes by name, the nodes gone, and tensor records
    replaced (None: gone) by name, each record keeping its place in the graph's list."""

    graph: Graph
    nodes: dict[str, Node]
    gone: set[str] = field(default_factory=set)
    records: dict[str, Tensor | None] = field(default_factory=dict)

    def only_reader(self, tensor: str) -> Node | None:
        """The one node reading `tensor` (not a graph output), or None."""
        readers = self.graph.consumers.get(tensor, ())
        if tensor in self.graph.outputs or len({r.name for r in readers}) != 1:
            return None
        return self.nodes[readers[0].name]

    def fold_readers(self, tensor: str, source: str, perm: Sequence[int]) -> bool:
        """Every reader of `tensor`, all MatMuls, reading `source` through `perm` instead."""
        readers = self.graph.consumers.get(tensor, ())
        folded = [_fold_input(self.nodes[r.name], tensor, source, perm) for r in readers]
        if not readers or any(x is None for x in folded):
            return False
        for r, x in zip(readers, folded, strict=True):
            self.nodes[r.name] = x
        return True

    def into_readers(self, t: Node) -> bool:
        if not self.fold_readers(t.outputs[0], t.inputs[0], t.attrs["perm"]):
            return False
        self.gone.add(t.name)
        self.records[t.outputs[0]] = None
        return True

    def through_split(self, t: Node) -> bool:
        r = self.only_reader(t.outputs[0])
        if r is None or r.op != "Reshape":
            return False
        out = self.graph.tensor(r.outputs[0])
        groups = _split_groups(self.graph.tensor(t.outputs[0]).shape, out.shape)
        if groups is None:
            return False
        shape, perm = _split_first(t.attrs["perm"], groups)
        if not self.fold_readers(out.name, out.name, perm):
            return False
        self.nodes[r.name] = r.model_copy(update={"inputs": t.inputs,
                                                  "attrs": {**r.attrs, "shape": shape}})
        self.records[out.name] = out.model_copy(update={"shape": tuple(shape)})
        self.records[t.outputs[0]] = None
        self.gone.add(t.name)
        return True

    def into_producer(self, t: Node) -> bool:
        src = t.inputs[0]
        p = self.graph.producer.get(src)
        if p is None or self.only_reader(src) is None:
            return False
        folded = _fold_output(self.nodes[p.name], t.attrs["perm"])
        if folded is None:
            return False
        self.nodes[p.name] = folded.model_copy(update={"outputs": t.outputs})
        self.records[src] = self.graph.tensor(t.outputs[0])
        self.records[t.outputs[0]] = None
        self.gone.add(t.name)
        return True

    def through_merge(self, t: Node) -> bool:
        r = self.graph.producer.get(t.inputs[0])
        if r is None or r.op != "Reshape" or self.only_reader(t.inputs[0]) is None:
            return False
        p = self.graph.producer.get(r.inputs[0])
        if p is None or self.only_reader(r.inputs[0]) is None:
            return False
        z = self.graph.tensor(r.inputs[0])
        groups = _split_groups(self.graph.tensor(t.inputs[0]).shape, z.shape)
        if groups is None:
            return False
        shape, perm = _unmerged(t.attrs["perm"], groups)
        folded = _fold_output(self.nodes[p.name], perm)
        if folded is None:
            return False
        out = self.graph.tensor(t.outputs[0])
        self.nodes[p.name] = folded
        self.nodes[r.name] = self.nodes[r.name].model_copy(
            update={"outputs": t.outputs, "attrs": {**r.attrs, "shape": list(out.shape)}})
        self.records[z.name] = z.model_copy(update={"shape": tuple(shape)})
        self.records[t.inputs[0]] = out
        self.records[t.outputs[0]] = None
        self.gone.add(t.name)
        return True


def _split_groups(shape: Sequence[int], target: Sequence[int]) -> list[list[int]] | None:
    """When reshaping `shape` into `target` only splits axes: per axis of `shape`, the sizes
    of the consecutive `target` axes it becomes; None otherwise (size-1 axes, being ambiguous,
    count as otherwise).

    >>> _split_groups((32, 65, 32), (8, 4, 65, 32))
    [[8, 4], [65], [32]]
    """
    if 1 in shape or 1 in target:
        return None
    groups, j = [], 0
    for d in shape:
        group, size = [], 1
        while size < d and j < len(target):
            group.append(target[j])
            size *= target[j]
            j += 1
        if size != d:
            return None
        groups.append(group)
    return groups if j == len(target) else None


def _split_first(perm: Sequence[int], groups: Sequence[Sequence[int]]) -> tuple[list[int],
                                                                               list[int]]:
    """transpose(x, perm) split by `groups` (per axis of the transposed tensor) is
    transpose(x split alike, the returned perm): (the split shape of x, that perm).

    >>> _split_first([1, 0, 2], [[8, 4], [65], [32]])  # (65, 32, 32) -> (8, 4, 65, 32)
    ([65, 8, 4, 32], [1, 2, 0, 3])
    """
    where = [perm.index(a) for a in range(len(perm))]  # x's axis a is transposed axis where[a]
    shape = [d for a in range(len(perm)) for d in groups[where[a]]]
    start, first = 0, []
    for a in range(len(perm)):
        first.append(start)
        start += len(groups[where[a]])
    return shape, [first[a] + j for a in perm for j in range(len(groups[perm.index(a)]))]


def _unmerged(perm: Sequence[int], groups: Sequence[Sequence[int]]) -> tuple[list[int],
                                                                            list[int]]:
    """transpose(u, perm) where u merges z's axes by `groups` (per axis of u) is the same
    merge of transpose(z, the returned perm): (that transpose's shape, its perm).

    >>> _unmerged([1, 0, 2], [[8, 4], [65], [32]])  # (8, 4, 65, 32) -> (32, 65, 32) -> T
    ([65, 8, 4, 32], [2, 0, 1, 3])
    """
    first = [sum(len(g) for g in groups[:a]) for a in range(len(groups))]
    return ([d for a in perm for d in groups[a]],
            [first[a] + j for a in perm for j in range(len(groups[a]))])


def _fold_input(reader: Node, tensor: str, source: str, perm: Sequence[int]) -> Node | None:
    """`reader` reading `source` through `perm` where it read `tensor`, or None if it cannot."""
    if reader.op != "MatMul" or len(reader.inputs) != 2:
        return None
    attrs, inputs = dict(reader.attrs), list(reader.inputs)
    for k, key in enumerate(_OPERANDS):
        if inputs[k] != tensor:
            continue
        view = _compose(perm, attrs.get(key))
        if len(view) - 1 not in view[-2:] or not _batch_outermost(view):
            return None
        inputs[k] = source
        _set(attrs, key, view)
    return reader.model_copy(update={"inputs": tuple(inputs), "attrs": dict(sorted(attrs.items()))})


def _fold_output(producer: Node, perm: Sequence[int]) -> Node | None:
    """`producer`, a MatMul, writing its result through `perm` too, or None if it cannot."""
    if producer.op != "MatMul" or len(producer.inputs) != 2:
        return None
    composed = _compose(producer.attrs.get("perm_y"), perm)
    if composed[-1] != len(composed) - 1 or not _batch_outermost(composed):
        return None
    attrs = dict(producer.attrs)
    _set(attrs, "perm_y", composed)
    return producer.model_copy(update={"attrs": dict(sorted(attrs.items()))})


def _batch_outermost(perm: Sequence[int]) -> bool:
    """Whether a view through `perm` keeps its first (batch) axis outermost in memory, as
    oneDNN 3.2's brgemm matmul needs: it takes (batch, heads, seq, width) read from (batch,
    seq, heads, width) bytes, but a view whose matrix rows are outermost, such as
    nn.MultiheadAttention's (seq, batch x heads, width) read as (batch x heads, seq, width),
    goes to its gemm:jit matmul, which loses more than the Transpose costs (ViT's scores GEMM
    81 -> 127 us against a 15 us Transpose,
    bench/results/2026-11-24-transformer-issue25.md). Matrices (rank 2) have no batch axis."""
    return len(perm) <= 2 or perm[0] == 0


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
