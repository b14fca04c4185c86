"""The step graph a plan embeds: what planning chooses for the target (its cores, the
convolution layouts the costs measured faster, the ranks' collectives) and the passes of
planner.step under those choices.
"""

from __future__ import annotations

from typing import Any

from planner.costs import CostTable
from planner.costs.conv_layouts import alternatives, chosen_layouts
from planner.errors import PlanError
from planner.graph.evaluation import evaluation_graph
from planner.ir.accumulation import micro_batches
from planner.ir.graph import Graph
from planner.pipeline.backends import BACKENDS
from planner.pipeline.options import PlanOptions
from planner.schedule.parallel import DataParallelOptions, chosen_collectives
from planner.step import StepChoices
from planner.step import step_graph as step_passes
from planner.target.backends import channel_block, traits
from planner.target.records import Target


def step_graph(graph: Graph, target: Target,
               data_parallel: DataParallelOptions | None = None,
               costs: CostTable | None = None) -> Graph:
    """The graph a step on `target` runs: the step graph's passes (planner.step) under
    what planning chooses for the target (`step_choices`). A planning decision, as the target
    is: the plan embeds this graph, and everything that prices or plans a graph for a target
    (plan, fit, profile) runs this stage."""
    return step_passes(graph, step_choices(graph, target, data_parallel, costs))


def step_choices(graph: Graph, target: Target, data_parallel: DataParallelOptions | None = None,
                 costs: CostTable | None = None) -> StepChoices:
    """What the step graph's passes read: the target's CPU cores (planner.step.for_cores), on
    a backend whose convolution layouts are chosen the layouts `costs` measured faster
    (planner.costs.conv_layouts; without costs none; where images stay blocked, weighed on
    the step's own graph, and only a few-channel data gradient's), its CPU's
    channel block (planner.step.blocked) and its BatchNorm's folded Relu
    (planner.step.fold_norm_relu) and sums (fold_sum_relu) and, with ranks,
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


def recorded_choices(graph: Graph, data: Any) -> StepChoices:
    """The step graph's choices (planner.step) that the plan `data` records: its CPUs'
    cores, the convolution layouts on nodes of the same name (planner.costs.conv_layouts), the
    channel block of its blocked images (planner.step.blocked), a CPU plan's BatchNorm Relus
    (planner.step.fold_norm_relu) and, for a data-parallel plan, its collectives as planning
    chooses them for its options on its target (a preset: a plan names its target, not its
    whole description). ValueError for
    what cannot be re-derived; data that is no plan gives none (verify_plan_text reports it)."""
    from planner.costs.conv_layouts import CONVOLUTIONS
    from planner.schedule.parallel import DataParallelOptions, chosen_collectives
    from planner.target.presets import PRESETS, preset

    try:
        recorded = {n["name"]: n["attrs"]["layout"] for n in data["graph"]["nodes"]
                    if "layout" in n["attrs"]}
        parallel = DataParallelOptions.model_validate(
            data["provenance"]["options"].get("data_parallel", {}))
        name = data["target"]["name"]
    except (KeyError, TypeError, AttributeError, ValueError):
        return StepChoices(cores=step_cores(data))
    layouts = {n.name: recorded[n.name] for n in graph.nodes
               if n.op in CONVOLUTIONS and isinstance(recorded.get(n.name), str)}
    block = recorded_block(data)
    # A CPU plan folds Relus into its BatchNorms and sums, and sums into BatchNorms
    # (planner.step.fold_norm_relu, fold_sum_relu, fold_norm_sum), as planning chose.
    cpu = step_cores(data) is not None
    if parallel.ranks == 1:
        return StepChoices(cores=step_cores(data), layouts=layouts, channel_block=block,
                           relu_folds=cpu)
    if name not in PRESETS:
        raise ValueError(f"a data-parallel plan's buckets are sized for its target; {name!r} "
                         f"is no preset: verify the plan without --graph")
    return StepChoices(cores=step_cores(data), layouts=layouts, channel_block=block,
                       relu_folds=cpu,
                       collectives=chosen_collectives(graph, preset(name), parallel))


def recorded_block(data: Any) -> int:
    """The channel block of the images a plan's graph keeps blocked (planner.step.blocked);
    0 where it keeps none, or names a layout that is none."""
    from typing import get_args

    from planner.ir.graph import BlockedLayout, channel_block

    tensors = data["graph"].get("tensors") if isinstance(data["graph"], dict) else None
    layouts = {t.get("layout") for t in tensors or () if isinstance(t, dict)}
    known = sorted(layouts & set(get_args(BlockedLayout)))
    return channel_block(known[0]) if known else 0


def step_cores(data: Any) -> int | None:
    """The physical cores a CPU plan's data names (its logical CPUs' cores); None for a GPU
    plan or data that is no plan (verify_plan_text reports what is malformed)."""
    from planner.target.backends import BACKEND_TRAITS

    try:
        return (len(set(data["target"]["core_of"])) or None) \
            if BACKEND_TRAITS[data["backend"]].host_cores else None
    except (KeyError, TypeError):
        return None
