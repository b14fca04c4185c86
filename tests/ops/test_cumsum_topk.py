"""CumSum and TopK (with TopKGrad): the numpy references against PyTorch's torch.cumsum and
torch.topk (values, indices, NaN's place), their gradients against finite differences and
torch autograd, and the shape errors."""

from __future__ import annotations

import numpy as np
import pytest

from planner.ops import OpError, TensorType, get_op
from tests.ops.opcheck import check_gradient, reference, torch_gradients

torch = pytest.importorskip("torch")


def _x(shape, seed=0, dtype=np.float64):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def _torch_cumsum(x, axis, exclusive, reverse):
    t = torch.tensor(x)
    if reverse:
        t = t.flip(axis)
    y = t.cumsum(axis)
    if exclusive:  # the sum of the elements before: the running sum less the element itself
        y = y - t
    return (y.flip(axis) if reverse else y).numpy()


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("reverse", [False, True])
def test_cumsum_is_torchs(axis, exclusive, reverse):
    """In float64, to rounding; in float32 within the error of a running sum (n ulps of the
    running sum of |x|), which PyTorch's float32 (summed in double) is within too."""
    attrs = {"axis": axis, "exclusive": exclusive, "reverse": reverse}
    x = _x((3, 4, 5), dtype=np.float32)
    exact = _torch_cumsum(x.astype(np.float64), axis, exclusive, reverse)
    np.testing.assert_allclose(reference("CumSum", [x.astype(np.float64)], attrs)[0], exact,
                               rtol=1e-12, atol=1e-12)
    got = reference("CumSum", [x], attrs)[0]
    assert got.dtype == np.float32
    bound = x.shape[axis] * 2.0**-24 * _torch_cumsum(np.abs(x).astype(np.float64), axis, False,
                                                     reverse)
    assert np.all(np.abs(got - exact) <= bound)
    assert np.all(np.abs(_torch_cumsum(x, axis, exclusive, reverse) - exact) <= bound)


@pytest.mark.parametrize("attrs", [{"axis": 1}, {"axis": 0, "exclusive": True},
                                   {"axis": -1, "reverse": True},
                                   {"axis": 1, "exclusive": True, "reverse": True}])
def test_cumsum_gradient(attrs):
    grads, dys = check_gradient("CumSum", [_x((3, 4))], attrs)
    if not attrs.get("exclusive") and not attrs.get("reverse"):
        (want,) = torch_gradients(lambda x: torch.cumsum(x, attrs["axis"]), [_x((3, 4))], dys,
                                  [0])
        np.testing.assert_allclose(grads[0], want, rtol=1e-12)


@pytest.mark.parametrize("k,axis,largest", [(3, -1, True), (2, 0, False), (5, 1, True),
                                            (0, 1, True)])
def test_topk_is_torchs(k, axis, largest):
    x = _x((4, 5, 3), dtype=np.float32)
    values, indices = reference("TopK", [x], {"k": k, "axis": axis, "largest": largest})
    v, i = torch.topk(torch.tensor(x), k, dim=axis, largest=largest)
    assert values.dtype == np.float32 and indices.dtype == np.int64
    np.testing.assert_array_equal(values, v.numpy())
    np.testing.assert_array_equal(indices, i.numpy())


def test_topk_places_nan_as_torch_and_ties_by_index():
    x = np.float32([[1.0, np.nan, 3.0, -np.inf, 3.0, np.inf]])
    for largest in (True, False):
        values, indices = reference("TopK", [x], {"k": 6, "largest": largest})
        v, i = torch.topk(torch.tensor(x), 6, largest=largest)
        np.testing.assert_array_equal(values, v.numpy())  # NaN where torch has it
    # equal values: the lower index first (ONNX's rule)
    assert reference("TopK", [x], {"k": 3})[1].tolist() == [[1, 5, 2]]
    assert reference("TopK", [x], {"k": 4, "largest": False})[1].tolist() == [[3, 0, 2, 4]]


