"""One conversion rule at a time, on small hand-built models: each import runs through the
planner's reference interpreter and must match onnx's ReferenceEvaluator; the planner graph's
structure is checked where the mapping is the point (folding, vanishing ops, names, roles)."""

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from planner.frontend.autodiff import gradients
from planner.graph import run
from planner.importers import OnnxImportError, import_onnx, load_onnx
from tests.importers.onnx_models import check_against_onnx, make_model, rand

node = helper.make_node


def ops_of(graph):
    return [n.op for n in graph.nodes]


# ---- convolutions and pools ------------------------------------------------------------------

@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER", "VALID"])
def test_conv_auto_pad_becomes_explicit_pads(auto_pad):
    x, w, b = rand(1, 2, 7, 6), rand(3, 2, 3, 2, seed=1), rand(3, seed=2)
    model = make_model([node("Conv", ["x", "w", "b"], ["y"], auto_pad=auto_pad, strides=[2, 2],
                             name="conv")], {"x": x}, ["y"], {"w": w, "b": b})
    graph = check_against_onnx(model, {"x": x})
    # The op writing the ONNX output takes the node's name; those before it "<node>/<op>".
    assert [(n.name, n.op) for n in graph.nodes] == [("conv/conv2d", "Conv2D"),
                                                     ("conv", "BiasAdd")]


def test_conv_1d_runs_as_2d_with_groups_and_dilation():
    x, w, b = rand(2, 4, 9), rand(6, 2, 3, seed=1), rand(6, seed=2)
    model = make_model([node("Conv", ["x", "w", "b"], ["y"], group=2, dilations=[2],
                             pads=[1, 2])], {"x": x}, ["y"], {"w": w, "b": b})
    graph = check_against_onnx(model, {"x": x})
    assert graph.tensor("w").shape == (6, 2, 3)  # the weight keeps its ONNX shape and name
    assert "Conv2D" in ops_of(graph)


def test_conv_3d_is_unsupported():
    x, w = rand(1, 1, 3, 3, 3), rand(1, 1, 2, 2, 2)
    model = make_model([node("Conv", ["x", "w"], ["y"], name="c3")], {"x": x}, ["y"], {"w": w})
    with pytest.raises(OnnxImportError, match=r"Conv \(3-D\) \(node 'c3'\)") as e:
        load_onnx(model)
    assert e.value.unsupported == {"Conv (3-D)": "c3"}


# (attrs, the same transposed conv with explicit pads and output_padding, as the ONNX spec
# derives them from output_shape / auto_pad)
TRANSPOSED = [
    ({"strides": [2, 3], "pads": [1, 0, 1, 2], "output_padding": [1, 0]}, None),
    ({"strides": [2, 2], "output_shape": [9, 8]}, {"strides": [2, 2], "output_padding": [0, 1]}),
    ({"strides": [2, 2], "output_shape": [8, 6]}, {"strides": [2, 2], "pads": [1, 1, 0, 0]}),
    ({"strides": [2, 2], "auto_pad": "SAME_UPPER"}, {"strides": [2, 2], "pads": [0, 0, 1, 1]}),
    ({"strides": [2, 2], "auto_pad": "SAME_LOWER"}, {"strides": [2, 2], "pads": [1, 1, 0, 0]}),
]


@pytest.mark.parametrize("attrs,explicit", TRANSPOSED)
def test_conv_transpose(attrs, explicit):
    # onnx's ReferenceEvaluator crops output_shape wrongly: its explicit-pads form is the oracle.
    x, w = rand(1, 2, 4, 3), rand(2, 2, 3, 3, seed=1)

    def model(a):
        return make_model([node("ConvTranspose", ["x", "w"], ["y"], **a)], {"x": x}, ["y"],
                          {"w": w})

    expected = ReferenceEvaluator(model(explicit or attrs)).run(None, {"x": x})
    check_against_onnx(model(attrs), {"x": x}, expected=expected)


def test_conv_transpose_groups_and_dilation_match_torch():
    # onnx's ReferenceEvaluator mishandles groups in ConvTranspose: torch is the oracle here.
    torch = pytest.importorskip("torch")
    x, w, b = rand(1, 4, 4, 3), rand(4, 3, 3, 2, seed=1), rand(6, seed=2)
    attrs = {"strides": [1, 2], "dilations": [2, 1], "group": 2, "pads": [1, 0, 0, 1]}
    model = make_model([node("ConvTranspose", ["x", "w", "b"], ["y"], **attrs)], {"x": x}, ["y"],
                       {"w": w, "b": b})
    # torch pads symmetrically; ONNX's asymmetric pads crop the full output instead.
    full = torch.nn.functional.conv_transpose2d(
        torch.tensor(x), torch.tensor(w), torch.tensor(b), stride=(1, 2), groups=2,
        dilation=(2, 1)).numpy()
    expected = full[:, :, 1:full.shape[2], 0:full.shape[3] - 1]
    check_against_onnx(model, {"x": x}, expected=[expected])


