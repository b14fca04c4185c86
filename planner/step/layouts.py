"""A step's convolution kernel layouts: the layout attr of each convolution planning chose one
for (planner.costs.conv_layouts chooses them from what the cost table measured faster)."""

from __future__ import annotations

from collections.abc import Mapping

from planner.graph.validate import check_graph
from planner.ir.graph import Graph


def with_layouts(graph: Graph, layouts: Mapping[str, str]) -> Graph:
    """`graph` with `layouts[name]` as the layout attr of each named node there, checked (a
    value the op refuses is an error naming the node)."""
    if not layouts:
        return graph
    nodes = tuple(n.model_copy(update={"attrs": {**n.attrs, "layout": layouts[n.name]}})
                  if n.name in layouts else n for n in graph.nodes)
    return check_graph(graph.model_copy(update={"nodes": nodes}))
