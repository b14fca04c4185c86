"""A training plan's evaluation schedule: its evaluation graph (planner.graph.evaluation: the
forward part in inference mode) planned by the same driver for the same target and costs,
with every parameter and state tensor bound to the training plan's tensor of the same name.

    evaluation = Evaluation(
        plan=plan(evaluation_graph(training.graph)),   # ops, lanes, edges, tensors of its own
        bound=[Binding(tensor=p, training=p) ...],     # params and states: the training bytes
        arena_offset=...)                              # where its activations start

Memory planning puts persistent tensors at the arena's bottom (planner/memory/layout.py), so
the bound tensors are a prefix of the evaluation plan's arena that the executor does not
allocate: its evaluation arena is [arena_offset, arena_bytes) of the plan's, activations only.
`planner verify` re-derives all of it from the training plan's embedded graph
(planner/verify/evaluation.py). A data-parallel plan's evaluation has no collective but a
ZeRO-3 plan's all-gathers of the parameter shards (every rank evaluates together): each rank
evaluates its own shard of the data on its own share of the cores, and reducing the metrics
(a loss, a count of right answers) is the caller's, with torch.distributed.

Example:
    >>> from planner.graph.optimizer import Optimizer
    >>> from planner.frontend.prepare import GraphOptions, prepare
    >>> from planner.pipeline import plan
    >>> from planner.target import preset
    >>> g = prepare("zoo:mlp?batch=2&hidden=4&in_features=3&classes=2",
    ...             GraphOptions(optimizer=Optimizer(kind="sgd")))
    >>> e = plan(g, preset("xeon-8180")).evaluation
    >>> [op.name for op in e.plan.ops], [b.training for b in e.bound]
    (['fc1', 'fc2', 'loss'], ['fc1/bias', 'fc1/weight', 'fc2/bias', 'fc2/weight'])
"""

from __future__ import annotations

from collections.abc import Callable

from planner.graph.evaluation import evaluation_graph
from planner.ir.graph import Graph
from planner.plan import Binding, Evaluation, Plan

# The roles an evaluation reads from the training plan's arena.
BOUND_ROLES = ("param", "state")


def plan_evaluation(training: Graph, planned: Callable[[Graph], Plan]) -> Evaluation:
    """The evaluation schedule of the training graph `training` as planned (after
    step_graph); `planned` plans a graph as the training step was (planner.pipeline: the
    same target, costs and scheduler switches, no memory budget)."""
    return bind(planned(evaluation_graph(training)))


def bind(evaluation: Plan) -> Evaluation:
    """`evaluation` with its parameter and state tensors bound to the training plan's of the
    same name, and the start of the bytes that are its own."""
    persistent = {t.name for t in evaluation.graph.by_role(*BOUND_ROLES)}
    bound = tuple(Binding(tensor=t.name, training=t.tensor) for t in evaluation.tensors
                  if t.tensor in persistent and t.name == t.tensor)
    names = {b.tensor for b in bound}
    own = [t for t in evaluation.tensors if t.name not in names]
    below = max((t.offset + t.bytes for t in evaluation.tensors if t.name in names), default=0)
    start = min((t.offset for t in own if t.placement == "device"), default=below)
    # Offsets are aligned: the executor's evaluation arena keeps every tensor's alignment.
    return Evaluation(plan=evaluation, bound=bound, arena_offset=start if start >= below else 0)
