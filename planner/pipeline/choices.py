"""The step graph a plan embeds: what planning chooses for the target (its cores, the
convolution layouts the costs measured faster, the ranks' collectives) and the passes of
planner.graph.step under those choices.
"""

from __future__ import annotations

from planner.costs import CostTable
from planner.costs.conv_layouts import alternatives, chosen_layouts
from planner.errors import PlanError
from planner.graph.evaluation import evaluation_graph
from planner.graph.step import StepChoices
from planner.graph.step import step_graph as step_passes
from planner.ir.accumulation import micro_batches
from planner.ir.graph import Graph
from planner.pipeline.backends import BACKENDS
from planner.pipeline.options import PlanOptions
from planner.schedule.parallel import DataParallelOptions, chosen_collectives
from planner.target.backends import channel_block, traits
from planner.target.records import Target


def step_graph(graph: Graph, target: Target,
               data_parallel: DataParallelOptions | None = None,
               costs: CostTable | None = None) -> Graph:
    """The graph a step on `target` runs: the step graph's passes (planner.graph.step) under
    what planning chooses for the target (`step_choices`). A planning decision, as the target
    is: the plan embeds this graph, and everything that prices or plans a graph for a target
    (plan, fit, profile) runs this stage."""
    return step_passes(graph, step_choices(graph, target, data_parallel, costs))


def step_choices(graph: Graph, target: Target, data_parallel: DataParallelOptions | None = None,
                 costs: CostTable | None = None) -> StepChoices:
    """What the step graph's passes read: the target's CPU cores (planner.graph.for_cores), on
    a backend whose convolution layouts are chosen the layouts `costs` measured faster
    (planner.costs.conv_layouts; without costs none; where images stay blocked, weighed on
    the step's own graph, and only a few-channel data gradient's), its CPU's
    channel block (planner.graph.blocked) and its BatchNorm's folded Relu
    (planner.graph.fold_norm_relu) and sums (fold_sum_relu) and, with ranks,
    the gradient buckets' collectives (planner.schedule.parallel). PlanError for gradient
    accumulation on a backend whose executor does not run it."""
    data_parallel = data_parallel or DataParallelOptions()
    if micro_batches(graph) > 1:
        if not BACKENDS[target.backend].accumulates:
            raise PlanError(f"graph {graph.name!r} accumulates gradients over "
                            f"{micro_batches(graph)} micro-batches; the {target.backend} "
                            f"executor does not run that yet: plan it for a CPU target")
    cpu_kernels = traits(target).conv_layouts
    block = channel_block(target)
    choices = StepChoices(cores=target.step_cores,
                          collectives=chosen_collectives(graph, target, data_parallel),
                          channel_block=block, relu_folds=cpu_kernels)
    if not cpu_kernels or costs is None or alternatives(graph, bool(block)) is graph:
        return choices
    # Where the step keeps images blocked, the profile measured each convolution with its
    # operands' layouts: the layouts are weighed on the step's own graph, whose tensors the
    # one layout weighed there (image_columns) leaves as they are.
    weighed = step_passes(graph, choices) if block else graph
    return choices.model_copy(update={"layouts": chosen_layouts(weighed, costs, bool(block))})


def priced_graphs(graph: Graph, target: Target, options: PlanOptions | None = None,
                  evaluation: bool = True) -> tuple[Graph, ...]:
    """The graphs whose ops `plan(graph, target, ..., options, evaluation=)` prices: the step's
    graph (both convolution layouts left to the costs) and a training plan's evaluation graph
    (what measured costs are asked for: planner.costs.host_costs)."""
    options = options or PlanOptions()
    step = step_graph(graph, target, options.data_parallel)
    if evaluation and step.kind == "training" and options.data_parallel.ranks == 1:
        return step, evaluation_graph(step)
    return (step,)
