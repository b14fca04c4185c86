"""Autodiff: training-graph structure, gradients against finite differences (float64) for every
differentiable op and for small zoo models, optimizer updates, BatchNorm running statistics,
and the training-graph summary."""

from __future__ import annotations

import numpy as np
import pytest

from planner.frontend.autodiff import (
    AutodiffError,
    find_loss,
    gradients,
    make_training_graph,
)
from planner.frontend.passes.fold_bias import fold_bias_adds
from planner.frontend.passes.fold_conv_bias import fold_conv_biases
from planner.graph import GraphBuilder, check_graph
from planner.graph.interpret import init_params, random_feeds, run, train_step
from planner.graph.optimizer import Optimizer
from planner.graph.summary import summarize
from planner.ir.graph import Graph, Node, Tensor
from planner.ir.phases import node_phase
from planner.ops import REGISTRY, get_op
from tests.zoo.small_configs import SMALL_TRAINING

SGD = Optimizer(kind="sgd", lr=0.1)


def rel_error(actual: np.ndarray, expected: np.ndarray) -> float:
    """||actual - expected|| / ||expected|| (absolute when expected is zero)."""
    scale = float(np.linalg.norm(expected))
    return float(np.linalg.norm(np.asarray(actual) - expected)) / (scale if scale > 0 else 1.0)


def as_float64(graph: Graph) -> Graph:
    """The same graph computing in float64 (tensors and dtype attrs), for gradient checks."""
    def wide(dtype: str) -> str:
        return "float64" if dtype == "float32" else dtype

    tensors = tuple(t.model_copy(update={"dtype": wide(t.dtype)}) for t in graph.tensors)
    nodes = tuple(n.model_copy(update={"attrs": {k: wide(v) if k == "dtype" else v
                                                 for k, v in n.attrs.items()}})
                  for n in graph.nodes)
    return check_graph(Graph(name=graph.name, kind=graph.kind, tensors=tensors, nodes=nodes,
                             outputs=graph.outputs))


def tiny_mlp(loss_op: str = "SoftmaxCrossEntropy") -> Graph:
    """x (4, 3) -> MatMul -> BiasAdd -> Relu -> MatMul -> loss."""
    b = GraphBuilder("tiny_mlp")
    x = b.input("x", (4, 3))
    w1, b1 = b.param("w1", (3, 5), init="glorot"), b.param("b1", (5,), init="zeros")
    w2 = b.param("w2", (5, 2), init="glorot")
    h = b.op("Relu", [b.op("BiasAdd", [b.op("MatMul", [x, w1], name="fc1"), b1])])
    logits = b.op("MatMul", [h, w2], name="logits")
    if loss_op == "SoftmaxCrossEntropy":
        labels = b.label("labels", (4,))
    else:
        labels = b.label("targets", (4, 2), dtype="float32")
    loss = b.op(loss_op, [logits, labels], name="loss")
    return b.build(outputs=[logits, loss])


# ---- structure ------------------------------------------------------------------------------

def test_training_graph_layout_and_roles():
    g = make_training_graph(tiny_mlp(), Optimizer(kind="momentum", lr=0.1))
    assert g.kind == "training" and g.outputs == ("logits", "loss")
    phases = [node_phase(g, n) for n in g.nodes]
    # forward, then backward, then updates: each phase one contiguous run
    assert phases == sorted(phases, key=["forward", "backward", "update"].index)
    assert phases.count("update") == 3
    for n in g.nodes:
        assert n.name.startswith({"forward": "", "backward": "grad/", "update": "update/"}[
            node_phase(g, n)])
    assert all(t.role == "grad" for n in g.nodes if node_phase(g, n) == "backward"
               for t in map(g.tensor, n.outputs))
    for p in ("w1", "b1", "w2"):
        new, vel = g.tensor(f"update/{p}"), g.tensor(f"optim/{p}/velocity")
        assert (new.updates, new.role) == (p, "param")
        assert (vel.role, vel.init, vel.shape) == ("optimizer-state", "zeros", g.tensor(p).shape)
        assert g.tensor(f"update/{p}/velocity").updates == vel.name


def test_only_what_is_needed_is_differentiated():
    g = make_training_graph(tiny_mlp(), SGD)
    backward = [n for n in g.nodes if node_phase(g, n) == "backward"]
    # nothing flows into the input x or the labels
    fc1_grads = [n for n in backward if n.name.startswith("grad/fc1/")]
    assert len(fc1_grads) == 1 and "x" in fc1_grads[0].inputs
    assert not any(node_phase(g, n) == "backward" and set(n.outputs) & {"x", "labels"}
                   for n in g.nodes)
    # a branch that does not reach the loss gets no gradient, and its param no update
    b = GraphBuilder("side")
    x = b.input("x", (2, 3))
    w, unused = b.param("w", (3, 2)), b.param("unused", (3, 2))
    side = b.op("MatMul", [x, unused], name="side")
    loss = b.op("MSE", [b.op("MatMul", [x, w]), b.input("t", (2, 2))], name="loss")
    g = make_training_graph(b.build(outputs=[side, loss]), SGD)
    assert "update/w" in g.tensor_map and "update/unused" not in g.tensor_map
    assert not any(n.name.startswith("grad/side") for n in g.nodes)


