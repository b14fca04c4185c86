"""Batched weight gradients: a weight read by many MatMuls gets its gradient from a few GEMMs.

An RNN reads its weight once per time step, so reverse mode gives one weight-gradient GEMM per
step, dW_t = A_t^T dY_t, and an AddN of all of them. Each small GEMM writes a whole weight-sized
partial and the AddN reads them all back: for the PTB LSTM (35 steps, a 1300 x 2600 weight) that
is ~1 GB of memory traffic per layer, and a wide AddN that can only start after the last step.
Steps can share one GEMM over their concatenated rows (Appleyard et al. 2016; cuDNN's RNN
computes its weight gradient so):

    sum_t A_t^T dY_t  =  concat_t(A_t)^T  concat_t(dY_t)        (A_t: K_t x M, dY_t: K_t x N)

One GEMM over all n steps would wait for the last step's dY, putting the whole GEMM after the
recurrence; n GEMMs put an n-way sum there. Chunks of ceil(sqrt(n)) consecutive steps balance the
two: each chunk's GEMM runs as soon as its last dY exists, during the recurrence, and what is
left after it is one chunk's GEMM and a sum of about sqrt(n) partials (n = 35: 6 GEMMs of 6 steps
and a 6-way AddN instead of 35 GEMMs and a 35-way AddN).

Chunks pay only where a core the recurrences leave idle runs them: each recurrence (one per sum,
e.g. a BiLSTM's two directions) is a chain of small dependent ops that keeps about one core busy.
On a CPU with no more cores than sums, nothing can overlap the chunks, and they only add work
(row Concats per chunk, weight-sized partials written and summed back: ~0.6 ms of a ~5 ms
BiLSTM step on one or two cores,
bench/results/2026-11-23-transformer-issue25.md), so planning joins every sum's chunks into
one GEMM over all steps (planner/step/for_cores.py: the graph itself does not know its cores).

`batch_weight_gradients` rewrites every AddN (role grad) whose inputs all come from such
MatMuls (transpose_a, not transpose_b, no permuted view, rank 2, one dtype, each read by nothing
but that AddN and none a graph output).
Chunk c's GEMM, named `<sum>/gemm<c>`, takes the place of the chunk's last MatMul, its operands
`<sum>/gemm<c>/rows_a` and `.../rows_b` just before it; the sum keeps its node name and output
tensor (it is the GEMM itself when there is one chunk), so the updates reading it are untouched.
The rest of the graph keeps its order.

Example:
    >>> from planner.graph.builder import GraphBuilder
    >>> from planner.frontend.autodiff import Optimizer, make_training_graph
    >>> b = GraphBuilder("tied")
    >>> x1, x2, y = b.input("x1", (4, 3)), b.input("x2", (4, 3)), b.input("y", (4, 2))
    >>> w = b.param("w", (3, 2), init="glorot")
    >>> s = b.op("Add", [b.op("MatMul", [x1, w]), b.op("MatMul", [x2, w])])
    >>> g = make_training_graph(b.build(outputs=[b.op("MSE", [s, y], name="loss")]),
    ...                         Optimizer(kind="sgd"))
    >>> [(n.name, n.op) for n in g.nodes if n.name.startswith("grad/w/")]  # 2 steps: 1 chunk
    [('grad/w/sum/rows_a', 'Concat'), ('grad/w/sum/rows_b', 'Concat'), ('grad/w/sum', 'MatMul')]

Nine steps: three chunks and a sum of their partials, or, planned for one core
(planner.step.for_cores, a pass of the step graph), one GEMM over all steps:

    >>> from planner.step.for_cores import for_cores
    >>> b = GraphBuilder("nine")
    >>> w, y = b.param("w", (3, 2), init="glorot"), b.input("y", (4, 2))
    >>> s = b.op("AddN", [b.op("MatMul", [b.input(f"x{t}", (4, 3)), w]) for t in range(9)])
    >>> forward = b.build(outputs=[b.op("MSE", [s, y], name="loss")])
    >>> def gemms(g):
    ...     return [(n.name, g.tensor(n.inputs[0]).shape) for n in g.nodes
    ...             if n.op in ("MatMul", "AddN") and n.name.startswith("grad/w/")]
    >>> gemms(make_training_graph(forward, Optimizer(kind="sgd")))  # doctest: +NORMALIZE_WHITESPACE
    [('grad/w/sum/gemm0', (12, 3)), ('grad/w/sum/gemm1', (12, 3)), ('grad/w/sum/gemm2', (12, 3)),
     ('grad/w/sum', (3, 2))]
    >>> gemms(for_cores(make_training_graph(forward, Optimizer(kind="sgd")), 1))
    [('grad/w/sum', (36, 3))]
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from planner.ir.graph import Graph, Node, Tensor
from planner.ops.matmul import PERMS


def batch_weight_gradients(graph: Graph) -> Graph:
    """The graph with each sum of A_t^T dY_t GEMMs computed in chunked GEMMs (see above)."""
    sums = {n.name: parts for n in graph.nodes if (parts := _gemm_parts(graph, n))}
    if not sums:
        return graph
    position = {n.name: k for k, n in enumerate(graph.nodes)}
    # The last MatMul of each chunk -> (the sum node, the chunk's MatMuls, the chunk's GEMM name).
    chunk_at: dict[str, tuple[Node, list[Node], str]] = {}
    chunk_outputs: dict[str, list[str]] = {}
    for name, parts in sums.items():
        node = graph.node_map[name]
        parts = sorted(parts, key=lambda p: position[p.name])
        size = math.ceil(math.sqrt(len(parts)))
        chunks = [parts[k:k + size] for k in range(0, len(parts), size)]
        gemms = ([node.outputs[0]] if len(chunks) == 1
                 else [f"{name}/gemm{c}" for c in range(len(chunks))])
        for chunk, gemm in zip(chunks, gemms, strict=True):
            chunk_at[chunk[-1].name] = (node, chunk, gemm)
        chunk_outputs[name] = gemms
    replaced = {p.name for parts in sums.values() for p in parts}
    nodes: list[Node] = []
    added: dict[str, list[Tensor]] = {}  # new tensors, listed before the sum's output
    for n in graph.nodes:
        if n.name in chunk_at:
            total, chunk, gemm = chunk_at[n.name]
            new_nodes, new_tensors = _chunk_gemm(graph, chunk, gemm, graph.tensor(total.outputs[0]))
            nodes += new_nodes
            added.setdefault(total.outputs[0], []).extend(new_tensors)
        elif n.name in sums:
            if len(chunk_outputs[n.name]) > 1:
                nodes.append(n.model_copy(update={"inputs": tuple(chunk_outputs[n.name])}))
        elif n.name not in replaced:
            nodes.append(n)
    gone = {o for p in replaced for o in graph.node_map[p].outputs}
    tensors = [new for t in graph.tensors if t.name not in gone
               for new in (*added.get(t.name, ()), t)]
    return graph.model_copy(update={"nodes": tuple(nodes), "tensors": tuple(tensors)})


def _chunk_gemm(graph: Graph, chunk: Sequence[Node], gemm: str,
                total: Tensor) -> tuple[list[Node], list[Tensor]]:
    """Row Concats of the chunk's A_t and dY_t, and the one GEMM writing `gemm`."""
    nodes, tensors, rows = [], [], []
    for side, k in (("a", 0), ("b", 1)):
        operands = tuple(p.inputs[k] for p in chunk)
        name = f"{gemm}/rows_{side}"
        shape = (sum(graph.tensor(i).shape[0] for i in operands),
                 graph.tensor(operands[0]).shape[1])
        tensors.append(Tensor(name=name, shape=shape, dtype=total.dtype, role="grad"))
        nodes.append(Node(name=name, op="Concat", inputs=operands, outputs=(name,),
                          attrs={"axis": 0}))
        rows.append(name)
    if gemm != total.name:
        tensors.append(total.model_copy(update={"name": gemm}))
    nodes.append(Node(name=gemm, op="MatMul", inputs=tuple(rows), outputs=(gemm,),
                      attrs=dict(chunk[0].attrs)))
    return nodes, tensors


def _gemm_parts(graph: Graph, node: Node) -> list[Node] | None:
    """The MatMul nodes an AddN sums when every one is an A^T B GEMM read by
    that AddN alone and all operands share one dtype; None otherwise."""
    if node.op != "AddN" or graph.tensor(node.outputs[0]).role != "grad":
        return None
    parts = []
    for i in node.inputs:
        p = graph.producer.get(i)
        if (p is None or p.op != "MatMul" or not p.attrs.get("transpose_a")
                or p.attrs.get("transpose_b") or any(k in p.attrs for k in PERMS)
                or any(len(graph.tensor(x).shape) != 2 for x in p.inputs)
                or [c.name for c in graph.consumers[i]] != [node.name] or i in graph.outputs
                or node.inputs.count(i) != 1):
            return None
        parts.append(p)
    dtypes = {graph.tensor(x).dtype for p in parts for x in p.inputs}
    return parts if len(dtypes) == 1 else None