@pytest.mark.parametrize("k,axis,largest", [(2, -1, True), (3, 1, False)])
def test_topk_gradient_scatters_into_the_chosen_positions(k, axis, largest):
    x = _x((2, 4, 5))
    attrs = {"k": k, "axis": axis, "largest": largest}
    grads, dys = check_gradient("TopK", [x], attrs, of=[0])
    (want,) = torch_gradients(lambda t: torch.topk(t, k, dim=axis, largest=largest)[0], [x],
                              dys, [0])
    np.testing.assert_array_equal(grads[0], want)


def test_shape_errors_name_the_sizes():
    with pytest.raises(OpError, match=r"k = 6 out of range \[0, 5\] for axis 1"):
        get_op("TopK").infer([TensorType((2, 5))], {"k": 6, "axis": 1, "largest": True})
    # (CumSum sums integers exactly; the product of integers is not one of its kernels)
    with pytest.raises(OpError, match="CumProd: input must be a float tensor, got int64"):
        get_op("CumProd").infer([TensorType((2, 5), "int64")],
                                {"axis": 0, "exclusive": False, "reverse": False})
    with pytest.raises(OpError, match="CumSum: input must be a float tensor, got bool"):
        get_op("CumSum").infer([TensorType((2, 5), "bool")],
                               {"axis": 0, "exclusive": False, "reverse": False})
    with pytest.raises(OpError, match="indices must be int64 of dvalues' shape"):
        get_op("TopKGrad").infer([TensorType((2, 3)), TensorType((2, 3), "int32")],
                                 {"axis": 1, "size": 5})
    with pytest.raises(ValueError, match=r"an index outside \[0, 5\)"):
        reference("TopKGrad", [np.ones((1, 2)), np.array([[0, 5]])], {"axis": 1, "size": 5})


class CumTop(torch.nn.Module):
    def forward(self, x):
        values, indices = torch.topk(torch.cumsum(x, dim=1), 2, dim=-1, largest=False)
        return values, indices


def test_onnx_export_imports_and_matches_pytorch():
    import io
    import warnings

    from planner.graph.interpret import run
    from planner.importers import import_onnx

    x = _x((2, 5, 4), dtype=np.float32)
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(CumTop(), (torch.tensor(x),), f, dynamo=False, opset_version=17)
    imported = import_onnx(f.getvalue())
    graph = imported.graph
    assert {"CumSum", "TopK"} <= {n.op for n in graph.nodes}
    out = run(graph, {graph.by_role("input")[0].name: x}, imported.params(), keep="outputs")
    values, indices = (out[o] for o in graph.outputs)
    want_v, want_i = CumTop()(torch.tensor(x))
    np.testing.assert_array_equal(indices, want_i.numpy())
    np.testing.assert_allclose(values, want_v.numpy(), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("exclusive,reverse", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_onnx_cumsum_and_topk_attributes_match_onnx_reference(exclusive, reverse):
    """CumSum's exclusive / reverse and TopK's largest=0 as ONNX defines them (onnx's own
    reference evaluator), through the importer."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    from onnx.reference import ReferenceEvaluator

    from planner.graph.interpret import run
    from planner.importers import import_onnx

    x = _x((3, 5), dtype=np.float32)
    nodes = [helper.make_node("CumSum", ["x", "axis"], ["c"], exclusive=exclusive,
                              reverse=reverse),
             helper.make_node("TopK", ["c", "k"], ["v", "i"], axis=0, largest=0)]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 5])],
        [helper.make_tensor_value_info("v", TensorProto.FLOAT, [2, 5]),
         helper.make_tensor_value_info("i", TensorProto.INT64, [2, 5])],
        [numpy_helper.from_array(np.array(-1, np.int64), "axis"),
         numpy_helper.from_array(np.array([2], np.int64), "k")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    want_v, want_i = ReferenceEvaluator(model).run(None, {"x": x})
    imported = import_onnx(model.SerializeToString())
    g = imported.graph
    out = run(g, {"x": x}, imported.params(), keep="outputs")
    np.testing.assert_array_equal(out[g.outputs[1]], want_i)
    np.testing.assert_allclose(out[g.outputs[0]], want_v, rtol=1e-6, atol=1e-6)
