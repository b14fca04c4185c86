"""What a graph must satisfy before it is planned, and a plan before it is accepted: at least
one node, and memory within the target's. Checked up front so that a graph far beyond the
machine is refused with the number, not planned, verified and built without a word.

    nodes      a graph with no nodes has nothing to schedule
    operands   the largest node's inputs and outputs (which must be in memory together, on
               any plan) fit in the memory of the target's backend: host memory for a CPU
               target (even one that lists a GPU: its plans run on the CPUs), the first
               GPU's for a CUDA target (planner.pipeline.BACKENDS says which, `memory_of`)
    arena      a CPU plan's arena fits in host memory (GPU plans meet their budget instead)

Example:
    >>> from planner.target import preset
    >>> from planner.zoo import build
    >>> xeon = preset("xeon-8180")
    >>> check_graph_fits(build("mlp", batch=2, hidden=[4], in_features=3, classes=2), xeon,
    ...                  xeon.host_memory_bytes)
    >>> big = build("mlp", batch=2**40, hidden=[4], in_features=3, classes=2)
    >>> try:
    ...     check_graph_fits(big, xeon, xeon.host_memory_bytes)
    ... except ValueError as e:
    ...     print(str(e).split(" (")[0].split("' ")[1])
    needs at least 35184372088848 bytes at node 'fc1/bias_add'
"""

from __future__ import annotations

from planner.ir.graph import Graph
from planner.target.records import Target


def check_graph_fits(graph: Graph, target: Target, have: int) -> None:
    """ValueError when the graph has no nodes or its largest node cannot fit in the `have`
    bytes of memory of the target's backend (see above)."""
    if not graph.nodes:
        raise ValueError(f"graph {graph.name!r} has no nodes to schedule")
    tensors = graph.tensor_map
    need, node = max((sum(tensors[t].nbytes for t in {*n.inputs, *n.outputs}), n.name)
                     for n in graph.nodes)
    if need > have:
        raise ValueError(f"graph {graph.name!r} needs at least {need} bytes at node {node!r} "
                         f"(its inputs and outputs), more than the {have} bytes of memory of "
                         f"target {target.name!r}")


def check_arena_fits(arena_bytes: int, graph: Graph, target: Target) -> None:
    """ValueError when a CPU plan's arena is larger than the host's memory."""
    if arena_bytes > target.host_memory_bytes:
        raise ValueError(f"graph {graph.name!r} needs a {arena_bytes}-byte arena, more than the "
                         f"{target.host_memory_bytes} bytes of memory of target "
                         f"{target.name!r}")
