"""A range plan's executor at smaller shapes: what the runtime's Executor takes as `shapes` and
`attrs` (templates/common/loader.h, Concrete) in place of a build.

A range plan (planner/pipeline/ranges.py) is built once, for its largest shapes. A step graph
of the same program at smaller shapes runs on the same library: the executor is handed, per
tensor of the schedule (in the order codegen/render.py writes them: the graph's tensors, then
the memory plan's copies), its shape in that graph, and, per op in plan order, its attrs
encoded from that graph's node. Nothing is compiled; the executor checks that each tensor keeps
its rank and fits the bytes the library gives it, then creates its kernels for these shapes.

    ex = package.Executor(**concrete_options(plan, step))

Example:
    >>> from planner.frontend.options import GraphOptions
    >>> from planner.frontend.prepare import prepare
    >>> from planner.graph.optimizer import Optimizer
    >>> from planner.pipeline import plan as make_plan
    >>> from planner.pipeline.choices import step_choices
    >>> from planner.pipeline.ranges import step_at
    >>> from planner.target import preset
    >>> opts = GraphOptions(optimizer=Optimizer(kind="sgd"))
    >>> big = prepare("zoo:mlp?batch=8&hidden=4&in_features=3&classes=2", opts)
    >>> p = make_plan(big, preset("xeon-8180"))
    >>> small = step_at(step_choices(big, preset("xeon-8180")),
    ...                 prepare("zoo:mlp?batch=5&hidden=4&in_features=3&classes=2", opts))
    >>> tables = concrete_options(p, small)
    >>> tables["shapes"][:2], sorted(tables)
    ([[5, 3], [3, 4]], ['attrs', 'evaluation_attrs', 'evaluation_shapes', 'shapes'])
"""

from __future__ import annotations

from typing import Any, NamedTuple

from codegen.layout import arena_layout
from codegen.render import encode_attrs, op_buffers, ordered_ops, plan_attrs
from planner.errors import PlanError
from planner.graph.evaluation import evaluation_graph
from planner.ir.graph import Graph
from planner.pipeline.ranges import outside_range
from planner.plan import Plan


def concrete_options(plan: Plan, step: Graph) -> dict[str, Any]:
    """The executor's keyword arguments that run `plan` (built for its range's largest shapes)
    on `step`, its step graph at other shapes: `shapes` and `attrs`, and for a plan that
    carries one its evaluation schedule's. PlanError naming what differs when `step` is no
    shape of the plan's range (planner.pipeline.ranges.outside_range)."""
    shapes, attrs = tables(plan, step)
    out = {"shapes": shapes, "attrs": attrs}
    if plan.evaluation is not None:
        out["evaluation_shapes"], out["evaluation_attrs"] = tables(
            plan.evaluation.plan, evaluation_graph(step))
    return out


class Frame(NamedTuple):
    """What `tables` reads of a plan, whatever the shapes: the memory plan's copies and, per op
    in plan order, the node whose attrs its kernel takes and the attrs the plan decided."""

    copies: tuple[str, ...]
    kernels: tuple[tuple[str, Any], ...]


# Frames of the plans whose shapes were asked for last, by the plan's id (the plan held with
# it, so the id is its own): a range plan's every new shape reads the same one (about 4 of
# the 10 ms of CPU a new length spent here, for the text workload's encoder).
_FRAMES: dict[int, tuple[Plan, Frame]] = {}
FRAMES = 8


def frame(plan: Plan) -> Frame:
    """The plan's Frame, made once per plan (of the last FRAMES asked for)."""
    held = _FRAMES.get(id(plan))
    if held is not None and held[0] is plan:
        return held[1]
    decided = plan_attrs(plan)
    runs = op_buffers(plan)
    kernels = tuple((runs[p.name][0], decided.get(runs[p.name][0])) for p in ordered_ops(plan))
    made = Frame(tuple(c.tensor for c in arena_layout(plan.graph, plan.tensors).copies), kernels)
    _FRAMES[id(plan)] = (plan, made)
    while len(_FRAMES) > FRAMES:
        _FRAMES.pop(next(iter(_FRAMES)))
    return made


def tables(plan: Plan, graph: Graph) -> tuple[list[list[int]], list[str]]:
    """Per tensor of `plan`'s schedule its shape in `graph`, per op its attrs there; PlanError
    naming what differs when `graph` is no shape of the plan's range."""
    problem = outside_range(plan.graph, graph)
    if problem is not None:
        raise PlanError(f"plan {plan.graph.name!r} cannot run these shapes: {problem}")
    made = frame(plan)
    tensors, nodes = graph.tensor_map, graph.node_map
    shapes = [list(t.shape) for t in graph.tensors]
    shapes += [list(tensors[c].shape) for c in made.copies]
    return shapes, [encode_attrs(graph, nodes[kernel], decided) if kernel else ""
                    for kernel, decided in made.kernels]
