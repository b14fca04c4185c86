"""Shape ranges: one plan, made for a range's largest shapes, run on every smaller shape of the
same graph (TensorRT's optimisation profiles, decided ahead of time).

    plan = plan(prepare(graph_at_32), target, costs)        # planned, measured, built once
    choices = step_choices(prepare(graph_at_32), target, ...)   # what its step graph chose
    step = step_at(choices, prepare(graph_at_8))            # the same passes on batch 8's graph
    problem = outside_range(plan.graph, step)               # None: the plan runs it

A smaller shape of the same program is the same graph with smaller tensors: the same nodes in
the same order, the same tensors by name, dtype, role and layout, every persistent tensor
(parameters, state, optimizer state) of the same shape, and every other tensor no larger than
the range's. Then every decision of the plan holds for it: the order, lanes, threads and
co-run groups (they name ops, not shapes), and the arena (each tensor's bytes lie inside the
bytes the range gave it at the same offset, so no two tensors that the plan keeps apart can
meet, and the happens-before order that lets others share bytes is unchanged). What changes is
what a kernel reads of the shapes: each tensor's shape and each op's attrs, from the smaller
graph itself (its own export: a Reshape's sizes, a loss's row count), so a step at the smaller
shape computes what a plan made for it computes (codegen/concrete.py hands these to the
executor, which checks again that every tensor fits). Kernels' scratch areas are the range's
too: a library that asks for more at a smaller shape gets a block of its own at load.

`outside_range` re-derives all of this from the two graphs, never from the plan's claims.

Example:
    >>> from planner.frontend.options import GraphOptions
    >>> from planner.frontend.prepare import prepare
    >>> from planner.graph.optimizer import Optimizer
    >>> from planner.step import StepChoices
    >>> opts = GraphOptions(optimizer=Optimizer(kind="sgd"))
    >>> big = prepare("zoo:mlp?batch=8&hidden=4&in_features=3&classes=2", opts)
    >>> small = prepare("zoo:mlp?batch=5&hidden=4&in_features=3&classes=2", opts)
    >>> outside_range(big, step_at(StepChoices(), small)) is None
    True
    >>> outside_range(small, big)
    "tensor 'x': [8, 3] holds more than the range's [5, 3]"
"""

from __future__ import annotations

import math
from typing import Any

from planner.ir.graph import Graph
from planner.step import StepChoices, step_graph

PERSISTENT = ("param", "state", "optimizer-state")


def step_at(choices: StepChoices, prepared: Graph) -> Graph:
    """The step graph of `prepared` (another shape's graph, out of the front end) under the
    choices the range's plan was made with: its step graph's passes, as planning ran them."""
    return step_graph(prepared, choices)


def range_choices(prepared: Graph, step: Graph, target: Any, data_parallel: Any = None,
                  costs: Any = None) -> StepChoices | None:
    """The choices a plan's step graph `step` was made with, from the front end's `prepared`,
    when they give `step` again, so that its build may run smaller shapes of the graph; None
    where they do not, or on a backend whose runtime takes no concrete schedule (the CPU
    runtime does: templates/common/loader.h's Concrete; the CUDA one not yet)."""
    from planner.pipeline.choices import step_choices
    from planner.target.backends import traits

    if not traits(target).host_cores:
        return None
    choices = step_choices(prepared, target, data_parallel, costs)
    return choices if step_at(choices, prepared) == step else None


def outside_range(planned: Graph, step: Graph) -> str | None:
    """Why the plan whose step graph is `planned` cannot run `step` (a step graph at other
    shapes) as a shape of its range, in one line naming the node or tensor; None when it can
    (module docstring)."""
    if (planned.kind, planned.outputs) != (step.kind, step.outputs):
        return "the graph's kind or outputs differ"
    if len(planned.nodes) != len(step.nodes):
        return f"{len(step.nodes)} nodes, the range's graph has {len(planned.nodes)}"
    for a, b in zip(planned.nodes, step.nodes, strict=True):
        if (a.name, a.op, a.inputs, a.outputs) != (b.name, b.op, b.inputs, b.outputs):
            return f"node {b.name!r} ({b.op}) is not the range's node {a.name!r} ({a.op})"
    if len(planned.tensors) != len(step.tensors):
        return f"{len(step.tensors)} tensors, the range's graph has {len(planned.tensors)}"
    for a, b in zip(planned.tensors, step.tensors, strict=True):
        if (a.name, a.dtype, a.role, a.layout, a.updates) != (b.name, b.dtype, b.role, b.layout,
                                                              b.updates):
            return f"tensor {b.name!r} is not the range's {a.name!r} (name, dtype, role, layout)"
        if len(a.shape) != len(b.shape):
            return f"tensor {b.name!r} has rank {len(b.shape)}, the range's {len(a.shape)}"
        if a.role in PERSISTENT and a.shape != b.shape:
            return (f"tensor {b.name!r} ({a.role}) is {list(b.shape)}, the range's "
                    f"{list(a.shape)}: state keeps its shape across a range")
        if math.prod(b.shape) > math.prod(a.shape):
            return f"tensor {b.name!r}: {list(b.shape)} holds more than the range's {list(a.shape)}"
    return None


def covers(largest: tuple[tuple[int, ...], ...], shapes: tuple[tuple[int, ...], ...]) -> bool:
    """Whether feeds of `shapes` may be a shape of the range planned for `largest`: the same
    ranks, no dimension larger (the graphs decide: outside_range).

    >>> covers(((32, 3), (32,)), ((8, 3), (8,))), covers(((32, 3),), ((8, 4),))
    (True, False)
    """
    return len(largest) == len(shapes) and all(
        len(a) == len(b) and all(y <= x for x, y in zip(a, b, strict=True))
        for a, b in zip(largest, shapes, strict=True))
