"""The front end's rewrites: what a graph becomes after autodiff (a training graph, or the
graph `autodiff.gradients` differentiates for gradient checks and the vjp cut) or, for an
inference graph, after --keep. This folder's modules are the passes, and PASSES, below, names
them in the order they run, each with the graphs it rewrites (tests/test_pass_lists.py holds
the two, and the docs' copies of the list, together):

    PASSES = (lstm_grads, slice_grads, weight_grads, softmax_fusion, in_place, transpose_fold,
              precision, fold_bias, fold_conv_bias)

    lstm_grads       gradients, training: the two-way sum of an unrolled LSTM step's h
                     gradient is read by the step's LSTMCellGrad itself
    slice_grads      gradients, training: a sum of slice gradients that tile one axis (an
                     unrolled RNN's per-step pieces of one tensor) becomes one Concat
    weight_grads     gradients, training: a weight's gradient summed over many GEMMs (an RNN's
                     time steps) becomes one GEMM over the concatenated rows
    softmax_fusion   every graph: attention's Scale -> CausalMask -> Softmax and its gradient
                     chain become ScaledSoftmax and ScaledSoftmaxGrad
    in_place         gradients, training: next values of params, optimizer state and BatchNorm
                     running statistics carry `updates=<persistent tensor>` and its role
    transpose_fold   gradients, training: a Transpose read only by MatMuls, or of a MatMul's
                     result read by nothing else (attention's head splits and merges, forward
                     and backward), becomes strides of those GEMMs; after in_place, which would
                     give a reshaped forward tensor its old record
    precision        training: the precision policy's casts (fp32: none)
    fold_bias        training, inference: a MatMul's BiasAdd over the last axis and Relu
                     become its bias input and activation
    fold_conv_bias   training, inference: a Conv2D's BiasAdd over the channels and Relu become
                     its bias input and activation

A differentiated graph is checked (planner.graph.validate) after each pass that changed it
(`rewritten`). Every command that plans, profiles, writes or checks an inference graph
(`planner graph`, `plan`, `profile`, `verify --graph`) calls `inference_rewrites`, so all of
them see the graph the plan's digest names; training graphs pass through it unchanged (autodiff
has rewritten them already), and so does a graph with nothing to rewrite. What depends on the
CPU cores a step runs on is planning's (planner/step/): a graph does not depend on the target.

Example:
    >>> from planner.graph.builder import GraphBuilder
    >>> b = GraphBuilder("linear")
    >>> x, w, bias = b.input("x", (4, 3)), b.param("w", (3, 2)), b.param("bias", (2,))
    >>> s = b.op("BiasAdd", [b.op("MatMul", [x, w], name="fc"), bias], {"axis": -1}, name="add")
    >>> y = b.op("Softmax", [b.op("Scale", [s], {"factor": 0.5}, name="scale")], name="probs")
    >>> [(n.name, n.op) for n in inference_rewrites(b.build(outputs=[y])).nodes]
    [('fc', 'MatMul'), ('probs', 'ScaledSoftmax')]
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from planner.frontend.passes.fold_bias import fold_bias_adds
from planner.frontend.passes.fold_conv_bias import fold_conv_biases
from planner.frontend.passes.in_place import mark_in_place
from planner.frontend.passes.lstm_grads import fold_lstm_dh_sums
from planner.frontend.passes.precision import apply_precision
from planner.frontend.passes.slice_grads import join_slice_gradients
from planner.frontend.passes.softmax_fusion import fuse_softmax
from planner.frontend.passes.transpose_fold import fold_transposes
from planner.frontend.passes.weight_grads import batch_weight_gradients
from planner.graph.validate import check_graph
from planner.ir.graph import Graph


@dataclass(frozen=True)
class Differentiated:
    """What the passes after differentiation read besides the graph: the forward graph, the
    persistent tensors' next values (in_place) and the precision policy."""

    forward: Graph
    marks: Mapping[str, str]
    precision: str = "fp32"


# An inference graph's passes are given no Differentiated (None): they read none.
FrontEndPass = Callable[[Graph, Differentiated], Graph]

# The graphs a pass rewrites: autodiff.gradients' ("gradients"), make_training_graph's
# ("training"), an inference graph ("inference").
DIFFERENTIATED = ("gradients", "training")
EVERY = ("gradients", "training", "inference")

# The passes in order, each by the name of this folder's module that holds it, with the graphs
# it rewrites (module docstring).
PASSES: tuple[tuple[str, tuple[str, ...], FrontEndPass], ...] = (
    ("lstm_grads", DIFFERENTIATED, lambda g, d: fold_lstm_dh_sums(g)),
    ("slice_grads", DIFFERENTIATED, lambda g, d: join_slice_gradients(g)),
    ("weight_grads", DIFFERENTIATED, lambda g, d: batch_weight_gradients(g)),
    ("softmax_fusion", EVERY, lambda g, d: fuse_softmax(g)),
    ("in_place", DIFFERENTIATED, lambda g, d: mark_in_place(g, d.forward, d.marks)),
    ("transpose_fold", DIFFERENTIATED, lambda g, d: fold_transposes(g)),
    ("precision", ("training",), lambda g, d: apply_precision(g, d.precision)),
    ("fold_bias", ("training", "inference"), lambda g, d: fold_bias_adds(g)),
    ("fold_conv_bias", ("training", "inference"), lambda g, d: fold_conv_biases(g)),
)


def passes_of(graphs: str) -> tuple[tuple[str, FrontEndPass], ...]:
    """The passes, in order, that rewrite `graphs` ("gradients", "training", "inference")."""
    return tuple((name, rewrite) for name, kinds, rewrite in PASSES if graphs in kinds)


GRADIENT_PASSES = passes_of("gradients")
TRAINING_PASSES = passes_of("training")
INFERENCE_PASSES = passes_of("inference")


def rewritten(built: Graph, differentiated: Differentiated,
              passes: tuple[tuple[str, FrontEndPass], ...]) -> Graph:
    """`built` through `passes`, checked (planner.graph.validate) after each one that changed
    it, as the front end's passes are (planner.frontend.prepare): a pass that breaks a rule is
    caught where it does."""
    graph = built
    for _, front_end_pass in passes:
        out = front_end_pass(graph, differentiated)
        graph = graph if out is graph else check_graph(out)
    return graph


def inference_rewrites(graph: Graph) -> Graph:
    """`graph` as it is planned (see the module docstring); the front end checks what it
    returns."""
    if graph.kind != "inference":
        return graph
    for _, inference_pass in INFERENCE_PASSES:
        graph = inference_pass(graph, None)
    return graph