def test_gradients_of_a_tensor_read_twice_are_summed_with_addn():
    b = GraphBuilder("twice")
    x, w = b.input("x", (2, 3)), b.param("w", (3, 3), init="glorot")
    h = b.op("MatMul", [x, w], name="h")
    y = b.op("Add", [b.op("Relu", [h]), b.op("Tanh", [h])], name="y")
    loss = b.op("MSE", [y, b.input("t", (2, 3))], name="loss")
    g = make_training_graph(b.build(outputs=[loss]), SGD)
    sums = [n for n in g.nodes if n.op == "AddN"]
    assert [n.name for n in sums] == ["grad/h/sum"] and len(sums[0].inputs) == 2


def test_training_graph_is_deterministic():
    first = make_training_graph(tiny_mlp(), Optimizer(kind="adam")).to_json()
    assert make_training_graph(tiny_mlp(), Optimizer(kind="adam")).to_json() == first
    assert Graph.from_json(first).to_json() == first


def test_missing_loss_is_an_error_naming_the_outputs():
    b = GraphBuilder("noloss")
    y = b.op("MatMul", [b.input("x", (2, 3)), b.param("w", (3, 2))], name="y")
    with pytest.raises(AutodiffError, match=r"none of its outputs \['y'\]"):
        make_training_graph(b.build(outputs=[y]), SGD)
    assert find_loss(tiny_mlp()) == "loss"


def test_op_without_gradient_rule_on_the_path_is_named():
    b = GraphBuilder("nograd")
    x, w = b.input("x", (2, 3)), b.param("w", (3, 3))
    h = b.op("MatMul", [x, w])
    y = b.op("ReluGrad", [h, h], name="odd")
    loss = b.op("MSE", [y, b.input("t", (2, 3))], name="loss")
    with pytest.raises(AutodiffError, match=r"node 'odd': op ReluGrad has no gradient rule"):
        make_training_graph(b.build(outputs=[loss]), SGD)


def test_loss_that_depends_on_no_param_is_an_error():
    b = GraphBuilder("noparam")
    loss = b.op("MSE", [b.input("x", (2, 3)), b.input("t", (2, 3))], name="loss")
    with pytest.raises(AutodiffError, match="depends on no param"):
        make_training_graph(b.build(outputs=[loss]), SGD)


def test_training_graph_cannot_be_trained_again():
    g = make_training_graph(tiny_mlp(), SGD)
    with pytest.raises(AutodiffError, match="already a training graph"):
        make_training_graph(g, SGD)


# ---- finite differences, op by op -------------------------------------------------------------

def F(*shape):  # noqa: N802  (a float input, standard normal)
    return ("normal", shape)


def P(*shape):  # noqa: N802  (a float input kept away from 0: variances, divisors)
    return ("positive", shape)


def U(*shape):  # noqa: N802  (a float input in (0, 1): probabilities)
    return ("unit", shape)


def I(bound, *shape):  # noqa: N802, E743  (int64 ids in [0, bound))
    return ("ids", shape, bound)


