"""Joined slice gradients: a tensor read in pieces gets its gradient by one Concat.

An RNN unrolled from ONNX (or any graph that cuts one tensor into per-step pieces, such as the
input projection of all time steps at once, sliced step by step) reads the tensor through one
Slice per piece. Reverse mode gives each Slice a SliceGrad, zeros of the whole tensor with the
piece's gradient written in, and an AddN of all of them: for a BiLSTM's (32, 8, 512)
projection, 32 whole-sized zero fills and a 32-way sum over 16 MB, where the pieces' gradients
placed side by side are the answer:

    sum_t SliceGrad_t(dy_t)  =  concat_t(dy_t)      (the slices tile one axis, step 1)

`join_slice_gradients` rewrites every AddN (role grad) whose inputs all come from SliceGrads
(each read by nothing but that AddN, none a graph output, one shape and dtype) whose pieces cut
one common axis, step 1, the other axes whole, into disjoint ranges covering it. The AddN
becomes a Concat of the pieces' gradients in axis order, keeping the AddN's name and output
tensor (the updates and gradients reading it are untouched); the SliceGrads and their
whole-sized outputs go. Sums whose pieces overlap, leave gaps or cut two axes stay as they are.

Example:
    >>> from planner.graph.builder import GraphBuilder
    >>> b = GraphBuilder("steps")
    >>> parts = [b.op_n("SliceGrad", [b.input(f"dy{t}", (1, 2))],
    ...                 {"starts": [t], "ends": [t + 1], "axes": [0], "input_shape": [3, 2]},
    ...                 name=f"d{t}", role="grad")[0] for t in (2, 0, 1)]
    >>> total = b.op_n("AddN", parts, name="dx", role="grad")[0]
    >>> g = join_slice_gradients(b.build(outputs=[total]))
    >>> [(n.name, n.op, n.inputs, n.attrs) for n in g.nodes]
    [('dx', 'Concat', ('dy0', 'dy1', 'dy2'), {'axis': 0})]
"""

from __future__ import annotations

from planner.ir.graph import Graph, Node
from planner.ops.shape import slice_geometry


def join_slice_gradients(graph: Graph) -> Graph:
    """The graph with each sum of SliceGrads that tile one axis computed as a Concat."""
    joins = {n.name: pieces for n in graph.nodes if (pieces := _tiling(graph, n))}
    if not joins:
        return graph
    gone_nodes = {graph.producer[i].name for n in joins for i in graph.node_map[n].inputs}
    gone = {graph.node_map[p].outputs[0] for p in gone_nodes}
    nodes = []
    for n in graph.nodes:
        if n.name in joins:
            axis, inputs = joins[n.name]
            nodes.append(Node(name=n.name, op="Concat", inputs=inputs, outputs=n.outputs,
                              attrs={"axis": axis}))
        elif n.name not in gone_nodes:
            nodes.append(n)
    return graph.model_copy(update={"nodes": tuple(nodes),
                                    "tensors": tuple(t for t in graph.tensors
                                                     if t.name not in gone)})


def _tiling(graph: Graph, node: Node) -> tuple[int, tuple[str, ...]] | None:
    """(axis, the pieces' gradients in axis order) when `node` is an AddN of SliceGrads that
    tile one axis of its output (see the module docstring); None otherwise."""
    if node.op != "AddN" or len(node.inputs) < 2 or len(set(node.inputs)) != len(node.inputs):
        return None
    out = graph.tensor(node.outputs[0])
    if out.role != "grad":
        return None
    axes, ranges = set(), []
    for i in node.inputs:
        p = graph.producer.get(i)
        if (p is None or p.op != "SliceGrad" or i in graph.outputs
                or [c.name for c in graph.consumers[i]] != [node.name]):
            return None
        dy = graph.tensor(p.inputs[0])
        if graph.tensor(i).shape != out.shape or dy.dtype != out.dtype:
            return None
        geometry = slice_geometry(out.shape, p.attrs)
        cut = [k for k, (n, first, step, piece) in enumerate(zip(
            out.shape, geometry["begin"], geometry["step"], dy.shape, strict=True))
            if (first, step, piece) != (0, 1, n)]
        if len(cut) > 1 or any(s != 1 for s in geometry["step"]):
            return None
        axes.update(cut)
        ranges.append((geometry["begin"][cut[0]] if cut else 0, p.inputs[0]))
    if len(axes) != 1:
        return None
    (axis,) = axes
    at = 0
    for first, dy in sorted(ranges):
        if first != at:
            return None
        at += graph.tensor(dy).shape[axis]
    if at != out.shape[axis]:
        return None
    return axis, tuple(dy for _, dy in sorted(ranges))
