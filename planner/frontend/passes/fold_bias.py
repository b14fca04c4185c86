"""A linear layer's BiasAdd and Relu folded into the GEMM that produces their input: one op per
layer instead of three.

A linear layer is a MatMul and a BiasAdd over the last axis, often followed by a Relu (an MLP's
hidden layers, nn.TransformerEncoderLayer's feed-forward block with its default activation);
each is a full pass over the GEMM's output (a transformer's 8 BiasAdds took 0.4 ms of a 15 ms
step on one core). MatMul's optional bias input and `activation` attr (planner/ops/matmul.py)
let the kernels do both as they write y: oneDNN's matmul bias argument and one Relu pass over y
right after the product on the CPU, a bias-and-Relu pass after cuBLAS on the GPU.

`fold_bias_adds` rewrites every chain MatMul [-> BiasAdd] [-> Relu] (at least one of the two)
of a two-input MatMul without an activation, where the BiasAdd adds a bias of its own over the
last axis, each tensor but the last is read by the next op alone and is no graph output, and
every tensor is float32: the MatMul takes the bias as its third input and `activation: relu`,
and writes the chain's last tensor, in the last op's place in the node order (where a, b and
the bias are all computed); the other ops and the intermediate tensors go
(planner/frontend/passes/_fold_epilogue.py, the rewrite fold_conv_bias.py makes of a convolution
layer). Applied to training graphs after autodiff: the BiasAdd's gradient (a BiasAddGrad of dy) and
the Relu's (a ReluGrad reading the Relu's output y, which the MatMul now writes under the same
name) are already in the graph, and read neither intermediate tensor; and to inference graphs
as they are planned. Mixed precision's bfloat16 / float16 GEMMs are left as they are: folded,
the bias and the Relu would act before y's one rounding instead of after it, a different (if
closer) step than the one the precision policy was measured with
(tests/graph/test_precision.py). The folded Relu keeps NaN as Relu does.

Example:
    >>> from planner.graph.builder import GraphBuilder
    >>> b = GraphBuilder("linear")
    >>> x, w, bias = b.input("x", (4, 3)), b.param("w", (3, 2)), b.param("bias", (2,))
    >>> y = b.op("BiasAdd", [b.op("MatMul", [x, w], name="fc"), bias], {"axis": -1}, name="add")
    >>> y = b.op("Relu", [y], name="relu")
    >>> g = fold_bias_adds(b.build(outputs=[y]))
    >>> [(n.name, n.op, n.inputs, n.outputs, n.attrs["activation"]) for n in g.nodes]
    [('fc', 'MatMul', ('x', 'w', 'bias'), ('relu',), 'relu')]
"""

from __future__ import annotations

from planner.frontend.passes._fold_epilogue import fold_epilogues
from planner.ir.graph import Graph


def fold_bias_adds(graph: Graph) -> Graph:
    """The graph with each foldable chain (see the module docstring) inside its MatMul."""
    return fold_epilogues(graph, "MatMul", lambda rank: rank - 1)
