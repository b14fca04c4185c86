"""What a graph holds, in numbers: the report behind `planner graph GRAPH [--json]`.

`summarize` is a pure function of the graph; its dict is plain JSON data with sorted keys.

Example:
    >>> from planner.graph.builder import GraphBuilder
    >>> b = GraphBuilder("tiny")
    >>> y = b.op("Relu", [b.op("MatMul", [b.input("x", (4, 3)), b.param("w", (3, 2))])])
    >>> s = summarize(b.build(outputs=[y]))
    >>> s["op_counts"], s["param_count"], s["flops"]
    ({'MatMul': 1, 'Relu': 1}, 6, 56)
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from planner.ir.graph import Graph, Node
from planner.ir.phases import PHASES, node_phase
from planner.ops import TensorType, get_op


def node_flops(graph: Graph, node: Node) -> int:
    """FLOPs of one node by its op's rule (2 per multiply-accumulate)."""
    opdef = get_op(node.op)
    ins = [_type(graph, i) for i in node.inputs]
    outs = [_type(graph, o) for o in node.outputs]
    return int(opdef.flops(ins, outs, opdef.normalize_attrs(node.attrs)))


def summarize(graph: Graph) -> dict[str, Any]:
    """Counts, sizes and FLOPs of a graph.

    Keys: name, kind, nodes (count), tensors (count), op_counts ({op: count}), param_count
    (elements of role param), param_bytes, state_bytes (state and optimizer-state),
    input_bytes (inputs and labels), activation_bytes, grad_bytes (all tensors of those
    roles, as if none shared memory), flops (whole step). Training graphs add `phases`
    ({forward|backward|update: {nodes, flops, op_counts}}, see planner.ir.phases) and
    backward_forward_flop_ratio (backward FLOPs / forward FLOPs; None when forward has none).
    """
    flops = {n.name: node_flops(graph, n) for n in graph.nodes}

    def bytes_of(*roles: str) -> int:
        return sum(t.nbytes for t in graph.by_role(*roles))

    out: dict[str, Any] = {
        "name": graph.name,
        "kind": graph.kind,
        "nodes": len(graph.nodes),
        "tensors": len(graph.tensors),
        "op_counts": _counts(graph.nodes),
        "param_count": sum(t.size for t in graph.by_role("param") if t.updates is None),
        "param_bytes": sum(t.nbytes for t in graph.by_role("param") if t.updates is None),
        "state_bytes": sum(t.nbytes for t in graph.by_role("state", "optimizer-state")
                           if t.updates is None),
        "input_bytes": bytes_of("input", "label"),
        "activation_bytes": bytes_of("activation"),
        "grad_bytes": bytes_of("grad"),
        "flops": sum(flops.values()),
    }
    if graph.kind == "training":
        by_phase: dict[str, list[Node]] = {p: [] for p in PHASES}
        for n in graph.nodes:
            by_phase[node_phase(graph, n)].append(n)
        out["phases"] = {p: {"nodes": len(ns), "flops": sum(flops[n.name] for n in ns),
                             "op_counts": _counts(ns)}
                         for p, ns in by_phase.items()}
        fwd, bwd = out["phases"]["forward"]["flops"], out["phases"]["backward"]["flops"]
        out["backward_forward_flop_ratio"] = bwd / fwd if fwd else None
    return out


def _counts(nodes: list[Node] | tuple[Node, ...]) -> dict[str, int]:
    return dict(sorted(Counter(n.op for n in nodes).items()))


def _type(graph: Graph, name: str) -> TensorType:
    t = graph.tensor(name)
    return TensorType(t.shape, t.dtype)
