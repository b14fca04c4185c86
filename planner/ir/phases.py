"""The parts of a training step, read off a node's outputs: a fact of the IR (tensor roles and
`updates`), which the scheduler, memory planning, reports and summaries all classify by.

    forward    everything not below (a BatchNorm updating its running statistics beside its
               output included)
    backward   nodes that write gradients (role "grad")
    update     nodes that write nothing but next values of persistent tensors (params,
               optimizer state, the dropout step)
"""

from __future__ import annotations

from planner.ir.graph import Graph, Node

PHASES: tuple[str, ...] = ("forward", "backward", "update")


def node_phase(graph: Graph, node: Node) -> str:
    """"forward", "backward" or "update": what part of a training step a node belongs to.

    Backward nodes write gradients (role "grad"); update nodes write nothing but next values of
    persistent tensors (params, optimizer state, the dropout step); everything else (a BatchNorm
    updating its running statistics beside its output included) is forward.
    """
    outs = [graph.tensor(o) for o in node.outputs]
    if any(t.role == "grad" for t in outs):
        return "backward"
    if all(t.updates is not None for t in outs):
        return "update"
    return "forward"
