"""BiasAdds folded into the GEMM that produces their input: one op per linear layer instead of two.

A linear layer is a MatMul and a BiasAdd over the last axis; the BiasAdd is a second pass over
the GEMM's output (a transformer's 8 of them took 0.4 ms of a 15 ms step on one core). MatMul's
optional bias input is added by the kernels as they write y (oneDNN's matmul bias argument,
cuBLAS with a bias pass on the GPU).

`fold_bias_adds` rewrites every float32 BiasAdd over the last axis whose input x is a two-input
MatMul's output read by nothing else and no graph output, with a float32 bias: the MatMul takes
the bias as its third input and writes the BiasAdd's output, in the BiasAdd's place in the node
order (where a, b and the bias are all computed); the BiasAdd and the MatMul's own output go.
Applied to training graphs after autodiff (the BiasAdd's gradient, a BiasAddGrad of dy, is
already in the graph and reads neither tensor) and to inference graphs as they are planned.
Mixed precision's bfloat16 / float16 GEMMs are left as they are: folded, the bias would be
added before y's one rounding instead of after it, a different (if closer) step than the one
the precision policy was measured with (tests/graph/test_precision.py).

Example:
    >>> from planner.graph.builder import GraphBuilder
    >>> b = GraphBuilder("linear")
    >>> x, w, bias = b.input("x", (4, 3)), b.param("w", (3, 2)), b.param("bias", (2,))
    >>> y = b.op("BiasAdd", [b.op("MatMul", [x, w], name="fc"), bias], {"axis": -1}, name="add")
    >>> g = fold_bias_adds(b.build(outputs=[y]))
    >>> [(n.name, n.op, n.inputs, n.outputs) for n in g.nodes]
    [('fc', 'MatMul', ('x', 'w', 'bias'), ('add',))]
"""

from __future__ import annotations

from planner.ir.graph import Graph, Node


def fold_bias_adds(graph: Graph) -> Graph:
    """The graph with each foldable BiasAdd (see the module docstring) inside its MatMul."""
    folds = {n.name: m for n in graph.nodes if (m := _gemm_of(graph, n)) is not None}
    if not folds:
        return graph
    gone = {m.name for m in folds.values()}
    gone_tensors = {m.outputs[0] for m in folds.values()}
    nodes = []
    for n in graph.nodes:
        if n.name in folds:
            m = folds[n.name]
            nodes.append(m.model_copy(update={"inputs": (*m.inputs, n.inputs[1]),
                                              "outputs": n.outputs}))
        elif n.name not in gone:
            nodes.append(n)
    return graph.model_copy(update={"nodes": tuple(nodes),
                                    "tensors": tuple(t for t in graph.tensors
                                                     if t.name not in gone_tensors)})


def _gemm_of(graph: Graph, node: Node) -> Node | None:
    """The MatMul whose output `node` adds a bias to, when `node` is a BiasAdd it can take in
    (see the module docstring); None otherwise."""
    if node.op != "BiasAdd":
        return None
    x, bias = node.inputs
    m = graph.producer.get(x)
    x_type = graph.tensor(x)
    rank = len(x_type.shape)
    if (m is None or m.op != "MatMul" or len(m.inputs) != 2 or x == bias
            or node.attrs.get("axis", 1) % rank != rank - 1
            or x_type.dtype != "float32" or graph.tensor(bias).dtype != "float32"
            or x in graph.outputs or [c.name for c in graph.consumers[x]] != [node.name]):
        return None
    return m
