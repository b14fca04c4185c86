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
templates/cpu/runtime/kernels/conv.cpp).

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

from planner.ir.graph import Graph, Node


def fold_conv_biases(graph: Graph) -> Graph:
    """The graph with each foldable chain (see the module docstring) inside its Conv2D."""
    chains = [c for n in graph.nodes if (c := _chain(graph, n)) is not None]
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
    conv, rest = chain[0], chain[1:]
    bias = tuple(n.inputs[1] for n in rest if n.op == "BiasAdd")
    attrs = dict(conv.attrs)
    if rest[-1].op == "Relu":
        attrs["activation"] = "relu"
    # written over: the Conv2D node now lands where the chain's last op was
    return conv.model_copy(update={"inputs": (*conv.inputs, *bias), "attrs": attrs,
                                   "outputs": rest[-1].outputs})


def _chain(graph: Graph, conv: Node) -> list[Node] | None:
    """[conv, BiasAdd?, Relu?] when `conv` starts a foldable chain, else None."""
    if (conv.op != "Conv2D" or len(conv.inputs) != 2
            or (conv.attrs.get("activation") or "none") != "none"):
        return None
    chain = [conv]
    nxt = _sole_reader(graph, conv)
    if nxt is not None and nxt.op == "BiasAdd" and _channel_bias(graph, nxt):
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


def _channel_bias(graph: Graph, add: Node) -> bool:
    """Whether BiasAdd `add` adds its bias over the channel axis of its NCHW input."""
    return add.attrs.get("axis", 1) % len(graph.tensor(add.inputs[0]).shape) == 1
