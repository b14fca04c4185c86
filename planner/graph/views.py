"""Which tensors of a graph are views: the bytes of another tensor under another shape, which
no kernel copies. One rule, read by memory planning (a view gets no buffer of its own) and by
codegen's layouts (both alias the same tensors), from the graph and the ops alone.

Example:
    >>> from planner.zoo import build
    >>> view_aliases(build("lenet", batch=2))
    {'flatten': 'pool2'}
"""

from __future__ import annotations

from planner.ir.graph import Graph

# Roles whose tensors persist across steps (one buffer each, live the whole step).
PERSISTENT_ROLES = frozenset({"param", "state", "optimizer-state"})


def view_aliases(graph: Graph) -> dict[str, str]:
    """View outputs -> the tensor whose bytes they share (the root of a chain of views):
    every output of a view op (`OpDef.view`) whose input is not persistent state (a view of
    a parameter would be read after the update wrote over it)."""
    from planner.ops import get_op

    roles = {t.name: t.role for t in graph.tensors}
    out: dict[str, str] = {}
    for n in graph.nodes:
        if get_op(n.op).view and roles.get(n.inputs[0]) not in PERSISTENT_ROLES:
            out[n.outputs[0]] = out.get(n.inputs[0], n.inputs[0])
    return out
