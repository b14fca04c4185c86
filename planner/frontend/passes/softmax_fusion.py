"""Fused attention softmax: Scale -> CausalMask -> Softmax (and its gradient chain) as one op.

Attention scores pass through up to three ops before the value product, each a full pass over
a (batch, heads, queries, keys) tensor, and their gradients through three more:

    forward    x ─► Scale(f) ─► CausalMask(-inf) ─► Softmax(last axis) ─► y
    backward   SoftmaxGrad(dy, y; last axis) ─► CausalMask(0) ─► Scale(f) ─► dx

`fuse_softmax` rewrites every such chain into one ScaledSoftmax [x] -> y, and every backward
chain into one ScaledSoftmaxGrad [dy, y] -> dx (attrs scale = f, causal; planner/ops/
scaled_softmax.py), with exactly the composition's values. A chain is fused when it has at
least two of its ops (Scale or CausalMask, either may be missing: BERT and ViT have no mask),
in that order, every op float32, the softmax along the last axis, the forward mask's value -inf
and the backward's 0, and each intermediate read by the next op alone and no graph output.
The fused node keeps the name and the output tensor of the chain's last node (so its readers,
gradient sums and updates are untouched); the other nodes and their outputs go.

Not fused, and why: a mask written as Where(mask, -inf, scores) (masked_fill on a boolean
buffer, as torch.export and ONNX write a hand-made causal mask) or as Add of a mask tensor
reads mask values that a graph does not hold (a state tensor's values arrive with the
parameters), so it is not known to be causal; ONNX's Div by a constant rounds differently from
a multiply by its inverse, so it is not a Scale.

Where it runs: after autodiff on training graphs (make_training_graph, gradients) and on the
inference graphs the command line writes, profiles and plans (`planner graph`, `profile`,
`plan` without --train).

Example:
    >>> from planner.graph.builder import GraphBuilder
    >>> b = GraphBuilder("attn")
    >>> s = b.op("Scale", [b.input("scores", (2, 3, 3))], {"factor": 0.5}, name="scaled")
    >>> y = b.op("Softmax", [b.op("CausalMask", [s], name="mask")], {"axis": -1}, name="p")
    >>> g = fuse_softmax(b.build(outputs=[y]))
    >>> [(n.name, n.op, n.inputs, n.attrs) for n in g.nodes]
    [('p', 'ScaledSoftmax', ('scores',), {'causal': True, 'scale': 0.5})]
"""

from __future__ import annotations

from planner.ir.graph import Graph, Node


def fuse_softmax(graph: Graph) -> Graph:
    """The graph with each attention softmax chain and gradient chain as one node."""
    fused: dict[str, Node] = {}  # the chain's last node's name -> the fused node
    gone: set[str] = set()       # names of the chains' other nodes
    for n in graph.nodes:
        chain = _forward_chain(graph, n) or _backward_chain(graph, n)
        # a Scale both ending a gradient chain and starting a softmax chain joins the first
        if chain is None or any(c.name in gone or c.name in fused for c in chain):
            continue
        first, last = chain[0], chain[-1]
        attrs = {"causal": any(c.op == "CausalMask" for c in chain),
                 "scale": next((float(c.attrs["factor"]) for c in chain if c.op == "Scale"),
                               1.0)}
        op = "ScaledSoftmax" if first.op != "SoftmaxGrad" else "ScaledSoftmaxGrad"
        fused[last.name] = Node(name=last.name, op=op, inputs=first.inputs,
                                outputs=last.outputs, attrs=attrs)
        gone.update(c.name for c in chain[:-1])
    if not fused:
        return graph
    dropped = {graph.node_map[name].outputs[0] for name in gone}
    nodes = tuple(fused.get(n.name, n) for n in graph.nodes if n.name not in gone)
    return graph.model_copy(update={"nodes": nodes,
                                    "tensors": tuple(t for t in graph.tensors
                                                     if t.name not in dropped)})


def _forward_chain(graph: Graph, softmax: Node) -> list[Node] | None:
    """[Scale?, CausalMask?, Softmax] ending at `softmax`, two ops or more, or None."""
    if softmax.op != "Softmax" or not _last_axis(graph, softmax):
        return None
    chain = [softmax]
    for op in ("CausalMask", "Scale"):
        p = graph.producer.get(chain[0].inputs[0])
        if p is not None and p.op == op and _fusable(graph, p, chain[0]) \
                and (op != "CausalMask" or p.attrs.get("value") is None):
            chain.insert(0, p)
    return chain if len(chain) > 1 and _float32(graph, chain) else None


def _backward_chain(graph: Graph, grad: Node) -> list[Node] | None:
    """[SoftmaxGrad, CausalMask(0)?, Scale?] starting at `grad`, two ops or more, or None."""
    if grad.op != "SoftmaxGrad" or not _last_axis(graph, grad):
        return None
    chain = [grad]
    for op in ("CausalMask", "Scale"):
        readers = graph.consumers.get(chain[-1].outputs[0], [])
        if len(readers) == 1 and readers[0].op == op and _fusable(graph, chain[-1], readers[0]) \
                and (op != "CausalMask" or readers[0].attrs.get("value") == 0.0):
            chain.append(readers[0])
    return chain if len(chain) > 1 and _float32(graph, chain) else None


def _fusable(graph: Graph, producer: Node, reader: Node) -> bool:
    """`producer`'s one output is read by `reader` alone (once) and is no graph output."""
    out = producer.outputs[0]
    return (len(producer.outputs) == 1 and out not in graph.outputs
            and [c.name for c in graph.consumers.get(out, [])] == [reader.name]
            and reader.inputs.count(out) == 1 and reader.inputs[0] == out)


def _last_axis(graph: Graph, node: Node) -> bool:
    rank = len(graph.tensor(node.inputs[0]).shape)
    return rank >= 1 and node.attrs.get("axis", -1) % rank == rank - 1


def _float32(graph: Graph, chain: list[Node]) -> bool:
    return all(graph.tensor(t).dtype == "float32" for c in chain for t in (*c.inputs, *c.outputs))
