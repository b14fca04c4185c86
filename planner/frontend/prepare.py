"""The front end as one function: a model and its GraphOptions -> the Graph every command plans.

    PASSES = (with_loss, autodiff, kept, inference)

    prepare(model, options):
        graph = imported(model)        # ONNX file, graph JSON, .pt2 or zoo spec (load.py)
        graph = with_loss(graph)       # --loss: a loss on an output, with a label input
        graph = autodiff(graph)        # --train: backward, gradient accumulation, optimizer
                                       # updates, then the training graph's rewrites
                                       # (planner.frontend.passes.TRAINING_PASSES)
        graph = kept(graph)            # --keep: tensors kept to the step's end
        graph = inference(graph)       # an inference graph's rewrites
                                       # (planner.frontend.passes.INFERENCE_PASSES)

A training graph's evaluation graph (its forward part in inference mode, which a training plan
also schedules) is a pass of the same kind, made from this graph by planning:
planner.graph.evaluation.evaluation_graph.

Each pass is a pure function of the graph and the options, and the graph is checked
(planner.graph.validate.check_graph) after every one that changed it, so a pass that breaks a
rule is caught where it does. The target is no input: the same model and options give the
same graph, which `planner graph -o` writes and `planner plan` of that file plans exactly as
`planner plan` of the model (what depends on the step's cores is planned: planner.step.for_cores).

Example:
    >>> from planner.graph.optimizer import Optimizer
    >>> spec = "zoo:mlp?batch=2&hidden=4&in_features=3&classes=2"
    >>> prepare(spec).kind, prepare(spec, GraphOptions(optimizer=Optimizer(kind="sgd"))).kind
    ('inference', 'training')
    >>> prepare(spec, GraphOptions(keep=("relu1",))).outputs
    ('logits', 'loss', 'relu1')
"""

from __future__ import annotations

from collections.abc import Callable

from planner.errors import UserError
from planner.frontend.autodiff import make_training_graph
from planner.frontend.loss import with_loss as attached
from planner.frontend.options import GraphOptions
from planner.frontend.passes import inference_rewrites
from planner.graph.validate import check_graph
from planner.ir.graph import Graph

Pass = Callable[[Graph, GraphOptions], Graph]


def prepare(model: str | Graph, options: GraphOptions | None = None) -> Graph:
    """The graph of `model` (a GRAPH spelling, or a Graph already imported) under `options`
    (module docstring). Raises UserError or ValueError (GraphError, LossError, AutodiffError,
    OnnxImportError) naming the file, node, tensor or flag."""
    options = options or GraphOptions()
    graph = imported(model, options)
    for front_end_pass in PASSES:
        rewritten = front_end_pass(graph, options)
        # A pass with nothing to do returns its input, already checked.
        graph = graph if rewritten is graph else check_graph(rewritten)
    return graph


def imported(model: str | Graph, options: GraphOptions) -> Graph:
    """A GRAPH spelling loaded (planner.frontend.load.load_graph checks what it loads), or the Graph
    itself, checked."""
    if isinstance(model, Graph):
        return check_graph(model)
    from planner.frontend.load import load_graph

    return load_graph(model, options.train_dropout)


def with_loss(graph: Graph, options: GraphOptions) -> Graph:
    return attached(graph, options.loss)


def autodiff(graph: Graph, options: GraphOptions) -> Graph:
    if options.optimizer is None:
        return graph
    return make_training_graph(graph, options.optimizer, precision=options.precision,
                               loss_scaling=options.loss_scaling, accumulate=options.accumulate)


def kept(graph: Graph, options: GraphOptions) -> Graph:
    return with_kept(graph, list(options.keep))


def with_kept(graph: Graph, names: list[str] | None) -> Graph:
    """The graph with tensors `names` added to its outputs, which the plan keeps to the end of
    the step (no later tensor reuses their bytes), so that an executor's step returns them;
    UserError naming a tensor the graph does not have.

    >>> from planner.zoo import build
    >>> g = build("mlp", batch=2, hidden=[4], in_features=3, classes=2)
    >>> with_kept(g, ["relu1"]).outputs
    ('logits', 'loss', 'relu1')
    """
    if not names:
        return graph
    tensors = graph.tensor_map
    for name in names:
        if name not in tensors:
            raise UserError(f"--keep: graph {graph.name!r} has no tensor {name!r}")
    kept = tuple(dict.fromkeys((*graph.outputs, *names)))
    return check_graph(graph.model_copy(update={"outputs": kept}))


def inference(graph: Graph, options: GraphOptions) -> Graph:
    # After --keep: a kept intermediate stays (training graphs pass through unchanged).
    return inference_rewrites(graph)


PASSES: tuple[Pass, ...] = (with_loss, autodiff, kept, inference)