def test_conv_transpose_1d_with_bias():
    x, w, b = rand(2, 3, 5), rand(3, 2, 4, seed=1), rand(2, seed=2)
    model = make_model([node("ConvTranspose", ["x", "w", "b"], ["y"], strides=[2], pads=[1, 0])],
                       {"x": x}, ["y"], {"w": w, "b": b})
    check_against_onnx(model, {"x": x})


@pytest.mark.parametrize("op,attrs", [
    ("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}),
    ("MaxPool", {"kernel_shape": [2, 3], "auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    ("MaxPool", {"kernel_shape": [2, 2], "dilations": [2, 1], "pads": [1, 0, 1, 1]}),
    ("AveragePool", {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 1}),
    ("AveragePool", {"kernel_shape": [3, 2], "pads": [1, 1, 0, 1], "strides": [2, 1]}),
    ("AveragePool", {"kernel_shape": [2, 2], "auto_pad": "SAME_LOWER"}),
])
def test_pools(op, attrs):
    x = rand(1, 2, 7, 6)
    model = make_model([node(op, ["x"], ["y"], **attrs)], {"x": x}, ["y"])
    check_against_onnx(model, {"x": x})


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
def test_pools_1d(op):
    x = rand(2, 3, 9)
    model = make_model([node(op, ["x"], ["y"], kernel_shape=[3], strides=[2], pads=[1, 1])],
                       {"x": x}, ["y"])
    check_against_onnx(model, {"x": x})


@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (2, 3, 7)])
@pytest.mark.parametrize("op", ["GlobalMaxPool", "GlobalAveragePool"])
def test_global_pools(op, shape):
    x = rand(*shape)
    model = make_model([node(op, ["x"], ["y"])], {"x": x}, ["y"])
    # onnx's ReferenceEvaluator reduces the wrong axes for a 3-D GlobalMaxPool.
    reduce = np.max if op == "GlobalMaxPool" else np.mean
    expected = reduce(x, axis=tuple(range(2, x.ndim)), keepdims=True)
    check_against_onnx(model, {"x": x}, expected=[expected])


def test_max_pool_indices_output_is_unsupported_when_read():
    x = rand(1, 1, 4, 4)
    model = make_model([node("MaxPool", ["x"], ["y", "i"], kernel_shape=[2, 2], name="mp"),
                        node("Cast", ["i"], ["f"], to=TensorProto.FLOAT)],
                       {"x": x}, ["y", "f"])
    with pytest.raises(OnnxImportError, match=r"MaxPool \(output 1\)"):
        load_onnx(model)


# ---- matrix products --------------------------------------------------------------------------

@pytest.mark.parametrize("attrs,c_shape", [
    ({}, (5,)),
    ({"transA": 1, "transB": 1}, (5,)),
    ({"alpha": 0.5, "beta": 2.0}, (5,)),
    ({"beta": 3.0}, (4, 5)),
    ({}, (1, 5)),
    ({}, (1,)),
    ({"beta": 0.0}, (5,)),
    ({"alpha": 2.0}, None),
])
def test_gemm(attrs, c_shape):
    # op(a) is (M, K) = (4, 3), op(b) is (K, N) = (3, 5).
    a = rand(3, 4) if attrs.get("transA") else rand(4, 3)
    b = rand(5, 3, seed=1) if attrs.get("transB") else rand(3, 5, seed=1)
    inits = {"b": b}
    inputs = ["a", "b"]
    if c_shape is not None:
        inits["c"] = rand(*c_shape, seed=2)
        inputs.append("c")
    model = make_model([node("Gemm", inputs, ["y"], **attrs)], {"a": a}, ["y"], inits)
    graph = check_against_onnx(model, {"a": a})
    ops = ops_of(graph)
    assert ops[0] == "MatMul"
    assert ("Scale" in ops) == (attrs.get("alpha", 1.0) != 1.0 or attrs.get("beta", 1.0)
                                not in (0.0, 1.0))
    if c_shape == (5,) and attrs.get("beta", 1.0) != 0.0:
        assert ops[-1] == "BiasAdd"


@pytest.mark.parametrize("a_shape,b_shape", [((4,), (4, 3)), ((2, 4), (4,)), ((4,), (4,)),
                                             ((2, 3, 4), (4, 5)), ((3, 4), (4, 2))])
def test_matmul_ranks(a_shape, b_shape):
    a, b = rand(*a_shape), rand(*b_shape, seed=1)
    model = make_model([node("MatMul", ["a", "b"], ["y"])], {"a": a, "b": b}, ["y"])
    check_against_onnx(model, {"a": a, "b": b})


# ---- element-wise and activations -------------------------------------------------------------

def test_unary_and_binary_chain():
    x, y = rand(2, 3), np.abs(rand(2, 3, seed=1)) + 0.5
    nodes = [node("Abs", ["x"], ["ax"]), node("Sqrt", ["ax"], ["s"]), node("Exp", ["x"], ["e"]),
             node("Log", ["y"], ["l"]), node("Softplus", ["x"], ["sp"]),
             node("Elu", ["x"], ["el"], alpha=0.7), node("Selu", ["x"], ["se"]),
             node("Neg", ["el"], ["ne"]), node("Pow", ["y", "x"], ["p"]),
             node("Sum", ["s", "e", "l", "sp"], ["t1"]), node("Sub", ["t1", "ne"], ["t2"]),
             node("Div", ["t2", "y"], ["t3"]), node("Mul", ["t3", "se"], ["t4"]),
             node("Add", ["t4", "p"], ["out"]), node("Sign", ["x"], ["sg"]),
             node("LeakyRelu", ["x"], ["lr"], alpha=0.2), node("Tanh", ["lr"], ["th"]),
             node("Sigmoid", ["th"], ["sig"]), node("Relu", ["x"], ["r"])]
    model = make_model(nodes, {"x": x, "y": y}, ["out", "sg", "sig", "r"])
    graph = check_against_onnx(model, {"x": x, "y": y})
    assert ops_of(graph).count("AddN") == 1


def test_pow_with_an_integer_exponent():
    x = rand(2, 3)
    model = make_model([node("Pow", ["x", "e"], ["y"])], {"x": x}, ["y"], {"e": np.array(3)},
                       opset=15)
    graph = check_against_onnx(model, {"x": x})
    # The exponent, cast to x's dtype at import, is a constant the graph carries.
    (exponent,) = [n for n in graph.nodes if n.op == "Fill"]
    assert exponent.attrs == {"dtype": "float32", "shape": [], "value": 3.0}
    assert graph.by_role("state") == ()


def test_variadic_ops_with_broadcasting():
    a, b, c = rand(2, 3), rand(3, seed=1), rand(2, 1, seed=2)
    nodes = [node("Sum", ["a", "b", "c"], ["s"]), node("Max", ["a", "b", "c"], ["mx"]),
             node("Min", ["a", "c"], ["mn"]), node("Sum", ["a"], ["one"])]
    model = make_model(nodes, {"a": a, "b": b, "c": c}, ["s", "mx", "mn", "one"])
    graph = check_against_onnx(model, {"a": a, "b": b, "c": c})
    assert ops_of(graph) == ["Add", "Add", "Max", "Max", "Min"]
    assert graph.outputs[-1] == "a"  # a one-input Sum is its input


@pytest.mark.parametrize("opset,attrs", [(11, {}), (11, {"min": -0.5}), (6, {"max": 0.3}),
                                         (6, {"min": -0.2, "max": 0.2})])
def test_clip_attributes(opset, attrs):
    x = rand(3, 4)
    model = make_model([node("Clip", ["x"], ["y"], **attrs)], {"x": x}, ["y"], opset=opset)
    if opset >= 11:
        model = make_model([node("Clip", ["x", "lo" if "min" in attrs else "", "hi"], ["y"])],
                           {"x": x}, ["y"],
                           {"hi": np.float32(0.4), **({"lo": np.float32(attrs["min"])}
                                                      if "min" in attrs else {})}, opset=opset)
    graph = check_against_onnx(model, {"x": x})
    assert ops_of(graph) == ["Clip"]
    assert graph.tensors[-1].role == "activation"  # bounds are attributes, not tensors


@pytest.mark.parametrize("opset", [9, 17])
def test_prelu_per_channel_slope(opset):
    x, slope = rand(2, 3, 4, 5), np.abs(rand(3, 1, 1, seed=1))
    model = make_model([node("PRelu", ["x", "s"], ["y"])], {"x": x}, ["y"], {"s": slope},
                       opset=opset)
    graph = check_against_onnx(model, {"x": x})
    assert graph.tensor("s").role == "param"


def _spec_softmax(x, axis, opset, log):
    """The ONNX spec's Softmax: before opset 13 over x coerced to 2-D at axis, then over axis
    (onnx's ReferenceEvaluator implements only the latter)."""
    axis %= x.ndim
    rows = x.reshape(int(np.prod(x.shape[:axis])), -1) if opset < 13 else x
    along = -1 if opset < 13 else axis
    shifted = rows - rows.max(axis=along, keepdims=True)
    logsum = np.log(np.exp(shifted).sum(axis=along, keepdims=True))
    y = shifted - logsum if log else np.exp(shifted - logsum)
    return y.reshape(x.shape).astype(x.dtype)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("opset,axis", [(11, 1), (11, -1), (11, 0), (13, 1), (13, -1)])
def test_softmax_axis_semantics_change_at_opset_13(op, opset, axis):
    x = rand(2, 3, 4)
    model = make_model([node(op, ["x"], ["y"], axis=axis)], {"x": x}, ["y"], opset=opset)
    expected = _spec_softmax(x, axis, opset, op == "LogSoftmax")
    graph = check_against_onnx(model, {"x": x}, expected=[expected])
    coerced = opset < 13 and axis % 3 != 2
    assert ops_of(graph) == (["Flatten", op, "Reshape"] if coerced else [op])


@pytest.mark.parametrize("size", [3, 5])
def test_lrn_matches_torch(size):
    # onnx's ReferenceEvaluator departs from the ONNX formula for LRN; torch follows it.
    torch = pytest.importorskip("torch")
    x = rand(2, 6, 3, 3)
    model = make_model([node("LRN", ["x"], ["y"], size=size, alpha=1e-2, beta=0.6, bias=2.0)],
                       {"x": x}, ["y"])
    lrn = torch.nn.LocalResponseNorm(size, alpha=1e-2, beta=0.6, k=2.0)
    check_against_onnx(model, {"x": x}, expected=[lrn(torch.tensor(x)).numpy()])


def test_batch_norm_uses_running_statistics():
    x = rand(2, 3, 4, 4)
    stats = {"scale": rand(3, seed=1), "bias": rand(3, seed=2), "mean": rand(3, seed=3),
             "var": np.abs(rand(3, seed=4)) + 0.1}
    nodes = [node("BatchNormalization", ["x", "scale", "bias", "mean", "var"], ["y"],
                  epsilon=1e-3, momentum=0.8)]
    model = make_model(nodes, {"x": x}, ["y"], stats, opset=15)
    graph = check_against_onnx(model, {"x": x})
    bn = graph.nodes[0]
    assert bn.attrs["training"] is False
    assert bn.attrs["momentum"] == pytest.approx(0.2)  # ONNX weights the old value, we the new
    roles = {t.name: t.role for t in graph.tensors}
    assert [roles[k] for k in ("scale", "bias", "mean", "var")] == ["param", "param", "state",
                                                                    "state"]


# ---- shape ops and folding --------------------------------------------------------------------

def test_shape_subgraph_folds_into_reshape_attrs():
    x = rand(2, 3, 4)
    nodes = [node("Shape", ["x"], ["s"]),
             node("Constant", [], ["zero"], value=helper.make_tensor("z", TensorProto.INT64, [],
                                                                     [0])),
             node("Gather", ["s", "zero"], ["n"], axis=0),
             node("Unsqueeze", ["n", "axes"], ["n1"]),
             node("Concat", ["n1", "minus1"], ["target"], axis=0),
             node("Reshape", ["x", "target"], ["y"], name="flat")]
    model = make_model(nodes, {"x": x}, ["y"],
                       {"axes": np.array([0]), "minus1": np.array([-1])}, opset=13)
    graph = check_against_onnx(model, {"x": x})
    assert [(n.name, n.op, n.attrs["shape"]) for n in graph.nodes] == [("flat", "Reshape",
                                                                        [2, 12])]
    assert {t.role for t in graph.tensors} == {"input", "activation"}


@pytest.mark.parametrize("target,allowzero,shape", [([0, -1], 0, (2, 12)), ([-1, 4], 0, (6, 4)),
                                                    ([2, 0, 4], 0, (2, 3, 4)),
                                                    ([0, 3, 8], 1, None)])
def test_reshape_resolves_zero_and_minus_one(target, allowzero, shape):
    x = rand(2, 3, 4)
    model = make_model([node("Reshape", ["x", "t"], ["y"], allowzero=allowzero)], {"x": x},
                       ["y"], {"t": np.array(target)}, opset=14)
    if shape is None:  # allowzero keeps 0 a real 0: 24 elements do not fit (0, 3, 8)
        with pytest.raises(OnnxImportError, match="node 'y' \\(Reshape\\)"):
            load_onnx(model)
        return
    graph = check_against_onnx(model, {"x": x})
    assert graph.tensor(graph.outputs[0]).shape == shape
    # A reshape to the same shape is no op at all: the output is the input.
    assert ops_of(graph) == ([] if shape == x.shape else ["Reshape"])


@pytest.mark.parametrize("opset", [11, 13])
def test_squeeze_unsqueeze_flatten_transpose(opset):
    x = rand(2, 1, 3)
    if opset < 13:
        nodes = [node("Squeeze", ["x"], ["s"], axes=[1]),
                 node("Unsqueeze", ["s"], ["u"], axes=[0, -1])]
        inits = {}
    else:
        nodes = [node("Squeeze", ["x", "a1"], ["s"]), node("Unsqueeze", ["s", "a2"], ["u"])]
        inits = {"a1": np.array([1]), "a2": np.array([0, -1])}
    nodes += [node("Flatten", ["u"], ["f0"], axis=0), node("Flatten", ["u"], ["f2"], axis=-2),
              node("Transpose", ["u"], ["t"]), node("Transpose", ["x"], ["same"], perm=[0, 1, 2]),
              node("Squeeze", ["x"], ["all"])]
    model = make_model(nodes, {"x": x}, ["u", "f0", "f2", "t", "same", "all"], inits, opset=opset)
    graph = check_against_onnx(model, {"x": x})
    assert graph.tensor("u").shape == (1, 2, 3, 1)
    assert graph.outputs[4] == "x"


@pytest.mark.parametrize("starts,ends,axes,steps", [
    ([1], [2**63 - 1], [1], None),
    ([-3, 0], [-1, 10], [2, 0], [1, 2]),
    ([0], [100], [0], None),
    ([3], [1], [2], None),
])
def test_slice_bounds_are_resolved(starts, ends, axes, steps):
    x = rand(3, 4, 5)
    names, inits = ["x", "st", "en", "ax"], {"st": np.array(starts), "en": np.array(ends),
                                             "ax": np.array(axes)}
    if steps is not None:
        names.append("sp")
        inits["sp"] = np.array(steps)
    model = make_model([node("Slice", names, ["y"])], {"x": x}, ["y"], inits, opset=13)
    graph = check_against_onnx(model, {"x": x})
    for n in graph.nodes:
        assert all(0 <= v for v in n.attrs["starts"] + n.attrs["ends"])


def test_slice_opset_9_attributes():
    x = rand(3, 4)
    model = make_model([node("Slice", ["x"], ["y"], starts=[1], ends=[-1], axes=[1])],
                       {"x": x}, ["y"], opset=9)
    check_against_onnx(model, {"x": x})


@pytest.mark.parametrize("starts,ends,axes,steps", [
    ([-1], [-10], [0], [-1]),                      # a flip, its end before the first element
    ([2**63 - 1, 4], [-2**63, 0], [1, 2], [-1, -2]),  # torch.onnx's flip; every 2nd, backwards
    ([1], [3], [2], [-1]),                         # empty: the end is after the start
    ([10], [1], [1], [-2]),
])
def test_slice_negative_steps_walk_backwards(starts, ends, axes, steps):
    x = rand(3, 4, 5)
    inits = {"s": np.array(starts), "e": np.array(ends), "a": np.array(axes),
             "st": np.array(steps)}
    model = make_model([node("Slice", ["x", "s", "e", "a", "st"], ["y"])], {"x": x}, ["y"],
                       inits, opset=13)
    graph = check_against_onnx(model, {"x": x}, rtol=0.0)
    assert [n.attrs["steps"] for n in graph.nodes] == [steps]


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
def test_pad_modes(mode):
    x = rand(1, 2, 4, 5)
    pads = np.array([0, 0, 1, 2, 0, 0, 3, 1])
    model = make_model([node("Pad", ["x", "p", "v"], ["y"], mode=mode)], {"x": x}, ["y"],
                       {"p": pads, "v": np.float32(1.5)}, opset=13)
    graph = check_against_onnx(model, {"x": x})
    assert ops_of(graph) == ["Pad"]


def test_pad_with_axes_and_old_attributes():
    x = rand(2, 3)
    model = make_model([node("Pad", ["x", "p", "", "a"], ["y"])], {"x": x}, ["y"],
                       {"p": np.array([2, 1]), "a": np.array([-1])}, opset=18)
    check_against_onnx(model, {"x": x})
    model = make_model([node("Pad", ["x"], ["y"], pads=[1, 0, 0, 2], value=-1.0)], {"x": x},
                       ["y"], opset=9)
    check_against_onnx(model, {"x": x})


@pytest.mark.parametrize("opset,attrs,sizes,outputs", [
    (13, {"axis": 1}, [1, 4], 2),
    (13, {"axis": -1}, None, 3),
    (18, {"axis": 1, "num_outputs": 2}, None, 2),
    (11, {"axis": 1, "split": [2, 3]}, None, 2),
])
def test_split(opset, attrs, sizes, outputs):
    x = rand(2, 5, 6)
    inputs, inits = ["x"], {}
    if sizes is not None:
        inputs.append("sizes")
        inits["sizes"] = np.array(sizes)
    names = [f"y{k}" for k in range(outputs)]
    model = make_model([node("Split", inputs, names, **attrs)], {"x": x}, names, inits,
                       opset=opset)
    graph = check_against_onnx(model, {"x": x})
    assert ops_of(graph) == ["Split"]


@pytest.mark.parametrize("op,opset", [("ReduceSum", 13), ("ReduceMean", 18), ("ReduceMean", 13),
                                      ("ReduceSum", 11)])
@pytest.mark.parametrize("keepdims", [0, 1])
def test_reductions_axes_attribute_or_input(op, opset, keepdims):
    x = rand(2, 3, 4)
    takes_input = (op == "ReduceSum" and opset >= 13) or opset >= 18
    if takes_input:
        model = make_model([node(op, ["x", "a"], ["y"], keepdims=keepdims)], {"x": x}, ["y"],
                           {"a": np.array([-1, 0])}, opset=opset)
    else:
        model = make_model([node(op, ["x"], ["y"], axes=[-1, 0], keepdims=keepdims)], {"x": x},
                           ["y"], opset=opset)
    graph = check_against_onnx(model, {"x": x})
    assert graph.nodes[0].attrs["axes"] == [0, 2]


def test_reduce_noop_with_empty_axes_and_all_axes():
    x = rand(2, 3)
    nodes = [node("ReduceSum", ["x"], ["same"], noop_with_empty_axes=1),
             node("ReduceSum", ["x"], ["total"], keepdims=0)]
    graph = check_against_onnx(make_model(nodes, {"x": x}, ["same", "total"], opset=13),
                               {"x": x})
    assert graph.outputs[0] == "x"


def test_tile_and_expand():
    x = rand(2, 1, 3)
    nodes = [node("Tile", ["x", "reps"], ["t"]), node("Expand", ["x", "shape"], ["e"])]
    model = make_model(nodes, {"x": x}, ["t", "e"],
                       {"reps": np.array([2, 3, 1]), "shape": np.array([4, 1, 5, 1])})
    graph = check_against_onnx(model, {"x": x})
    assert ops_of(graph) == ["Reshape", "Expand", "Reshape", "Expand"]


def test_gather_embedding_and_constant_indices():
    table, ids = rand(10, 4), np.array([[1, 7, 7], [0, 9, 2]])
    x = rand(2, 5, 3, seed=1)
    nodes = [node("Gather", ["table", "ids"], ["emb"], axis=0, name="emb"),
             node("Gather", ["x", "one"], ["col"], axis=1),
             node("Gather", ["x", "range"], ["cols"], axis=1)]
    model = make_model(nodes, {"ids": ids, "x": x}, ["emb", "col", "cols"],
                       {"table": table, "one": np.array(-2), "range": np.array([1, 2, 3])})
    graph = check_against_onnx(model, {"ids": ids, "x": x})
    assert ops_of(graph) == ["Embedding", "Slice", "Reshape", "Slice"]
    assert graph.tensor("table").role == "param" and graph.tensor("ids").role == "input"


@pytest.mark.parametrize(("shape", "axis", "ids"), [
    ((3, 5), 1, [0, 3, 1]),
    ((7, 2), 0, [[0, 3, 6], [1, -6, 5], [2, 4, 0]]),  # a Swin-style relative-position table
    ((2, 6, 3), 1, [[5, 5], [0, -1]]),                 # repeated and negative indices
])
def test_gather_scattered_constant_indices_are_an_embedding(shape, axis, ids):
    """T5- and Swin-style position-bias lookups: constant, unevenly spaced indices into a
    trained table; the gradient a scatter-add (repeated indices accumulate), as np.add.at."""
    x = rand(*shape)
    ids = np.array(ids, np.int64)
    model = make_model([node("Gather", ["x", "ids"], ["y"], axis=axis, name="g")], {}, ["y"],
                       {"x": x, "ids": ids})
    graph = check_against_onnx(model, {}, rtol=0.0)
    assert "Embedding" in ops_of(graph) and graph.tensor("x").role == "param"
    with_grads, grads = gradients(graph, ["x"], of=["y"])
    dy = rand(*graph.tensor("y").shape, seed=3)
    got = run(with_grads, {"grad/y": dy}, import_onnx(model).params(), keep="outputs")
    want = np.zeros(shape, np.float64)
    moved = np.moveaxis(want, axis, 0)  # a view: np.add.at fills `want`
    np.add.at(moved, ids % shape[axis], np.moveaxis(dy, tuple(range(axis, axis + ids.ndim)),
                                                    tuple(range(ids.ndim))))
    np.testing.assert_allclose(got[grads["x"]], want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("ids", [[4, 3, 2, 1, 0], [0, 2, 4], [-1, -3], [3, 1]])
def test_gather_evenly_spaced_constant_indices_are_a_slice(ids):
    x = rand(3, 5)
    model = make_model([node("Gather", ["x", "ids"], ["y"], axis=1)], {"x": x}, ["y"],
                       {"ids": np.array(ids)})
    graph = check_against_onnx(model, {"x": x}, rtol=0.0)
    assert ops_of(graph) == ["Slice"]


def test_constant_computations_fold_into_one_state_tensor():
    # Tile of a constant runs at import time (three folded steps); the Add reads the result.
    x = rand(2, 6)
    c = helper.make_tensor("c", TensorProto.FLOAT, [1, 3], [1.0, 2.0, 3.0])
    nodes = [node("Constant", [], ["k"], value=c), node("Tile", ["k", "reps"], ["t"]),
             node("Add", ["x", "t"], ["y"])]
    model = make_model(nodes, {"x": x}, ["y"], {"reps": np.array([2, 2])})
    graph = check_against_onnx(model, {"x": x})
    assert ops_of(graph) == ["Add"]
    assert graph.tensor("t").role == "state" and graph.tensor("t").shape == (2, 6)


def test_identity_dropout_and_cast_vanish():
    x = rand(2, 3)
    nodes = [node("Identity", ["x"], ["i"]), node("Dropout", ["i", "ratio"], ["d"]),
             node("Cast", ["d"], ["c"], to=TensorProto.FLOAT), node("Relu", ["c"], ["y"]),
             node("Cast", ["k"], ["kf"], to=TensorProto.FLOAT), node("Add", ["y", "kf"], ["z"])]
    model = make_model(nodes, {"x": x}, ["z"], {"ratio": np.float32(0.3), "k": np.array([1, 2, 3])})
    graph = check_against_onnx(model, {"x": x})
    assert ops_of(graph) == ["Relu", "Add"]
    assert graph.nodes[0].inputs == ("x",)
    assert graph.tensor("kf").role == "state"  # a folded constant read by a compute op


def test_constant_node_values_are_carried_and_initializers_are_params():
    x = rand(2, 3)
    c = helper.make_tensor("c", TensorProto.FLOAT, [3], [1.0, 2.0, 3.0])
    nodes = [node("Constant", [], ["k"], value=c), node("Mul", ["x", "k"], ["m"]),
             node("Constant", [], ["half"], value_float=0.5), node("Mul", ["m", "half"], ["h"]),
             node("Add", ["h", "w"], ["y"])]
    model = make_model(nodes, {"x": x}, ["y"], {"w": rand(3, seed=1)})
    with pytest.warns(UserWarning, match=r"constant\(s\) \['k'\] are state tensors"):
        imported = import_onnx(model)
    roles = {t.name: t.role for t in imported.graph.tensors}
    # A uniform constant is a Fill node (its value in the graph); another one is state.
    assert (roles["k"], roles["half"], roles["w"]) == ("state", "activation", "param")
    assert imported.graph.producer["half"].attrs["value"] == 0.5
    np.testing.assert_array_equal(imported.params()["k"], [1.0, 2.0, 3.0])
    check_against_onnx(model, {"x": x})


# ---- names, inputs, errors --------------------------------------------------------------------

def test_names_follow_onnx_and_intermediates_avoid_onnx_names():
    # "c/reshape" is an ONNX value name; the 1-D conv's intermediate must not take it.
    x, w = rand(1, 2, 6), rand(3, 2, 3)
    nodes = [node("Relu", ["x"], ["c/reshape"], name="pre"),
             node("Conv", ["c/reshape", "w"], ["y"], name="c")]
    graph = check_against_onnx(make_model(nodes, {"x": x}, ["y"], {"w": w}), {"x": x})
    names = [n.name for n in graph.nodes]
    assert names[0] == "pre" and "c" in names
    assert all(n == "c" or n.startswith("c/") for n in names[1:])
    assert len({t.name for t in graph.tensors}) == len(graph.tensors)


def test_symbolic_dims_need_input_shapes():
    model = make_model([node("Relu", ["x"], ["y"])], {"x": (["batch", 3], TensorProto.FLOAT)},
                       ["y"])
    with pytest.raises(OnnxImportError, match="symbolic dimension 'batch'.*input_shapes"):
        load_onnx(model)
    graph = load_onnx(model, input_shapes={"x": [5, 3]})
    assert graph.tensor("y").shape == (5, 3)
    with pytest.raises(OnnxImportError, match="not graph inputs"):
        load_onnx(model, input_shapes={"z": [1]})


def test_every_unsupported_op_is_listed_once():
    x = rand(2, 3)
    nodes = [node("Foo", ["x"], ["a"], name="foo1", domain="com.example"),
             node("Relu", ["a"], ["b"]),
             node("Hardmax", ["b"], ["c"], name="hm1"),  # downstream of an unsupported op
             node("Hardmax", ["x"], ["d"], name="hm2"),
             node("Gather", ["x", "ids"], ["e"], axis=1, name="g1"),
             node("Relu", ["x"], ["f"])]
    model = make_model(nodes, {"x": x, "ids": np.array([0, 2, 1], np.int32)},
                       ["c", "d", "e", "f"])
    with pytest.raises(OnnxImportError) as e:
        load_onnx(model)
    assert set(e.value.unsupported) == {"com.example.Foo", "Hardmax", "Gather (int32 indices)"}
    assert e.value.unsupported["Hardmax"] == "hm1"
    assert "\n" not in str(e.value)


def test_params_hold_initializer_values_in_graph_order():
    x, w, b = rand(1, 2, 5, 5), rand(3, 2, 3, 3, seed=1), rand(3, seed=2)
    model = make_model([node("Conv", ["x", "w", "b"], ["y"])], {"x": x}, ["y"], {"w": w, "b": b})
    imported = import_onnx(model)
    params = imported.params()
    assert list(params) == ["w", "b"]
    np.testing.assert_array_equal(params["w"], w)
    assert imported.graph.tensor("w").init == "he" and imported.graph.tensor("b").init == "zeros"


# ---- casts and low-precision tensors (a mixed-precision export) -------------------------------

def test_mixed_precision_casts_and_bfloat16_weights():
    """x (float32) -> Cast bf16 -> MatMul with a bfloat16 initializer -> Cast float32: the casts
    become Cast ops, the weight keeps its type, and the reference rounds as bfloat16 does (the
    product accumulated in float32, rounded once to bfloat16)."""
    import ml_dtypes

    x, w = rand(3, 8), rand(8, 4, seed=1).astype(ml_dtypes.bfloat16)
    model = make_model([node("Cast", ["x"], ["xb"], to=TensorProto.BFLOAT16),
                        node("MatMul", ["xb", "w"], ["yb"]),
                        node("Cast", ["yb"], ["y"], to=TensorProto.FLOAT)],
                       {"x": x}, ["y"], {"w": w})
    xb = x.astype(ml_dtypes.bfloat16).astype(np.float32)
    want = (xb @ w.astype(np.float32)).astype(ml_dtypes.bfloat16).astype(np.float32)
    graph = check_against_onnx(model, {"x": x}, rtol=0, expected=[want])
    assert ops_of(graph) == ["Cast", "MatMul", "Cast"]
    assert graph.tensor("w").dtype == "bfloat16"
