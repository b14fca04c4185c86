"""The rewrites an inference graph gets before it is planned, as a training graph gets its own
from make_training_graph (planner/frontend/autodiff.py): attention's softmax chains fused into
ScaledSoftmax (softmax_fusion.py), then a GEMM's BiasAdd over the last axis and Relu folded
into the MatMul (fold_bias.py), and a convolution's BiasAdd and Relu into the Conv2D
(fold_conv_bias.py).
Every command that plans, profiles, writes or checks an inference graph (`planner graph`,
`plan`, `profile`, `verify --graph`) calls this one function, so all of them see the graph the
plan's digest names. Training graphs pass through unchanged (autodiff has
rewritten them already), and so does a graph with nothing to rewrite.

Example:
    >>> from planner.graph.builder import GraphBuilder
    >>> b = GraphBuilder("linear")
    >>> x, w, bias = b.input("x", (4, 3)), b.param("w", (3, 2)), b.param("bias", (2,))
    >>> s = b.op("BiasAdd", [b.op("MatMul", [x, w], name="fc"), bias], {"axis": -1}, name="add")
    >>> y = b.op("Softmax", [b.op("Scale", [s], {"factor": 0.5}, name="scale")], name="probs")
    >>> [(n.name, n.op) for n in inference_rewrites(b.build(outputs=[y])).nodes]
    [('fc', 'MatMul'), ('probs', 'ScaledSoftmax')]
"""

from __future__ import annotations

from planner.graph.fold_bias import fold_bias_adds
from planner.graph.fold_conv_bias import fold_conv_biases
from planner.graph.softmax_fusion import fuse_softmax
from planner.ir.graph import Graph


def inference_rewrites(graph: Graph) -> Graph:
    """`graph` as it is planned (see the module docstring)."""
    if graph.kind != "inference":
        return graph
    return fold_conv_biases(fold_bias_adds(fuse_softmax(graph)))
