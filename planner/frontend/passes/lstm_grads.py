"""LSTM h-gradient sums folded into the cell's gradient: one op per step instead of two.

An unrolled LSTM reads each step's h twice, in the next step's recurrent GEMM and in the
layer's output, so reverse mode sums two gradients for it, an AddN, right before the step's
LSTMCellGrad reads the sum as its dh. The cell's gradient kernel can add them as it reads them
(LSTMCellGrad's optional dh2 input), which saves a pass over h's gradient and an op per step
(64 of a BiLSTM's ~760 training ops at 32 steps).

`fold_lstm_dh_sums` rewrites every LSTMCellGrad of 5 inputs whose dh is the output of a
two-input AddN (role grad) read by nothing else and no graph output: the LSTMCellGrad takes the
AddN's inputs as its dh and dh2, and the AddN and its output go.

Example:
    >>> from planner.graph.builder import GraphBuilder
    >>> b = GraphBuilder("step")
    >>> h = [b.input(f"h{k}", (2, 3)) for k in range(4)]
    >>> dh = b.op("AddN", h[:2], name="dh", role="grad")
    >>> out = b.op_n("LSTMCellGrad", [dh, h[2], b.input("acts", (2, 12)), h[3], h[3]],
    ...              name="cell", role="grad")
    >>> g = fold_lstm_dh_sums(b.build(outputs=out))
    >>> [(n.name, n.op, n.inputs) for n in g.nodes]
    [('cell', 'LSTMCellGrad', ('h0', 'h2', 'acts', 'h3', 'h3', 'h1'))]
"""

from __future__ import annotations

from planner.ir.graph import Graph, Node


def fold_lstm_dh_sums(graph: Graph) -> Graph:
    """The graph with each two-way sum of an LSTMCellGrad's dh read by the cell's gradient."""
    folds = {n.name: s for n in graph.nodes if (s := _dh_sum(graph, n)) is not None}
    if not folds:
        return graph
    gone = {s.name for s in folds.values()}
    gone_tensors = {s.outputs[0] for s in folds.values()}
    nodes = []
    for n in graph.nodes:
        if n.name in folds:
            a, b = folds[n.name].inputs
            nodes.append(n.model_copy(update={"inputs": (a, *n.inputs[1:], b)}))
        elif n.name not in gone:
            nodes.append(n)
    return graph.model_copy(update={"nodes": tuple(nodes),
                                    "tensors": tuple(t for t in graph.tensors
                                                     if t.name not in gone_tensors)})


def _dh_sum(graph: Graph, node: Node) -> Node | None:
    """The AddN whose output is `node`'s dh, when `node` is an LSTMCellGrad that can take its
    two inputs instead (see the module docstring); None otherwise."""
    if node.op != "LSTMCellGrad" or len(node.inputs) != 5:
        return None
    dh = node.inputs[0]
    s = graph.producer.get(dh)
    if (s is None or s.op != "AddN" or len(s.inputs) != 2 or graph.tensor(dh).role != "grad"
            or dh in graph.outputs or [c.name for c in graph.consumers[dh]] != [node.name]
            or any(graph.tensor(i).shape != graph.tensor(dh).shape
                   or graph.tensor(i).dtype != graph.tensor(dh).dtype for i in s.inputs)):
        return None
    return s
