"""A training graph made for the CPU cores its step runs on: the rewrites that depend on them.

A graph depends on the model and its options only (planner.frontend.prepare), never on a target;
the rewrite that pays only on a CPU with a given number of cores is a planning decision, made
by planner.pipeline from the target and recorded in the plan's embedded graph:

    whole weight gradients
        with no more cores than a graph has chunked weight-gradient sums (an RNN's recurrences
        keep that many cores busy), each sum of chunk GEMMs over concatenated rows becomes one
        GEMM over all of its rows: the chunks would only add work
        (planner/frontend/passes/weight_grads.py)

(A weight several GEMMs read, an RNN's recurrent one, was also copied transposed once per step
here, so that oneDNN would not pack its transposed view at every call; the CPU runtime now packs
such a weight once per step itself, from any view: templates/cpu/runtime/weight_packs.h.)

`cores=None` (a GPU's step) and inference graphs are left as they are.

Example: nine steps read one weight; their gradient is three chunk GEMMs and a sum, one GEMM
on one core, the chunks where a core is left to overlap them:

    >>> from planner.frontend.autodiff import make_training_graph
    >>> from planner.graph.builder import GraphBuilder
    >>> from planner.graph.optimizer import Optimizer
    >>> b = GraphBuilder("nine")
    >>> w, y = b.param("w", (3, 2), init="glorot"), b.input("y", (4, 2))
    >>> s = b.op("AddN", [b.op("MatMul", [b.input(f"x{t}", (4, 3)), w]) for t in range(9)])
    >>> g = make_training_graph(b.build(outputs=[b.op("MSE", [s, y], name="loss")]),
    ...                         Optimizer(kind="sgd"))
    >>> def gemms(g):
    ...     return [(n.name, g.tensor(n.inputs[0]).shape) for n in g.nodes
    ...             if n.op in ("MatMul", "AddN") and n.name.startswith("grad/w/")]
    >>> gemms(for_cores(g, 1))
    [('grad/w/sum', (36, 3))]
    >>> for_cores(g, 2) == g and for_cores(g, None) == g
    True
"""

from __future__ import annotations

from planner.graph.validate import check_graph
from planner.ir.graph import Graph, Node, Tensor


def for_cores(graph: Graph, cores: int | None) -> Graph:
    """`graph` as its step runs on `cores` physical CPU cores (see the module docstring)."""
    if cores is None or graph.kind != "training":
        return graph
    if cores > _weight_gradient_sums(graph):
        return graph
    out = whole_weight_gradients(graph)
    return graph if out is graph else check_graph(out)


def whole_weight_gradients(graph: Graph) -> Graph:
    """Each AddN of chunk GEMMs over concatenated rows as one GEMM over all of them: the AddN's
    output, written by a MatMul of the same name, over Concats `<output>/rows_a` and `_b`
    where the AddN was; the chunks' Concats and GEMMs are gone."""
    sums = {n.name: chunks for n in graph.nodes if (chunks := _chunks(graph, n))}
    if not sums:
        return graph
    gone_nodes = {m for chunks in sums.values() for g in chunks
                  for m in (g.name, *(graph.producer[i].name for i in g.inputs))}
    nodes: list[Node] = []
    added: dict[str, list[Tensor]] = {}
    for n in graph.nodes:
        if n.name in sums:
            new_nodes, new_tensors = _one_gemm(graph, n, sums[n.name])
            nodes += new_nodes
            added[n.outputs[0]] = new_tensors
        elif n.name not in gone_nodes:
            nodes.append(n)
    gone = {o for m in gone_nodes for o in graph.node_map[m].outputs}
    tensors = [new for t in graph.tensors if t.name not in gone
               for new in (*added.get(t.name, ()), t)]
    return graph.model_copy(update={"nodes": tuple(nodes), "tensors": tuple(tensors)})


def _one_gemm(graph: Graph, total: Node, chunks: list[Node]) -> tuple[list[Node], list[Tensor]]:
    out = graph.tensor(total.outputs[0])
    nodes, tensors, rows = [], [], []
    for side, k in (("a", 0), ("b", 1)):
        operands = tuple(i for g in chunks for i in graph.producer[g.inputs[k]].inputs)
        name = graph.fresh_name(f"{out.name}/rows_{side}")
        shape = (sum(graph.tensor(i).shape[0] for i in operands),
                 graph.tensor(operands[0]).shape[1])
        tensors.append(Tensor(name=name, shape=shape, dtype=graph.tensor(operands[0]).dtype,
                              role="grad"))
        nodes.append(Node(name=name, op="Concat", inputs=operands, outputs=(name,),
                          attrs={"axis": 0}))
        rows.append(name)
    nodes.append(Node(name=total.name, op="MatMul", inputs=tuple(rows), outputs=(out.name,),
                      attrs=dict(chunks[0].attrs)))
    return nodes, tensors


def _weight_gradient_sums(graph: Graph) -> int:
    """Sums of A_t^T dY_t GEMMs the graph computes in row-concatenated GEMMs: chunked (an
    AddN of them) or already one GEMM."""
    chunked = {g.name for n in graph.nodes for g in (_chunks(graph, n) or ())}
    return sum(1 for n in graph.nodes
               if (n.op == "AddN" and _chunks(graph, n))
               or (n.name not in chunked and _row_gemm(graph, n)))


def _chunks(graph: Graph, node: Node) -> list[Node] | None:
    """The chunk GEMMs an AddN (role grad) sums, each read by it alone; None otherwise."""
    if node.op != "AddN" or graph.tensor(node.outputs[0]).role != "grad":
        return None
    chunks = [graph.producer.get(i) for i in node.inputs]
    if len(set(node.inputs)) != len(node.inputs) or not all(
            g is not None and _row_gemm(graph, g) and graph.outputs.count(g.outputs[0]) == 0
            and [c.name for c in graph.consumers[g.outputs[0]]] == [node.name] for g in chunks):
        return None
    attrs = {tuple(sorted(g.attrs.items())) for g in chunks}  # type: ignore[union-attr]
    dtypes = {graph.tensor(i).dtype for g in chunks for i in g.inputs}  # type: ignore[union-attr]
    return chunks if len(attrs) == 1 and len(dtypes) == 1 else None  # type: ignore[return-value]


def _row_gemm(graph: Graph, node: Node) -> bool:
    """`node` is a rank-2 A^T B MatMul whose A and B are row Concats (axis 0) read by it alone."""
    if (node.op != "MatMul" or len(node.inputs) != 2 or not node.attrs.get("transpose_a")
            or node.attrs.get("transpose_b")
            or any(node.attrs.get(p) for p in ("perm_a", "perm_b", "perm_y"))):
        return False
    for i in node.inputs:
        p = graph.producer.get(i)
        if (p is None or p.op != "Concat" or p.attrs.get("axis") != 0
                or len(graph.tensor(i).shape) != 2 or i in graph.outputs
                or [c.name for c in graph.consumers[i]] != [node.name]):
            return False
    return True

