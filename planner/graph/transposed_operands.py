"""Shared transposed GEMM operands copied once: an RNN's recurrent weight read as W^T per step.

A MatMul with transpose_b reads B as a strided view; oneDNN's CPU GEMM then packs (copies)
the transposed B into its own layout on every call. Where A has few rows, that copy is most of
the GEMM: an unrolled LSTM's recurrent GEMM h_t U^T, (8, 128) x (512, 128)^T, took 16.8 us
with U^T as a view and about 0.6 of that with a row-major copy of U^T (oneDNN 3.2, AVX-512,
one thread; bench/results/2026-11-24-transformer-issue25.md), and it runs once per step, 32
times per direction on the same U.
One Transpose of U before the first such GEMM turns all of them into plain GEMMs for one pass
over U. (The backward-data GEMMs dY_t U read U without a transpose and keep reading it.)

`copy_transposed_operands` rewrites, for every tensor B read as the transposed B of at least
MIN_READERS rank-2 MatMuls whose A has at most MAX_ROWS rows (not transposed): a Transpose
`<B>/transposed` (perm (1, 0)) goes right before the first of them, and they read its output
with transpose_b off. Nothing else changes. For CPU executors only (a GPU's GEMM reads a
transposed operand at no cost): planning runs it on a CPU's training graphs
(planner/graph/for_cores.py).

Example:
    >>> from planner.graph.builder import GraphBuilder
    >>> b = GraphBuilder("steps")
    >>> u = b.param("u", (4, 4), init="glorot")
    >>> h = b.input("h0", (2, 4))
    >>> for t in range(3):
    ...     h = b.op("MatMul", [h, u], {"transpose_b": True}, name=f"step{t}")
    >>> g = copy_transposed_operands(b.build(outputs=[h]))
    >>> [(n.name, n.op, n.inputs, n.attrs.get("transpose_b")) for n in g.nodes]
    ... # doctest: +NORMALIZE_WHITESPACE
    [('u/transposed', 'Transpose', ('u',), None),
     ('step0', 'MatMul', ('h0', 'u/transposed'), False),
     ('step1', 'MatMul', ('step0', 'u/transposed'), False),
     ('step2', 'MatMul', ('step1', 'u/transposed'), False)]
"""

from __future__ import annotations

from planner.graph.ir import Graph, Node, Tensor

# Readers that make the copy pay: each saves about a copy of B, the Transpose costs one.
MIN_READERS = 2
# GEMMs this short are dominated by packing B (an RNN's batch); taller ones amortize it.
MAX_ROWS = 64


def copy_transposed_operands(graph: Graph) -> Graph:
    """The graph with each shared transposed B of short GEMMs copied once (see above)."""
    readers: dict[str, list[Node]] = {}
    for n in graph.nodes:
        if _short_transposed_gemm(graph, n):
            readers.setdefault(n.inputs[1], []).append(n)
    shared = {b: ns for b, ns in readers.items() if len(ns) >= MIN_READERS}
    if not shared:
        return graph
    first = {ns[0].name: b for b, ns in shared.items()}
    rewired = {n.name for ns in shared.values() for n in ns}
    copies = {b: _fresh(graph, f"{b}/transposed") for b in shared}
    nodes: list[Node] = []
    for n in graph.nodes:
        if n.name in first:
            b = first[n.name]
            nodes.append(Node(name=copies[b], op="Transpose", inputs=(b,), outputs=(copies[b],),
                              attrs={"perm": [1, 0]}))
        if n.name in rewired:
            n = n.model_copy(update={"inputs": (n.inputs[0], copies[n.inputs[1]], *n.inputs[2:]),
                                     "attrs": {**n.attrs, "transpose_b": False}})
        nodes.append(n)
    tensors = []
    for t in graph.tensors:
        tensors.append(t)
        if t.name in copies:
            tensors.append(Tensor(name=copies[t.name], shape=t.shape[::-1], dtype=t.dtype,
                                  role="grad" if t.role == "grad" else "activation"))
    return graph.model_copy(update={"nodes": tuple(nodes), "tensors": tuple(tensors)})


def _short_transposed_gemm(graph: Graph, n: Node) -> bool:
    """`n` is a rank-2 MatMul A B^T (A not transposed, no permuted views) with at most MAX_ROWS
    rows of A."""
    if (n.op != "MatMul" or not n.attrs.get("transpose_b") or n.attrs.get("transpose_a")
            or any(n.attrs.get(p) for p in ("perm_a", "perm_b", "perm_y"))):
        return False
    a, b = (graph.tensor(i) for i in n.inputs[:2])  # a folded bias is the third
    return len(a.shape) == 2 and len(b.shape) == 2 and a.shape[0] <= MAX_ROWS


def _fresh(graph: Graph, name: str) -> str:
    """`name`, or `name`_k for the first k that no tensor or node of the graph uses."""
    taken = set(graph.tensor_map) | set(graph.node_map)
    k, fresh = 0, name
    while fresh in taken:
        k += 1
        fresh = f"{name}_{k}"
    return fresh
