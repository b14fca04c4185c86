"""The step graph: the rewrites that depend on the machine a step runs on, as passes over what
planning chose for it (`StepChoices`), each checking the graph it rewrites once (the front
end's passes are checked by planner.frontend.prepare).

    step_graph(graph, choices):
        graph = for_cores(graph, choices.cores)         # a CPU step's cores (for_cores.py)
        graph = with_layouts(graph, choices.layouts)    # each convolution's kernel layout
        graph = fold_norm_relus(graph) if choices.relu_folds else graph
                                                        # a BatchNorm's Relu and its gradient
                                                        # in its loops (fold_norm_relu.py)
        graph = fold_conv_leakies(graph) if choices.relu_folds else graph
                                                        # a convolution's LeakyRelu as
                                                        # oneDNN's post-op (fold_conv_leaky.py)
        graph = fold_sum_relus(graph) if choices.relu_folds else graph
                                                        # a residual sum's Relu and its
                                                        # gradient in the sums (fold_sum_relu.py)
        graph = fold_norm_sums(graph) if choices.relu_folds else graph
                                                        # a residual sum in the BatchNorm
                                                        # before it (fold_norm_sum.py)
        graph = collectives(graph, choices.collectives) # the ranks' gradient buckets: all-reduces,
                                                        # ZeRO-1's sharded updates or ZeRO-3's
                                                        # gathers (planner.graph.data_parallel)
        graph = with_blocked(graph, choices.channel_block)  # activations kept channel-blocked
                                                            # between the kernels that take
                                                            # them so (blocked.py)

The choices are planning's (planner.pipeline.step_choices: the target's cores, the layouts the
costs measured faster, the buckets the link's model sizes, the CPU's channel block, whether the
backend's BatchNorm and sums take a folded Relu and sum);
`planner verify --graph` makes the same graph from the choices a plan records. The passes are
pure: no target, no cost table.

Example:
    >>> from planner.frontend.prepare import prepare
    >>> from planner.frontend.options import GraphOptions
    >>> from planner.graph.optimizer import Optimizer
    >>> g = prepare("zoo:mlp?batch=4&hidden=8&in_features=4&classes=2",
    ...             GraphOptions(optimizer=Optimizer(kind="sgd")))
    >>> step = step_graph(g, StepChoices(collectives=Collectives(ranks=2, bucket_bytes=1 << 20)))
    >>> sorted({n.op for n in step.nodes} - {n.op for n in g.nodes})
    ['AllReduce']
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Literal

from pydantic import Field

from planner.graph.blocked import with_blocked
from planner.graph.data_parallel import buckets, with_all_reduce, with_sharded_updates
from planner.graph.fold_conv_leaky import fold_conv_leakies
from planner.graph.fold_norm_relu import fold_norm_relus
from planner.graph.fold_norm_sum import fold_norm_sums
from planner.graph.fold_sum_relu import fold_sum_relus
from planner.graph.for_cores import for_cores
from planner.graph.sharded_parameters import with_sharded_parameters
from planner.graph.validate import check_graph
from planner.ir.graph import Graph
from planner.ir.record import Record
from planner.ops.collective import DEFAULT_ALIGNMENT


class Collectives(Record):
    """The data-parallel rewrite planning chose: how many ranks, which rewrite, the buckets'
    size limit (1 rank: none)."""

    ranks: int = Field(default=1, ge=1)
    ranks_per_host: int = Field(default=1, ge=1)
    rewrite: Literal["all-reduce", "sharded-updates", "sharded-parameters"] = "all-reduce"
    bucket_bytes: int = Field(default=0, ge=0)
    # The bytes ZeRO-1's buckets are aligned to: the arena's (the backend's bucket_alignment,
    # planner.target.backends; planner.graph.data_parallel).
    alignment: int = Field(default=DEFAULT_ALIGNMENT, ge=4)


class StepChoices(Record):
    """What the step graph's passes read (module docstring)."""

    # The physical CPU cores a step runs on; None: a GPU's step.
    cores: int | None = None
    # Convolution node name -> kernel layout (planner.costs.conv_layouts chooses them).
    layouts: dict[str, str] = {}
    collectives: Collectives = Collectives()
    # The channels per block of the images kept blocked (planner.graph.blocked); 0: none.
    channel_block: int = Field(default=0, ge=0)
    # Whether Relus and their gradients fold into the ops before them that the CPU runtime's
    # loops take so: a BatchNorm's (planner.graph.fold_norm_relu), a residual sum's
    # (planner.graph.fold_sum_relu); a convolution's LeakyRelu into it (oneDNN's post-op,
    # planner.graph.fold_conv_leaky); and a residual sum into the BatchNorm before it
    # (planner.graph.fold_norm_sum).
    relu_folds: bool = False


def with_layouts(graph: Graph, layouts: Mapping[str, str]) -> Graph:
    """`graph` with `layouts[name]` as the layout attr of each named node there, checked (a
    value the op refuses is an error naming the node)."""
    if not layouts:
        return graph
    nodes = tuple(n.model_copy(update={"attrs": {**n.attrs, "layout": layouts[n.name]}})
                  if n.name in layouts else n for n in graph.nodes)
    return check_graph(graph.model_copy(update={"nodes": nodes}))


def collectives(graph: Graph, choice: Collectives) -> Graph:
    """`graph` with the gradient buckets' collectives `choice` names (none for one rank)."""
    if choice.ranks == 1:
        return graph
    bucket_list = buckets(graph, choice.bucket_bytes)
    if choice.rewrite == "sharded-parameters":
        return with_sharded_parameters(graph, bucket_list, choice.ranks, choice.ranks_per_host)
    if choice.rewrite == "sharded-updates":
        return with_sharded_updates(graph, bucket_list, choice.ranks, choice.ranks_per_host,
                                    choice.alignment)
    return with_all_reduce(graph, bucket_list, choice.ranks, choice.ranks_per_host)


StepPass = Callable[[Graph, StepChoices], Graph]

STEP_PASSES: tuple[tuple[str, StepPass], ...] = (
    ("for cores", lambda g, c: for_cores(g, c.cores)),
    ("conv layouts", lambda g, c: with_layouts(g, c.layouts)),
    # Before the collectives: a folded BatchNormGrad reads the BatchNorm's bias, which ZeRO-3's
    # rewrite then gives it from the backward's gather, as it does the scale (after it, the
    # fold would read the forward's gathered copy and hold it through the backward).
    ("norm activations", lambda g, c: fold_norm_relus(g) if c.relu_folds else g),
    ("conv activations", lambda g, c: fold_conv_leakies(g) if c.relu_folds else g),
    ("sum activations", lambda g, c: fold_sum_relus(g) if c.relu_folds else g),
    ("norm sums", lambda g, c: fold_norm_sums(g) if c.relu_folds else g),
    ("collectives", lambda g, c: collectives(g, c.collectives)),
    ("blocked images", lambda g, c: with_blocked(g, c.channel_block)),
)


def step_graph(graph: Graph, choices: StepChoices) -> Graph:
    """`graph` as a step under `choices` runs it (module docstring)."""
    # Each pass checks the graph it rewrites (once), and returns its input when it has
    # nothing to do: checked again here, every rewritten graph would be validated twice.
    for _, step_pass in STEP_PASSES:
        graph = step_pass(graph, choices)
    return graph
