"""The evaluation schedule of a training plan (Plan.evaluation, planner/evaluation.py) as the
tree's evaluation.cpp: the same tables as schedule.cpp (templates/common/schedule.cpp.j2),
exported as `planner_evaluation_schedule` from the same schedule library, with

    bound tensors   store TRAINING_ARENA, at the training schedule's offset of the tensor of
                    that name: an evaluation reads the parameters the step trains, no copy
    own tensors     offsets from the evaluation arena's start (the plan's arena_offset, down
                    to a multiple of 256), which holds activations: arena_bytes is the plan's
                    less that start
    plan JSON       none of its own (schedule.cpp holds the training plan, evaluation included)

Example:
    >>> from planner.graph.optimizer import Optimizer
    >>> from planner.frontend.prepare import GraphOptions, prepare
    >>> from planner.pipeline import plan
    >>> from planner.target import preset
    >>> p = plan(prepare("zoo:mlp?batch=2&hidden=4&in_features=3&classes=2",
    ...                  GraphOptions(optimizer=Optimizer(kind="sgd"))), preset("xeon-8180"))
    >>> from codegen.render import render_files
    >>> text = render_files(p, "mlp")["evaluation.cpp"]
    >>> "planner_evaluation_schedule()" in text, text.count("planner::TRAINING_ARENA")
    (True, 4)
"""

from __future__ import annotations

from typing import Any

from planner.errors import PlanError
from planner.plan import Plan

SYMBOL = "planner_evaluation_schedule"
ARENA_ALIGNMENT = 256


def evaluation_context(plan: Plan, context: dict[str, Any], layout: str = "plan"
                       ) -> dict[str, Any]:
    """The context of evaluation.cpp: `context` (codegen.render.schedule_context of the plan's
    evaluation plan) with its bound tensors in the training arena and its own from the
    evaluation arena's start (module docstring). `layout` is the one the training schedule was
    rendered with, whose offsets the bound tensors take."""
    from codegen.layout import arena_layout, own_layout

    evaluation = plan.evaluation
    if evaluation is None:
        raise PlanError(f"plan {plan.graph.name!r} carries no evaluation schedule")
    training = (arena_layout(plan.graph, plan.tensors) if layout == "plan"
                else own_layout(plan.graph, plan.tensors)).offsets
    graph = evaluation.plan.graph
    bound = {b.tensor: b.training for b in evaluation.bound}
    # The evaluation arena starts at a multiple of the largest alignment an executor asks of a
    # buffer (CUDA's scratch areas, 256 bytes) at or below the plan's arena_offset: allocated
    # aligned, it keeps every buffer's alignment.
    start = evaluation.arena_offset - evaluation.arena_offset % ARENA_ALIGNMENT
    tensors = []
    for row in context["tensors"]:
        t = graph.tensors[row["index"]].name if row["index"] < len(graph.tensors) else ""
        if t in bound:
            row = row | {"offset": training[bound[t]], "store": "TRAINING_ARENA"}
        elif row["store"] == "ARENA":
            row = row | {"offset": row["offset"] - start}
        tensors.append(row)
    ops = [op | {"scratch_offset": op["scratch_offset"] - start} if op["scratch_offset"] >= 0
           else op for op in context["ops"]]
    if any(r["offset"] < 0 for r in tensors) or any(
            op["scratch_bytes"] > 0 > op["scratch_offset"] for op in ops):
        raise PlanError(f"plan {plan.graph.name!r}: its evaluation places bytes below its "
                        f"arena_offset {start}; re-plan it")
    # No plan JSON of its own: schedule.cpp holds the training plan, evaluation included.
    return context | {"tensors": tensors, "ops": ops,
                      "arena_bytes": context["arena_bytes"] - start, "plan_c": '""',
                      "symbol": SYMBOL}