# op -> list of (inputs, attrs, indices of the outputs to differentiate or None for all,
# indices of the inputs to differentiate or None for every float differentiable one)
OP_CASES: dict[str, list[tuple]] = {
    "Add": [([F(2, 3), F(3)], {}, None, None), ([F(2, 1, 3), F(4, 1)], {}, None, None)],
    "Sub": [([F(2, 3), F(2, 1)], {}, None, None)],
    "Mul": [([F(2, 3), F(1, 3)], {}, None, None)],
    "Div": [([F(2, 3), P(2, 3)], {}, None, None)],
    "AddN": [([F(2, 3), F(2, 3), F(2, 3)], {}, None, None)],
    "Neg": [([F(2, 3)], {}, None, None)],
    "Scale": [([F(2, 3)], {"factor": -1.5}, None, None)],
    # Cast: identity in value at float64 (the widened check); bf16 rounding has derivative 1 a.e.
    "Cast": [([F(2, 3)], {"to": "float64"}, None, None)],
    "Expand": [([F(3, 1)], {"shape": [2, 3, 4]}, None, None)],
    "MatMul": [([F(3, 4), F(4, 2)], {}, None, None),
               ([F(4, 3), F(2, 4)], {"transpose_a": True, "transpose_b": True}, None, None),
               ([F(2, 3, 4), F(4, 2)], {}, None, None),
               ([F(2, 1, 3, 4), F(3, 4, 2)], {}, None, None)],
    "BiasAdd": [([F(2, 3, 2, 2), F(3)], {}, None, None), ([F(4, 3), F(3)], {}, None, None)],
    "Abs": [([F(3, 4)], {}, None, None)],
    "Sign": [([F(3, 4)], {}, None, None)],
    # A draw's derivative in p is zero almost everywhere (p moved by the finite difference's
    # step flips no draw at this seed), as torch's zero gradient for bernoulli.
    "Bernoulli": [([U(3, 4)], {"seed": 3}, None, None)],
    "Exp": [([F(3, 4)], {}, None, None)],
    "Log": [([P(3, 4)], {}, None, None)],
    "Sqrt": [([P(3, 4)], {}, None, None)],
    "Clip": [([F(3, 4)], {"min": -0.5, "max": 0.7}, None, None), ([F(3, 4)], {"max": 0.1}, None,
                                                                   None)],
    "Pad": [([F(2, 3)], {"pads": [1, 0, 2, 1]}, None, None),
            ([F(2, 4)], {"pads": [0, 2, 1, 3], "mode": "reflect"}, None, None),
            ([F(2, 3)], {"pads": [1, 2, 0, 2], "mode": "edge"}, None, None)],
    "Relu": [([F(3, 4)], {}, None, None)],
    "Pow": [([P(2, 3), F(3)], {}, None, None)],
    "Max": [([F(2, 3), F(2, 1)], {}, None, None)],
    "Min": [([F(2, 3), F(3)], {}, None, None)],
    "Erf": [([F(3, 4)], {}, None, None)],
    "Gelu": [([F(3, 4)], {}, None, None), ([F(3, 4)], {"approximate": "tanh"}, None, None)],
    "LayerNorm": [([F(2, 3, 4), F(4), F(4)], {}, [0], None),
                  ([F(2, 3, 4), F(3, 4)], {"axis": 1, "epsilon": 0.1}, [0], None)],
    "Resize": [([F(1, 2, 3, 4)], {"sizes": [6, 7], "mode": "linear"}, None, None),
               ([F(1, 2, 3, 4)], {"sizes": [2, 5], "coordinate_mode": "asymmetric"}, None,
                None)],
    "GroupNorm": [([F(2, 4, 3), F(4), F(4)], {"groups": 2}, [0], None)],
    # grid points standard normal: a third outside [-1, 1] (zeros, clamped, reflected)
    "GridSample": [([F(2, 2, 3, 4), F(2, 3, 2, 2)], {}, None, None),
                   ([F(1, 2, 4, 3), F(1, 2, 3, 2)], {"padding_mode": "border",
                                                     "align_corners": True}, None, None),
                   ([F(1, 2, 4, 3), F(1, 3, 2, 2)], {"padding_mode": "reflection"}, None,
                    None),
                   ([F(1, 2, 4, 3), F(1, 3, 2, 2)], {"mode": "nearest"}, None, [0]),
                   ([F(1, 2, 3, 4, 3), F(1, 2, 2, 2, 3)], {"padding_mode": "reflection",
                                                           "align_corners": True}, None, None)],
    "LSTMCell": [([F(2, 12), F(2, 3)], {}, [0, 1], None),
                 ([F(2, 12), F(2, 3), F(2, 12)], {"order": "iofg"}, [0], None)],
    "DepthToSpace": [([F(1, 8, 2, 3)], {"blocksize": 2, "mode": "CRD"}, None, None)],
    "SpaceToDepth": [([F(1, 2, 4, 6)], {"blocksize": 2}, None, None)],
    "CumProd": [([F(3, 4)], {"axis": 1}, None, None),
                ([F(2, 3, 2)], {"axis": -2, "exclusive": True, "reverse": True}, None, None),
                ([F(4, 3)], {"axis": 0, "reverse": True}, None, None)],
    "FFT": [([F(3, 5, 2)], {"axes": [1], "scale": 0.5}, None, None),
            ([F(4, 3, 2)], {"axes": [0, 1], "inverse": True}, None, None)],
    "CumSum": [([F(3, 4)], {"axis": 1}, None, None),
               ([F(2, 3, 2)], {"axis": -2, "exclusive": True, "reverse": True}, None, None)],
    # the values (output 0); the int64 indices have no gradient
    "TopK": [([F(3, 5)], {"k": 2}, [0], None),
             ([F(2, 4, 3)], {"k": 3, "axis": 1, "largest": False}, [0], None)],
    # rows and elements, wrapped ids; scatters: one write per place where none wins
    "IndexGather": [([F(4, 3), I(4, 5)], {"axis": 0}, None, None),
                    ([F(2, 4, 3), I(4, 2, 2, 3)], {"axis": 1, "mode": "elements"}, None, None)],
    "IndexScatter": [([F(3, 4), I(4, 3, 1), F(3, 1)], {"axis": 1, "mode": "elements"}, None,
                      None),
                     ([F(5, 2), I(5, 7), F(7, 2)], {"axis": 0, "reduce": "sum"}, None, None),
                     ([F(5, 2), I(5, 7), F(7, 2)],
                      {"axis": 0, "reduce": "sum", "include_self": False}, None, None),
                     ([F(2, 5), I(5, 2, 6)], {"axis": 1, "reduce": "mean", "mode": "elements",
                                             "value": 0.5}, None, None),
                     ([F(5, 2), I(5, 7), F(7, 2)],
                      {"axis": 0, "reduce": "mean", "include_self": False}, None, None),
                     ([F(5, 2), I(5, 7), F(7, 2)], {"axis": 0, "reduce": "amax"}, None, None),
                     ([F(3, 4), I(4, 3, 5), F(3, 5)],
                      {"axis": 1, "mode": "elements", "reduce": "amin", "include_self": False},
                      None, None),
                     ([F(5, 2), I(5, 7), F(7, 2)], {"axis": 0, "reduce": "prod"}, None, None),
                     ([F(5, 2), I(5, 7), F(7, 2)],
                      {"axis": 0, "reduce": "prod", "include_self": False}, None, None)],
    "CumMax": [([F(3, 5)], {"axis": 1}, [0], None),
               ([F(4, 2)], {"axis": 0, "minimum": True}, [0], None)],
    # offsets all 0: two empty bags, then all ids in the last
    "EmbeddingBag": [([F(5, 3), I(5, 6), I(1, 3)], {}, None, None),
                     ([F(5, 3), I(5, 6), I(1, 3), F(6)], {}, None, [0, 3]),
                     ([F(5, 3), I(5, 6), I(1, 3), F(6)], {"padding_idx": 2}, None, [3]),
                     ([F(5, 3), I(5, 6), I(1, 3)], {"mode": "mean"}, None, None),
                     ([F(5, 3), I(5, 6), I(1, 3)], {"mode": "max"}, [0], None)],
    "Where": [([I(2, 2, 3), F(2, 3), F(3)], {}, None, None)],
    "CausalMask": [([F(2, 3, 3)], {"value": -5.0}, None, None)],
    "PRelu": [([F(2, 3, 2, 2), F(3, 1, 1)], {}, None, None)],
    "Elu": [([F(3, 4)], {"alpha": 0.7}, None, None)],
    "Selu": [([F(3, 4)], {}, None, None)],
    "Softplus": [([F(3, 4)], {}, None, None)],
    "LogSoftmax": [([F(2, 3, 4)], {"axis": 1}, None, None)],
    "LeakyRelu": [([F(3, 4)], {"alpha": 0.2}, None, None)],
    "Tanh": [([F(3, 4)], {}, None, None)],
    "Sigmoid": [([F(3, 4)], {}, None, None)],
    "Softmax": [([F(2, 3, 4)], {"axis": 1}, None, None)],
    "ScaledSoftmax": [([F(2, 3, 4)], {"scale": 0.7, "causal": True}, None, None),
                      ([F(2, 5)], {"scale": -1.3}, None, None)],
    "BatchNorm": [([F(4, 3, 2, 2), P(3), F(3), F(3), P(3)], {"training": True}, [0], None),
                  ([F(5, 3), P(3), F(3), F(3), P(3)], {"training": True}, [0], None)],
    "LRN": [([F(1, 5, 2, 2)], {"size": 3, "alpha": 0.5, "bias": 2.0}, None, None)],
    "Conv2D": [([F(2, 4, 5, 5), F(6, 2, 3, 3)],
                {"strides": [2, 1], "pads": [1, 0, 1, 1], "dilations": [1, 2], "groups": 2},
                None, None),
               ([F(1, 2, 4, 4), F(3, 2, 1, 1)], {}, None, None)],
    "ConvTranspose2D": [([F(1, 4, 3, 3), F(4, 3, 3, 3)],
                         {"strides": [2, 2], "pads": [1, 0, 1, 1], "groups": 2,
                          "output_padding": [1, 0]}, None, None),
                        ([F(2, 2, 3, 2), F(2, 3, 2, 2)], {"dilations": [2, 1]}, None, None)],
    "MaxPool": [([F(1, 2, 5, 5)], {"kernel": [2, 2], "strides": [2, 2], "pads": [0, 0, 1, 1]},
                 None, None),
                ([F(1, 1, 5, 4)], {"kernel": [3, 2], "strides": [2, 1], "ceil_mode": True},
                 None, None)],
    "AvgPool": [([F(1, 2, 5, 5)], {"kernel": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
                 None, None),
                ([F(1, 1, 5, 5)], {"kernel": [2, 2], "strides": [2, 2], "pads": [1, 1, 1, 1],
                                   "count_include_pad": True, "ceil_mode": True}, None, None)],
    "GlobalAvgPool": [([F(2, 3, 2, 3)], {}, None, None)],
    "Concat": [([F(2, 3), F(2, 1), F(2, 2)], {"axis": 1}, None, None)],
    "Split": [([F(2, 5)], {"axis": 1, "sizes": [2, 3]}, None, None),
              ([F(4, 2)], {"axis": 0, "sizes": [1, 3]}, [1], None)],
    "Slice": [([F(4, 5)], {"starts": [1, 0], "ends": [3, 10], "axes": [0, 1], "steps": [1, 2]},
               None, None)],
    "Reshape": [([F(2, 6)], {"shape": [3, -1]}, None, None)],
    "Flatten": [([F(2, 3, 2)], {"axis": 1}, None, None)],
    "Transpose": [([F(2, 3, 4)], {"perm": [2, 0, 1]}, None, None)],
    "ReduceSum": [([F(2, 3, 4)], {"axes": [1]}, None, None),
                  ([F(2, 3)], {}, None, None)],
    "ReduceMean": [([F(2, 3, 4)], {"axes": [0, 2], "keepdims": True}, None, None)],
    # pools of 1 to 3 spatial axes (the max's values only: its indices have no gradient)
    "MaxPoolND": [([F(1, 2, 7)], {"output_size": [3]}, [0], None),
                  ([F(1, 1, 5, 4, 3)], {"kernel": [2, 2, 2], "strides": [1]}, [0], None)],
    "AvgPoolND": [([F(1, 2, 7, 5)], {"output_size": [3, 4]}, None, None),
                  ([F(1, 1, 5, 4, 3)], {"kernel": [3, 3, 3], "strides": [2], "pads": [1],
                                        "count_include_pad": False}, None, None)],
    "PoolScatter": [([F(1, 2, 3), I(6, 1, 2, 3)], {"spatial": [6], "accumulate": True}, None,
                     [0])],
    "PoolGather": [([F(1, 2, 6), I(6, 1, 2, 3)], {}, None, [0])],
    # the reduction family (random inputs: no ties, zeros or NaN, where the derivative is
    # torch's subgradient rather than the limit of differences)
    "ReduceMax": [([F(2, 3, 4)], {"axes": [0, 2]}, None, None)],
    "ReduceMin": [([F(3, 4)], {"keepdims": True}, None, None)],
    "ReduceProd": [([F(3, 4)], {"axes": [1]}, None, None)],
    "ReduceNanSum": [([F(3, 4)], {"axes": [0]}, None, None)],
    "ReduceNanMean": [([F(2, 3, 4)], {"axes": [1, 2], "keepdims": True}, None, None)],
    "ReduceLogSumExp": [([F(3, 4)], {"axes": [1]}, None, None)],
    "ReduceNorm": [([F(3, 4)], {"axes": [1]}, None, None),
                   ([F(2, 3, 4)], {"axes": [0, 2], "p": 3.0}, None, None),
                   ([F(3, 4)], {"p": 1.5}, None, None),
                   ([F(3, 4)], {"axes": [0], "p": 0.5}, None, None)],
    "Embedding": [([F(5, 3), I(5, 2, 3)], {}, None, None)],
    "Dropout": [([F(4, 5)], {"rate": 0.3, "seed": 7}, None, None)],
    "SoftmaxCrossEntropy": [([F(4, 3), I(3, 4)], {}, None, None)],
    "SigmoidBCE": [([F(2, 3), U(2, 3)], {}, None, [0])],
    "NLLLoss": [([F(4, 3), I(3, 4)], {}, None, None),
                ([F(4, 3), I(3, 4), P(3)],
                 {"reduction": "none", "ignore_index": 1, "label_smoothing": 0.2}, None, [0]),
                ([F(2, 3, 4), I(3, 2, 4), P(3)], {"reduction": "sum", "label_smoothing": 0.1},
                 None, [0])],
    "MSE": [([F(2, 3), F(2, 3)], {}, None, [0])],
}


def _value(spec: tuple, rng: np.random.Generator) -> np.ndarray:
    kind, shape = spec[0], spec[1]
    if kind == "ids":
        return rng.integers(0, spec[2], shape).astype(np.int64)
    if kind == "positive":
        return rng.uniform(0.5, 1.5, shape)
    if kind == "unit":
        return rng.uniform(0.05, 0.95, shape)
    if kind == "sym":
        return rng.uniform(-0.9, 0.9, shape)
    if kind == "gt1":
        return rng.uniform(1.1, 3.0, shape)
    if kind == "bool":
        return rng.random(shape) < 0.5
    if kind == "int":
        return rng.integers(-5, 6, shape).astype(np.int64)
    return rng.standard_normal(shape)


def vjp_check(op: str, specs: list[tuple], attrs: dict, of: list[int] | None,
              wrt: list[int] | None, seed: int = 0) -> dict[int, float]:
    """Relative errors of autodiff's vector-Jacobian product of one `op` node against central
    differences of sum_k <output_k, dy_k>, per differentiated input."""
    rng = np.random.default_rng(seed)
    values = [_value(s, rng) for s in specs]
    b = GraphBuilder(op.lower())
    names = [b.input(f"x{k}", v.shape, str(v.dtype)) for k, v in enumerate(values)]
    outs = b.op_n(op, names, attrs)
    forward = b.build(outputs=outs)
    of = list(range(len(outs))) if of is None else of
    if wrt is None:
        wrt = [k for k, v in enumerate(values)
               if v.dtype.kind == "f" and k not in get_op(op).nondiff_inputs]
    graph, grads = gradients(forward, wrt=[names[k] for k in wrt], of=[outs[k] for k in of])
    feeds = dict(zip(names, values, strict=True))
    dys = {outs[k]: rng.standard_normal(forward.tensor(outs[k]).shape) for k in of}
    got = run(graph, {**feeds, **{f"grad/{y}": dy for y, dy in dys.items()}}, {})

    def f(xs: dict[str, np.ndarray]) -> float:
        vals = run(forward, xs, {}, keep="outputs")
        return sum(float(np.sum(vals[y] * dy)) for y, dy in dys.items())

    errors = {}
    for k in wrt:
        # no gradient tensor means a zero gradient (Sign), which the differences must agree with
        grad = grads[names[k]]
        analytic = got[grad] if grad is not None else np.zeros_like(values[k])
        numeric = np.zeros_like(values[k])
        for idx in np.ndindex(values[k].shape):
            xs = {**feeds, names[k]: values[k].copy()}
            xs[names[k]][idx] += 1e-6
            up = f(xs)
            xs[names[k]][idx] -= 2e-6
            numeric[idx] = (up - f(xs)) / 2e-6
        errors[k] = rel_error(analytic, numeric)
    return errors


def _pointwise_cases() -> dict[str, list[tuple]]:
    """One case per row of the pointwise table (planner/ops/pointwise_table.py), each input
    sampled in the row's own domain (where its derivative exists)."""
    from planner.ops.pointwise_table import ROWS
    from planner.ops.special_table import ROWS as SPECIAL_ROWS

    def wrt(r):  # the inputs with a derivative (the incomplete gamma's a has none, as torch's)
        return None if r.grads is None or None not in r.grads else \
            [k for k, d in enumerate(r.grads) if d is not None]

    return {r.name: [([(d, (3, 4)) for d in (r.domain or ("normal",) * r.arity)], {}, None,
                      wrt(r))] for r in (*ROWS, *SPECIAL_ROWS)
            if r.differentiable and r.name not in NONDIFFERENTIABLE}


from planner.ops.special_table import NONDIFFERENTIABLE  # noqa: E402

OP_CASES.update({op: cases for op, cases in _pointwise_cases().items() if op not in OP_CASES})


OP_CASES["SliceGrad"] = [([F(2, 5)], {"starts": [1, 0], "ends": [3, 10], "axes": [0, 1],
                                      "steps": [1, 2], "input_shape": [4, 10]}, None, None)]

# The small-matrix ops' gradients need inputs this file's samplers do not make (well
# conditioned, symmetric positive definite, distinct singular values): checked by finite
# differences and against torch.autograd in float64 there.
CHECKED_IN_TEST_LINALG = {"Cholesky", "MatrixInverse", "MatrixQr", "MatrixSlogdet",
                          "MatrixSolve", "MatrixSvd", "MatrixEigh", "MatrixLuFactor",
                          "MatrixExp", "MatrixEig"}


def test_every_differentiable_op_has_a_gradient_case():
    # (an op none of whose inputs is differentiable, StopGradient, has no derivative to check)
    from tests.helpers.linalg_cases import CASES

    # (nor do the special functions torch marks non-differentiable: no gradient flows through
    # them, which tests/importers/test_kinks.py checks against torch)
    differentiable = {name for name, op in REGISTRY.items() if op.gradient is not None
                      and not (op.arity and set(range(op.arity)) <= set(op.nondiff_inputs))
                      and name not in NONDIFFERENTIABLE}
    # (svd, eigh, eig and LU: tests of their own; eig's in tests/ops/test_linalg_eig.py)
    assert CHECKED_IN_TEST_LINALG <= {c[0] for c in CASES} | {"MatrixSvd", "MatrixEigh",
                                                              "MatrixLuFactor", "MatrixEig"}
    covered = set(OP_CASES) | CHECKED_IN_TEST_LINALG
    assert differentiable <= covered, sorted(differentiable - covered)


@pytest.mark.parametrize("op,case", [(op, k) for op, cases in sorted(OP_CASES.items())
                                     for k in range(len(cases))])
def test_op_gradient_matches_finite_differences(op, case):
    if op not in REGISTRY:
        pytest.skip(f"op {op} is not registered")
    specs, attrs, of, wrt = OP_CASES[op][case]
    errors = vjp_check(op, specs, attrs, of, wrt)
    # (no float input: a logic op on bool tensors, which autodiff must pass through)
    assert max(errors.values(), default=0.0) < 1e-4, f"{op} case {case}: rel. errors {errors}"


# ---- finite differences, model by model --------------------------------------------------------

def directional_errors(graph: Graph, samples: int = 4, seed: int = 0) -> dict[str, float]:
    """Relative errors of <grad, d> against central differences of the loss along d: for one
    random direction d over all params together, and for d over single params (the first one,
    whose gradient crosses the whole network, then a random sample of up to `samples`)."""
    graph = as_float64(graph)
    loss = find_loss(graph)
    training, grads = gradients(graph)
    rng = np.random.default_rng(seed)
    names = [t.name for t in graph.by_role("param")]
    # zero biases would put ReLU inputs exactly on the kink (a dead unit gives 0 + 0), where
    # central differences see half the slope: move every param off its initial value
    params = {k: v + 0.1 * rng.standard_normal(v.shape) if k in names else v
              for k, v in init_params(graph, seed).items()}
    feeds = random_feeds(graph, seed)
    got = run(training, feeds, params)
    picked = [names[0], *rng.choice(names[1:], min(samples, len(names) - 1), replace=False)]
    cases = {"all": names, **{p: [p] for p in picked}}
    errors = {}
    for label, group in cases.items():
        direction = {p: rng.standard_normal(params[p].shape) for p in group}
        # a unit direction and a short step: deep ReLU networks have kinks everywhere (ReLU,
        # max pooling), and a longer step crosses some
        norm = np.sqrt(sum(float(np.sum(d * d)) for d in direction.values()))
        direction = {p: d / norm for p, d in direction.items()}
        analytic = sum(float(np.sum(got[grads[p]] * d)) if grads[p] else 0.0
                       for p, d in direction.items())

        def loss_at(step: float, direction=direction) -> float:
            moved = {**params, **{p: params[p] + step * d for p, d in direction.items()}}
            return float(run(graph, feeds, moved, keep="outputs")[loss])

        numeric = (loss_at(1e-7) - loss_at(-1e-7)) / 2e-7
        errors[label] = abs(analytic - numeric) / max(abs(analytic), abs(numeric), 1e-8)
    return errors


@pytest.mark.parametrize("model", sorted(SMALL_TRAINING))
def test_zoo_model_gradients_match_finite_differences(model):
    from planner.zoo import build

    errors = directional_errors(build(model, **SMALL_TRAINING[model]))
    assert max(errors.values()) < 1e-4, errors


def test_resnet50_training_graph_convolution_counts():
    from planner.zoo import build

    g = make_training_graph(build("resnet", depth=50, batch=2), Optimizer(kind="momentum"))
    counts = summarize(g)["op_counts"]
    # the first convolution's input is the image: no gradient flows into it
    assert (counts["Conv2D"], counts["Conv2DBackpropFilter"],
            counts["Conv2DBackpropInput"]) == (53, 53, 52)


@pytest.mark.parametrize("model", ["lenet", "resnet", "lstm", "wide_deep", "dcgan"])
@pytest.mark.parametrize("kind", ["sgd", "momentum", "adam"])
def test_zoo_training_graphs_are_valid(model, kind):
    from planner.zoo import build

    forward = build(model, **SMALL_TRAINING[model])
    g = check_graph(make_training_graph(forward, Optimizer(kind=kind)))
    trained = {t.updates for t in g.tensors if t.role == "param" and t.updates}
    assert trained == {t.name for t in forward.by_role("param")}


# ---- optimizer updates and the training step --------------------------------------------------

def one_param_graph(optimizer: Optimizer) -> Graph:
    """loss = MSE(x @ w, t) with w (3, 2): one param, one update node."""
    b = GraphBuilder("one")
    w = b.param("w", (3, 2), init="glorot", dtype="float64")
    y = b.op("MatMul", [b.input("x", (4, 3), dtype="float64"), w])
    loss = b.op("MSE", [y, b.input("t", (4, 2), dtype="float64")], name="loss")
    return make_training_graph(b.build(outputs=[loss]), optimizer)


def steps(graph: Graph, n: int, seed: int = 0) -> tuple[list[dict], list[dict]]:
    """n training steps on the same batch; (states before each step, gradients of w)."""
    feeds, state = random_feeds(graph, seed), init_params(graph, seed)
    grad = next(n.inputs[1] for n in graph.nodes if node_phase(graph, n) == "update"
                and n.op != "Increment")
    states, grads = [], []
    for _ in range(n):
        states.append(state)
        grads.append(run(graph, feeds, state)[grad])
        state = train_step(graph, feeds, state)[1]
    states.append(state)
    return states, grads


def test_sgd_steps_against_the_gradient():
    states, grads = steps(one_param_graph(Optimizer(kind="sgd", lr=0.5, weight_decay=0.1)), 2)
    for k in range(2):
        w = states[k]["w"]
        np.testing.assert_allclose(states[k + 1]["w"], w - 0.5 * (grads[k] + 0.1 * w))


def test_momentum_accumulates_velocity():
    g = one_param_graph(Optimizer(kind="momentum", lr=0.1, momentum=0.5))
    states, grads = steps(g, 2)
    # v1 = g0; v2 = 0.5 v1 + g1; w2 = w0 - 0.1 (v1 + v2)
    np.testing.assert_allclose(states[1]["optim/w/velocity"], grads[0])
    np.testing.assert_allclose(states[2]["optim/w/velocity"], 0.5 * grads[0] + grads[1])
    np.testing.assert_allclose(states[2]["w"],
                               states[0]["w"] - 0.1 * (1.5 * grads[0] + grads[1]))


def test_adam_first_step_moves_each_weight_by_lr_and_counts_steps():
    g = one_param_graph(Optimizer(kind="adam", lr=0.01))
    states, grads = steps(g, 3)
    # bias correction makes the first step -lr * sign(grad), up to epsilon
    np.testing.assert_allclose(states[1]["w"] - states[0]["w"], -0.01 * np.sign(grads[0]),
                               rtol=1e-5)
    assert [float(s["optim/step"]) for s in states] == [0.0, 1.0, 2.0, 3.0]
    assert g.tensor("optim/step").dtype == "float32"
    assert sum(n.op == "Increment" for n in g.nodes) == 1


def test_train_step_returns_batchnorm_running_statistics():
    from planner.zoo import build

    forward = build("resnet", **SMALL_TRAINING["resnet"])
    g = make_training_graph(forward, SGD)
    bn = next(n for n in g.nodes if n.op == "BatchNorm")
    new_mean, new_var = (g.tensor(o) for o in bn.outputs[1:3])
    assert (new_mean.updates, new_mean.role) == (bn.inputs[3], "state")
    assert (new_var.updates, new_var.role) == (bn.inputs[4], "state")
    feeds, state = random_feeds(g), init_params(g)
    x = run(g, feeds, state)[bn.inputs[0]]
    outputs, new = train_step(g, feeds, state)
    assert set(new) == set(state) and set(outputs) == set(forward.outputs)
    momentum = bn.attrs["momentum"]
    np.testing.assert_allclose(new[bn.inputs[3]], momentum * x.mean(axis=(0, 2, 3)),
                               rtol=1e-5, atol=1e-6)
    unbiased = x.var(axis=(0, 2, 3), ddof=1)
    np.testing.assert_allclose(new[bn.inputs[4]], (1 - momentum) + momentum * unbiased,
                               rtol=1e-5)


def test_training_reduces_the_loss_of_a_tiny_mlp():
    g = make_training_graph(tiny_mlp(), Optimizer(kind="adam", lr=0.05))
    feeds, state = random_feeds(g), init_params(g)
    losses = []
    for _ in range(30):
        outputs, state = train_step(g, feeds, state)
        losses.append(float(outputs["loss"]))
    assert losses[-1] < 0.3 * losses[0]


# ---- summary ------------------------------------------------------------------------------------

def test_summary_of_a_training_graph_splits_phases():
    from planner.zoo import build

    forward = build("lenet", **SMALL_TRAINING["lenet"])
    before = summarize(forward)
    assert "phases" not in before and before["op_counts"]["Conv2D"] == 2
    s = summarize(make_training_graph(forward, Optimizer(kind="adam")))
    phases = s["phases"]
    assert sum(p["nodes"] for p in phases.values()) == s["nodes"]
    assert sum(p["flops"] for p in phases.values()) == s["flops"]
    assert phases["forward"]["flops"] == before["flops"]
    # the training graph's linear layers are one MatMul with its bias (fold_bias_adds), its
    # convolution layers one Conv2D with its bias and Relu (fold_conv_biases); their FLOPs
    # count what they took in (above: the forward's equal the graph's before)
    folded = fold_conv_biases(fold_bias_adds(forward))
    assert phases["forward"]["op_counts"] == summarize(folded)["op_counts"]
    n_params = len(forward.by_role("param"))
    assert phases["update"]["op_counts"] == {"ApplyAdam": n_params, "Increment": 1}
    assert s["param_count"] == before["param_count"]
    # m and v per param, the step count, one group's learning rate and weight decay
    assert s["state_bytes"] == 2 * before["param_bytes"] + 4 + 8 + before["state_bytes"]
    # backward is about twice the forward (dx and dw per layer; the first layer has no dx)
    assert 1.2 < s["backward_forward_flop_ratio"] < 2.5
    assert s["grad_bytes"] > 0 and s["kind"] == "training"


def test_node_phase_of_handwritten_nodes():
    g = Graph(kind="training",
              tensors=(Tensor(name="p", shape=(2,), role="param"),
                       Tensor(name="g", shape=(2,), role="grad"),
                       Tensor(name="lr", shape=(), role="state", init="constant", value=0.1),
                       Tensor(name="wd", shape=(), role="state", init="zeros"),
                       Tensor(name="p2", shape=(2,), role="param", updates="p")),
              nodes=(Node(name="neg", op="Neg", inputs=("p",), outputs=("g",)),
                     Node(name="sgd", op="SGD", inputs=("p", "g", "lr", "wd"),
                          outputs=("p2",))))
    assert [node_phase(g, n) for n in g.nodes] == ["backward", "update"]


def test_dropout_reads_a_step_counter_that_the_update_increments():
    from planner.zoo import build

    g = make_training_graph(build("lstm", batch=2, seq=3, hidden=4, vocab=11), SGD)
    counter = g.tensor("rng/step")
    assert (counter.dtype, counter.shape, counter.role) == ("int64", (), "state")
    assert all(n.inputs[-1] == "rng/step" for n in g.nodes if n.op in ("Dropout", "DropoutGrad"))
    last = g.nodes[-1]
    assert (last.op, last.outputs, node_phase(g, last)) == ("Increment", ("update/rng/step",),
                                                             "update")
    state, feeds = init_params(g), random_feeds(g)
    first = run(g, feeds, state)["embedding/dropout"]
    _, after = train_step(g, feeds, state)
    assert int(after["rng/step"]) == 1
    second = run(g, feeds, {**state, "rng/step": after["rng/step"]})["embedding/dropout"]
    assert np.mean((first == 0) != (second == 0)) > 0.2
    # no Dropout, no counter
    assert "rng/step" not in make_training_graph(build("lenet", batch=2, image=12), SGD).tensor_map


# ---- empty tensors: every op's gradient over a batch of 0 (issue 86) ---------------------------

def _emptied(specs: list[tuple], which: str) -> list[tuple] | None:
    """The case's specs with a batch emptied: every input whose first extent is that of the
    first float input (which="float") or of the first integer ids (which="ids", a batch of
    lookups) set to 0; None where there is no such extent."""
    first = next((s for s in specs if (s[0] == "ids") == (which == "ids") and len(s[1]) >= 1),
                 None)
    if first is None or first[1][0] == 0:
        return None
    n = first[1][0]
    return [(s[0], (0, *s[1][1:]), *s[2:]) if len(s[1]) >= 1 and s[1][0] == n else s
            for s in specs]


@pytest.mark.parametrize("op,case,which", [
    (op, k, which) for op, cases in sorted(OP_CASES.items()) for k in range(len(cases))
    for which in ("float", "ids") if _emptied(cases[k][0], which) is not None])
def test_op_gradient_over_an_empty_batch(op, case, which):
    """The case with a batch emptied: the op is refused in one line (its shape rule, or an
    index now out of an emptied range), or its forward and gradient run on the reference to
    results of the inferred shapes and gradients of the inputs' shapes; and where every
    output is empty, sum_k <y_k, dy_k> is identically 0, so every gradient is exactly zero
    (PyTorch's empty gradients). Anything else raised (an IndexError of a reference) fails."""
    from planner.graph.builder import GraphBuildError
    from planner.ops.base import OpError

    if op not in REGISTRY:
        pytest.skip(f"op {op} is not registered")
    specs, attrs, of, wrt = OP_CASES[op][case]
    emptied = _emptied(specs, which)
    rng = np.random.default_rng(0)
    values = [_value(s, rng) for s in emptied]
    b = GraphBuilder(op.lower())
    names = [b.input(f"x{k}", v.shape, str(v.dtype)) for k, v in enumerate(values)]
    try:
        outs = b.op_n(op, names, attrs)
        forward = b.build(outputs=outs)
        of = list(range(len(outs))) if of is None else of
        if wrt is None:
            wrt = [k for k, v in enumerate(values)
                   if v.dtype.kind == "f" and k not in get_op(op).nondiff_inputs]
        graph, grads = gradients(forward, wrt=[names[k] for k in wrt],
                                 of=[outs[k] for k in of])
        dys = {f"grad/{outs[k]}": rng.standard_normal(forward.tensor(outs[k]).shape)
               for k in of}
        with np.errstate(all="ignore"):
            got = run(graph, {**dict(zip(names, values, strict=True)), **dys}, {})
    except (OpError, GraphBuildError) as e:  # refused: one line
        assert "\n" not in str(e)
        return
    for y in outs:
        assert got[y].shape == forward.tensor(y).shape, y
    empty = all(forward.tensor(outs[k]).size == 0 for k in of)
    for k in wrt:
        grad = grads[names[k]]
        if grad is None:
            continue
        assert got[grad].shape == values[k].shape, (k, got[grad].shape)
        if empty:
            assert not np.any(got[grad]), f"input {k}: a gradient of an empty output"
