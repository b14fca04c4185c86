"""A convolution layer's BiasAdd and Relu folded into its Conv2D: one op, one pass over the output.

A convolution layer with a bias is Conv2D -> BiasAdd (axis 1) -> Relu, each a full pass over an
activation as large as the layer's output (VGG's are its largest tensors). Conv2D's optional
bias input and `activation` attr (planner/ops/conv.py) let the kernels add the bias and apply
the Relu in the same op: oneDNN's convolution bias and one Relu pass over y on the CPU, one
bias-and-Relu pass after cuDNN's convolution on the GPU.

`fold_conv_biases` rewrites every chain Conv2D [-> BiasAdd] [-> Relu] (at least one of the two)
of a two-input Conv2D without an activation, where the BiasAdd adds a bias of its own over
axis 1, each tensor but the last is read by the next op alone and is no graph output, and every
tensor is float32: the Conv2D takes the bias as its third input and `activation: relu`, and
writes the chain's last tensor, in the last op's place in the node order (where the bias is
computed); the other ops and the intermediate tensors go. Applied to training graphs after
autodiff: the BiasAdd's gradient (a BiasAddGrad of dy) and the Relu's (a ReluGrad reading the
Relu's output y, which the Conv2D now writes under the same name) are already in the graph, and
read neither intermediate tensor. Mixed precision's bfloat16 / float16 convolutions are left as
they are, as fold_bias.py leaves its GEMMs: folded, the bias and the Relu would act before y's
one rounding instead of after it, a different step than the one the policy was measured with.
The folded Relu keeps NaN as Relu does (not oneDNN's Relu post-op, which gives 0 for it:
templates/cpu/runtime/kernels/conv.cpp). The rewrite is fold_bias.py's too
(planner/frontend/passes/_fold_epilogue.py).

Example:
    >>> from planner.graph.builder import GraphBuilder
    >>> b = GraphBuilder("layer")
    >>> x, w = b.input("x", (1, 3, 8, 8)), b.param("w", (4, 3, 3, 3))
    >>> y = b.op("Conv2D", [x, w], {"pads": [1, 1, 1, 1]}, name="conv")
    >>> y = b.op("BiasAdd", [y, b.param("bias", (4,))], {"axis": 1}, name="add")
    >>> y = b.op("Relu", [y], name="relu")
    >>> g = fold_conv_biases(b.build(outputs=[y]))
    >>> [(n.name, n.op, n.inputs, n.outputs, n.attrs["activation"]) for n in g.nodes]
    [('conv', 'Conv2D', ('x', 'w', 'bias'), ('relu',), 'relu')]
"""

from __future__ import annotations

from planner.frontend.passes._fold_epilogue import fold_epilogues
from planner.ir.graph import Graph


def fold_conv_biases(graph: Graph) -> Graph:
    """The graph with each foldable chain (see the module docstring) inside its Conv2D."""
    return fold_epilogues(graph, "Conv2D", lambda rank: 1)
