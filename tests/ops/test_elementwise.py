"""Element-wise ops: broadcasting shape rule and errors, references vs torch, gradient rules vs
finite differences and torch autograd, and the shape of `sum_to_shape`'s output graph."""

import numpy as np
import pytest

from planner.graph import GraphBuilder, GraphBuildError
from planner.ops import OpError, TensorType, get_op
from planner.ops.elementwise import broadcast_shapes
from planner.ops.reduce import sum_to_shape
from tests.ops.opcheck import (
    RuleBuilder,
    apply_rule,
    check_gradient,
    reference,
    rel_error,
    torch_gradients,
)

BINARY = ["Add", "Sub", "Mul", "Div"]
# (a, b) pairs: equal, both sides stretching, rank difference, a scalar, size-1 on both.
SHAPES = [((3, 4), (3, 4)), ((2, 1, 4), (3, 1)), ((4,), (2, 3, 4)), ((), (2, 3)),
          ((2, 3, 1, 5), (1, 4, 5))]


def _inputs(op, sa, sb, dtype, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(sa).astype(dtype)
    b = rng.standard_normal(sb).astype(dtype)
    if op == "Div":  # keep the divisor away from zero
        b = (np.sign(b) * (0.5 + np.abs(b))).astype(dtype)
    return np.asarray(a), np.asarray(b)


def _torch_binary(op):
    import torch
    return {"Add": torch.add, "Sub": torch.sub, "Mul": torch.mul, "Div": torch.div}[op]


# ---- shape rule -------------------------------------------------------------------------------

@pytest.mark.parametrize("sa,sb", SHAPES)
def test_broadcast_shape_matches_numpy(sa, sb):
    expected = np.broadcast_shapes(sa, sb)
    assert broadcast_shapes("Add", sa, sb) == expected
    out = get_op("Mul").infer([TensorType(sa), TensorType(sb)], {})[0]
    assert out == TensorType(expected, "float32")


def test_incompatible_broadcast_names_both_shapes():
    with pytest.raises(OpError, match=r"Add: shapes \[2, 3\] and \[4, 3\] do not broadcast"):
        get_op("Add").infer([TensorType((2, 3)), TensorType((4, 3))], {})
    b = GraphBuilder()
    x, y = b.input("x", (5, 2)), b.input("y", (3,))
    with pytest.raises(GraphBuildError, match=r"node 'sub'.*\[5, 2\] and \[3\]"):
        b.op("Sub", [x, y])


def test_dtype_mismatch_and_bad_dtypes_are_rejected():
    with pytest.raises(OpError, match="dtypes differ: float32.*float64"):
        get_op("Add").infer([TensorType((2,), "float32"), TensorType((2,), "float64")], {})
    with pytest.raises(OpError, match="Div: input must be a float tensor, got int64"):
        get_op("Div").infer([TensorType((2,), "int64"), TensorType((2,), "int64")], {})
    with pytest.raises(OpError, match="Scale: input must be a float"):
        get_op("Scale").infer([TensorType((2,), "int64")], {"factor": 2.0})


def test_integer_add_keeps_dtype():
    a = np.arange(6, dtype=np.int32).reshape(2, 3)
    assert get_op("Add").infer([TensorType((2, 3), "int32")] * 2, {})[0].dtype == "int32"
    assert reference("Add", [a, a])[0].dtype == np.int32


def test_addn_and_expand_errors():
    with pytest.raises(OpError, match=r"AddN: input 1 is float32 \[2, 4\], input 0 is float32 "
                                      r"\[2, 3\]"):
        get_op("AddN").infer([TensorType((2, 3)), TensorType((2, 4))], {})
    with pytest.raises(OpError, match=r"Expand: cannot broadcast input shape \[3, 2\] to shape "
                                      r"\[3, 4\]"):
        get_op("Expand").infer([TensorType((3, 2))], {"shape": [3, 4]})
    with pytest.raises(OpError, match="Expand: cannot broadcast"):
        get_op("Expand").infer([TensorType((1, 2, 3))], {"shape": [2, 3]})


def test_flops_count_output_elements():
    ins = [TensorType((2, 1, 4)), TensorType((3, 1))]
    outs = get_op("Add").infer(ins, {})
    assert get_op("Add").flops(ins, outs, {}) == 2 * 3 * 4
    three = [TensorType((5, 6))] * 3
    assert get_op("AddN").flops(three, three[:1], {}) == 2 * 30
    assert get_op("Expand").flops(ins[:1], [TensorType((3, 2, 4))], {"shape": [3, 2, 4]}) == 0


# ---- references vs torch ----------------------------------------------------------------------

@pytest.mark.parametrize("op", BINARY)
@pytest.mark.parametrize("sa,sb", SHAPES)
def test_binary_reference_matches_torch(op, sa, sb):
    torch = pytest.importorskip("torch")
    a, b = _inputs(op, sa, sb, np.float32)
    ours = reference(op, [a, b])[0]
    theirs = _torch_binary(op)(torch.tensor(a), torch.tensor(b)).numpy()
    assert ours.dtype == np.float32
    assert rel_error(ours, theirs) < 1e-5


def test_unary_addn_expand_references_match_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    x, y, z = (rng.standard_normal((2, 3)).astype(np.float32) for _ in range(3))
    assert rel_error(reference("AddN", [x, y, z])[0], (torch.tensor(x) + torch.tensor(y)
                                                       + torch.tensor(z)).numpy()) < 1e-5
    assert rel_error(reference("Neg", [x])[0], torch.neg(torch.tensor(x)).numpy()) < 1e-5
    scaled = reference("Scale", [x], {"factor": -0.3})[0]
    assert scaled.dtype == np.float32
    assert rel_error(scaled, (torch.tensor(x) * -0.3).numpy()) < 1e-5
    v = rng.standard_normal((3, 1)).astype(np.float32)
    expanded = reference("Expand", [v], {"shape": [2, 3, 4]})[0]
    assert rel_error(expanded, torch.tensor(v).expand(2, 3, 4).numpy()) < 1e-5


def test_addn_does_not_modify_its_inputs():
    x = np.ones((2, 2))
    reference("AddN", [x, x])
    assert (x == 1).all()


# ---- gradient rules ---------------------------------------------------------------------------

@pytest.mark.parametrize("op", BINARY)
@pytest.mark.parametrize("sa,sb", SHAPES)
def test_binary_gradient_finite_differences(op, sa, sb):
    a, b = _inputs(op, sa, sb, np.float64)
    grads, _ = check_gradient(op, [a, b])
    assert grads[0].shape == a.shape and grads[1].shape == b.shape


@pytest.mark.parametrize("op", BINARY)
@pytest.mark.parametrize("sa,sb", SHAPES[1:3])
def test_binary_gradient_matches_torch(op, sa, sb):
    pytest.importorskip("torch")
    a, b = _inputs(op, sa, sb, np.float64, seed=3)
    grads, dys, _ = apply_rule(op, [a, b])
    expected = torch_gradients(_torch_binary(op), [a, b], dys, [0, 1])
    for ours, theirs in zip(grads, expected, strict=True):
        assert rel_error(ours, theirs) < 1e-10


@pytest.mark.parametrize("op,attrs", [("Neg", {}), ("Scale", {"factor": 2.5})])
def test_unary_gradient(op, attrs):
    x = np.random.default_rng(2).standard_normal((2, 3))
    check_gradient(op, [x], attrs)


def test_addn_gradient_passes_dy_to_every_input():
    rng = np.random.default_rng(4)
    xs = [rng.standard_normal((3, 2)) for _ in range(3)]
    grads, dys, emitted = apply_rule("AddN", xs)
    assert emitted == []
    for g in grads:
        assert np.array_equal(g, dys[0])
    check_gradient("AddN", xs)


@pytest.mark.parametrize("shape,to", [((3, 1), (2, 3, 4)), ((4,), (2, 3, 4)),
                                      ((1, 3, 1), (2, 3, 5)), ((), (2, 2))])
def test_expand_gradient(shape, to):
    x = np.asarray(np.random.default_rng(5).standard_normal(shape))
    check_gradient("Expand", [x], {"shape": list(to)})


def test_rule_skips_inputs_not_needed():
    a, b = _inputs("Mul", (2, 3), (3,), np.float64)
    grads, _, emitted = apply_rule("Mul", [a, b], wrt=[1])
    assert grads[0] is None and grads[1].shape == (3,)
    # dy * a, then the sum over the broadcast axis; nothing is built for a.
    assert emitted == ["Mul", "ReduceSum"]


@pytest.mark.parametrize("shape,target,ops", [
    ((2, 3), (2, 3), []),
    ((4, 2, 3), (2, 3), ["ReduceSum"]),
    ((2, 3), (2, 1), ["ReduceSum"]),
    ((4, 2, 3), (2, 1), ["ReduceSum", "Reshape"]),
])
def test_sum_to_shape_builds_the_fewest_nodes(shape, target, ops):
    b = GraphBuilder()
    x = b.input("x", shape, "float64")
    out = sum_to_shape(RuleBuilder(b, set()), x, target)
    g = b.build(outputs=[out])
    assert [n.op for n in g.nodes] == ops
    assert g.tensor(out).shape == target
