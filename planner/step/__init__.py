"""The step graph: the rewrites that depend on the machine a step runs on, as passes over what
planning chose for it (`StepChoices`), each checking the graph it rewrites once (the front
end's passes are checked by planner.frontend.prepare). This folder's modules are the passes,
and STEP_PASSES, below, names them in the order they run (tests/test_pass_lists.py holds the
two, and the docs' copies of the list, together):

    STEP_PASSES = (for_cores, layouts, fold_norm_relu, fold_conv_leaky, fold_sum_relu,
                   fold_norm_sum, collectives, blocked)

    step_graph(graph, choices):
        graph = for_cores(graph, choices.cores)         # a CPU step's cores (for_cores.py)
        graph = with_layouts(graph, choices.layouts)    # each convolution's kernel layout
                                                        # (layouts.py)
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
                                                        # gathers (collectives/)
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

from collections.abc import Callable

from pydantic import Field

from planner.ir.graph import Graph
from planner.ir.record import Record
from planner.step.blocked import with_blocked
from planner.step.collectives import Collectives, collectives
from planner.step.fold_conv_leaky import fold_conv_leakies
from planner.step.fold_norm_relu import fold_norm_relus
from planner.step.fold_norm_sum import fold_norm_sums
from planner.step.fold_sum_relu import fold_sum_relus
from planner.step.for_cores import for_cores
from planner.step.layouts import with_layouts


class StepChoices(Record):
    """What the step graph's passes read (module docstring)."""

    # The physical CPU cores a step runs on; None: a GPU's step.
    cores: int | None = None
    # Convolution node name -> kernel layout (planner.costs.conv_layouts chooses them).
    layouts: dict[str, str] = {}
    collectives: Collectives = Collectives()
    # The channels per block of the images kept blocked (planner.step.blocked); 0: none.
    channel_block: int = Field(default=0, ge=0)
    # Whether Relus and their gradients fold into the ops before them that the CPU runtime's
    # loops take so: a BatchNorm's (planner.step.fold_norm_relu), a residual sum's
    # (planner.step.fold_sum_relu); a convolution's LeakyRelu into it (oneDNN's post-op,
    # planner.step.fold_conv_leaky); and a residual sum into the BatchNorm before it
    # (planner.step.fold_norm_sum).
    relu_folds: bool = False


StepPass = Callable[[Graph, StepChoices], Graph]

# The passes in order, each by the name of this folder's module that holds it (module
# docstring).
STEP_PASSES: tuple[tuple[str, StepPass], ...] = (
    ("for_cores", lambda g, c: for_cores(g, c.cores)),
    ("layouts", lambda g, c: with_layouts(g, c.layouts)),
    # Before the collectives: a folded BatchNormGrad reads the BatchNorm's bias, which ZeRO-3's
    # rewrite then gives it from the backward's gather, as it does the scale (after it, the
    # fold would read the forward's gathered copy and hold it through the backward).
    ("fold_norm_relu", lambda g, c: fold_norm_relus(g) if c.relu_folds else g),
    ("fold_conv_leaky", lambda g, c: fold_conv_leakies(g) if c.relu_folds else g),
    ("fold_sum_relu", lambda g, c: fold_sum_relus(g) if c.relu_folds else g),
    ("fold_norm_sum", lambda g, c: fold_norm_sums(g) if c.relu_folds else g),
    ("collectives", lambda g, c: collectives(g, c.collectives)),
    ("blocked", lambda g, c: with_blocked(g, c.channel_block)),
)


def step_graph(graph: Graph, choices: StepChoices) -> Graph:
    """`graph` as a step under `choices` runs it (module docstring)."""
    # Each pass checks the graph it rewrites (once), and returns its input when it has
    # nothing to do: checked again here, every rewritten graph would be validated twice.
    for _, step_pass in STEP_PASSES:
        graph = step_pass(graph, choices)
    return graph
