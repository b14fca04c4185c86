"""The persistent tensors' next values marked in place: after differentiation, each tensor
autodiff names (a param's, an optimizer slot's, a BatchNorm's running statistic's next value)
becomes an `updates=` of its persistent tensor, with that tensor's role; forward tensors keep
their forward records (a reshape's output rebuilt by the builder gets its old record back)."""

from __future__ import annotations

from collections.abc import Mapping

from planner.ir.graph import Graph


def mark_in_place(built: Graph, forward: Graph, marks: Mapping[str, str]) -> Graph:
    """Forward tensors keep their forward records; each `marks` key becomes an in-place update
    of its value (same role as that persistent tensor)."""
    tensors = []
    for t in built.tensors:
        if t.name in marks:
            old = built.tensor(marks[t.name])
            t = t.model_copy(update={"role": old.role, "updates": old.name})
        elif t.name in forward.tensor_map:
            t = forward.tensor_map[t.name]
        tensors.append(t)
    # A new Graph, not `model_copy`: that would carry over the old graph's cached lookups
    # (tensor_map, producer, ...).
    return Graph(**{**{f: getattr(built, f) for f in Graph.model_fields},
                    "tensors": tuple(tensors)})
