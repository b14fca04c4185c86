"""Shape ops: forward references against torch, gradient rules against finite differences,
shape errors that name what is wrong. The forward references run through checked_reference, so
each op's shape rule is checked against what its reference produced."""

from __future__ import annotations

import numpy as np
import pytest

from planner.graph import GraphBuilder, GraphBuildError
from planner.ops import OpError, TensorType, get_op
from tests.ops.opcheck import RuleBuilder, apply_rule, check_gradient, checked_reference


def infer(op: str, shapes: list[tuple[int, ...]], **attrs) -> list[TensorType]:
    opdef = get_op(op)
    return opdef.infer([TensorType(s) for s in shapes], opdef.normalize_attrs(attrs))


RNG = np.random.default_rng(0)


def rand(*shape: int, dtype=np.float32) -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


# ---- forward references vs torch ------------------------------------------------------------

@pytest.mark.parametrize("shape, target", [((2, 3, 4), [6, 4]), ((2, 3, 4), [-1, 2]),
                                           ((2, 3, 4), [4, 1, -1]), ((5,), [1, 5, 1])])
def test_reshape_matches_torch(shape, target):
    torch = pytest.importorskip("torch")
    x = rand(*shape)
    (y,) = checked_reference("Reshape", [x], shape=target)
    assert np.array_equal(y, torch.from_numpy(x).reshape(target).numpy())


@pytest.mark.parametrize("shape, axis", [((2, 3, 4, 5), 1), ((2, 3, 4, 5), 2), ((2, 3, 4, 5), 0),
                                         ((2, 3, 4, 5), 4), ((2, 3, 4), -1),
                                         ((2, 3, 4, 5), -2), ((2, 3, 4), -3)])
def test_flatten_matches_torch(shape, axis):
    torch = pytest.importorskip("torch")
    x = rand(*shape)
    (y,) = checked_reference("Flatten", [x], axis=axis)
    rank = len(shape)
    axis = axis + rank if axis < 0 else axis  # ONNX: a negative axis counts from the end
    # ONNX Flatten is torch.flatten on each side of `axis`; an empty side becomes extent 1.
    t = torch.from_numpy(x)
    t = torch.flatten(t, start_dim=axis) if axis < rank else t.unsqueeze(-1)
    t = torch.flatten(t, end_dim=axis - 1) if axis > 0 else t.unsqueeze(0)
    assert y.shape == tuple(t.shape) and np.array_equal(y, t.numpy())


@pytest.mark.parametrize("perm", [[0, 2, 3, 1], [3, 2, 1, 0], [0, 1, 2, 3]])
def test_transpose_matches_torch_permute(perm):
    torch = pytest.importorskip("torch")
    x = rand(2, 3, 4, 5)
    (y,) = checked_reference("Transpose", [x], perm=perm)
    assert np.array_equal(y, torch.from_numpy(x).permute(*perm).numpy())


@pytest.mark.parametrize("axis, shapes", [(0, [(1, 3), (2, 3), (3, 3)]),
                                          (1, [(2, 1, 4), (2, 5, 4)]),
                                          (-1, [(2, 3, 1), (2, 3, 2)])])
def test_concat_matches_torch_cat(axis, shapes):
    torch = pytest.importorskip("torch")
    xs = [rand(*s) for s in shapes]
    (y,) = checked_reference("Concat", xs, axis=axis)
    assert np.array_equal(y, torch.cat([torch.from_numpy(x) for x in xs], dim=axis).numpy())


@pytest.mark.parametrize("axis, sizes", [(0, [1, 3, 2]), (1, [4, 0, 1]), (-1, [3])])
def test_split_matches_torch_split(axis, sizes):
    torch = pytest.importorskip("torch")
    x = rand(6, 5, 3)
    ys = checked_reference("Split", [x], axis=axis, sizes=sizes)
    expected = torch.split(torch.from_numpy(x), sizes, dim=axis)
    assert len(ys) == len(sizes)
    for y, e in zip(ys, expected, strict=True):
        assert np.array_equal(y, e.numpy())


@pytest.mark.parametrize("starts, ends, axes, steps", [
    ([1], [3], [0], []),
    ([-3, 0], [2**63 - 1, -1], [2, 1], []),      # from the end; ONNX's "to the end" sentinel
    ([0, 1], [100, 5], [-1, 0], [2, 3]),         # ends clamp; strided
    ([-100], [2], [1], [1]),                     # starts clamp too
    ([3], [1], [0], []),                         # empty slice
])
def test_slice_matches_torch_indexing(starts, ends, axes, steps):
    torch = pytest.importorskip("torch")
    x = rand(4, 5, 6)
    (y,) = checked_reference("Slice", [x], starts=starts, ends=ends, axes=axes, steps=steps)
    index = [slice(None)] * 3
    for s, e, a, st in zip(starts, ends, axes, steps or [1] * len(axes), strict=True):
        index[a] = slice(max(s, -x.shape[a]), min(e, x.shape[a]), st)
    assert np.array_equal(y, torch.from_numpy(x)[tuple(index)].numpy())


@pytest.mark.parametrize("starts, ends, axes, steps", [
    ([-1], [-100], [1], [-1]),                   # a flip: from the last to before the first
    ([-1, 4], [-7, 0], [2, 0], [-2, -1]),       # every 2nd backwards; the end excluded
    ([1], [3], [0], [-1]),                       # empty: the end lies after the start
])
def test_slice_with_negative_steps_walks_backwards(starts, ends, axes, steps):
    x = rand(4, 5, 6)
    (y,) = checked_reference("Slice", [x], starts=starts, ends=ends, axes=axes, steps=steps)
    index = [slice(None)] * 3
    for s, e, a, st in zip(starts, ends, axes, steps, strict=True):
        index[a] = slice(s, e, st)
    assert np.array_equal(y, x[tuple(index)])
    (dx,) = checked_reference("SliceGrad", [y], starts=starts, ends=ends, axes=axes, steps=steps,
                input_shape=list(x.shape))
    want = np.zeros_like(x)
    want[tuple(index)] = y
    assert np.array_equal(dx, want)


def test_zeros_and_slice_grad():
    (z,) = checked_reference("Zeros", [], shape=[2, 3], dtype="float64")
    assert z.dtype == np.float64 and z.shape == (2, 3) and not z.any()
    dy = rand(4, 2)
    (dx,) = checked_reference("SliceGrad", [dy], starts=[1], ends=[100], axes=[1], steps=[2],
                              input_shape=[4, 4])
    assert np.array_equal(dx[:, 1::2], dy) and not dx[:, 0::2].any()


def test_float64_stays_float64():
    x = rand(2, 3, dtype=np.float64)
    for op, attrs in [("Reshape", {"shape": [3, 2]}), ("Flatten", {"axis": 1}),
                      ("Transpose", {"perm": [1, 0]}), ("Concat", {"axis": 0}),
                      ("Split", {"sizes": [1, 1]}),
                      ("Slice", {"starts": [0], "ends": [1], "axes": [0]})]:
        assert all(y.dtype == np.float64 for y in checked_reference(op, [x], **attrs)), op


def test_data_movement_costs_no_flops_and_slice_reads_only_its_part():
    x = TensorType((8, 16))
    for op, attrs in [("Reshape", {"shape": [16, 8]}), ("Flatten", {}),
                      ("Transpose", {"perm": [1, 0]}), ("Concat", {"axis": 0}),
                      ("Split", {"sizes": [4, 4]}),
                      ("Slice", {"starts": [0], "ends": [2], "axes": [0]})]:
        opdef = get_op(op)
        full = opdef.normalize_attrs(attrs)
        outs = opdef.infer([x], full)
        assert opdef.flops([x], outs, full) == 0, op
    full = get_op("Slice").normalize_attrs({"starts": [0], "ends": [2], "axes": [0]})
    assert get_op("Slice").bytes_moved([x], [TensorType((2, 16))], full) == 2 * 2 * 16 * 4
    assert get_op("Transpose").bytes_moved([x], [TensorType((16, 8))], {}) == 2 * 8 * 16 * 4


# ---- gradient rules -------------------------------------------------------------------------

def f64(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape)


@pytest.mark.parametrize("op, attrs", [("Reshape", {"shape": [3, -1]}), ("Flatten", {"axis": 2}),
                                       ("Transpose", {"perm": [2, 0, 1]}),
                                       ("Slice", {"starts": [-2, 0], "ends": [9, 3],
                                                  "axes": [2, 1], "steps": [1, 2]})])
def test_unary_shape_op_gradients(op, attrs):
    check_gradient(op, [f64(2, 3, 4)], attrs)


def test_concat_gradient_splits_dy():
    parts = [f64(2, 1, 3), f64(2, 4, 3), f64(2, 2, 3)]
    grads, dys = check_gradient("Concat", parts, {"axis": -2})
    assert np.array_equal(np.concatenate(grads, axis=-2), dys[0])


def test_split_gradient_fills_missing_output_grads_with_zeros():
    x, attrs = [f64(3, 5)], {"axis": 1, "sizes": [2, 1, 2]}
    check_gradient("Split", x, attrs)
    assert "Zeros" not in apply_rule("Split", x, attrs)[2]
    (dx,), dys = check_gradient("Split", x, attrs, of=[0, 2])
    assert apply_rule("Split", x, attrs, of=[0, 2])[2] == ["Zeros", "Concat"]
    assert np.array_equal(dx, np.concatenate([dys[0], np.zeros((3, 1)), dys[1]], axis=1))


def test_gradients_skip_inputs_not_needed():
    b = GraphBuilder()
    a, c = b.input("a", (2, 3)), b.input("c", (1, 3))
    b.op("Concat", [a, c], {"axis": 0})
    dy = b.input("dy", (3, 3))
    node = b.build().nodes[-1]
    assert get_op("Concat").gradient(RuleBuilder(b, wanted={"c"}), node, [dy])[0] is None
    assert get_op("Concat").gradient(RuleBuilder(b, wanted=set()), node, [dy]) == [None, None]
    b.op_n("Split", [a], {"axis": 0, "sizes": [1, 1]})
    node = b.build().nodes[-1]
    assert get_op("Split").gradient(RuleBuilder(b, {a}), node, [None, None]) == [None]


# ---- errors ---------------------------------------------------------------------------------

def test_reshape_count_mismatch_names_both_shapes():
    with pytest.raises(OpError, match=r"\[2, 3\].*\[4, 2\]"):
        infer("Reshape", [(2, 3)], shape=[4, 2])
    with pytest.raises(OpError, match="at most one -1"):
        infer("Reshape", [(2, 3)], shape=[-1, -1])
    with pytest.raises(OpError, match=r"\[2, 3\].*\[4, -1\]"):
        infer("Reshape", [(2, 3)], shape=[4, -1])


def test_concat_mismatch_on_non_axis_dim():
    with pytest.raises(OpError, match=r"input 1 has shape \[2, 4\].*\[2, 3\].*dim 1"):
        infer("Concat", [(2, 3), (2, 4)], axis=0)
    with pytest.raises(OpError, match="rank"):
        infer("Concat", [(2, 3), (2, 3, 1)], axis=0)


def test_transpose_perm_must_be_a_permutation():
    with pytest.raises(OpError, match=r"perm \[0, 0, 1\] is not a permutation"):
        infer("Transpose", [(2, 3, 4)], perm=[0, 0, 1])
    with pytest.raises(OpError, match="not a permutation"):
        infer("Transpose", [(2, 3, 4)], perm=[1, 0])


def test_split_sizes_must_sum_to_the_dim():
    with pytest.raises(OpError, match=r"sizes \[2, 2\] sum to 4.*extent 5"):
        infer("Split", [(3, 5)], axis=1, sizes=[2, 2])


def test_slice_and_flatten_errors():
    with pytest.raises(OpError, match="same length"):
        infer("Slice", [(3, 5)], starts=[0], ends=[1, 2], axes=[0])
    with pytest.raises(OpError, match="hold a 0"):
        infer("Slice", [(3, 5)], starts=[0], ends=[1], axes=[0], steps=[0])
    with pytest.raises(OpError, match="twice"):
        infer("Slice", [(3, 5)], starts=[0, 0], ends=[1, 1], axes=[1, -1])
    with pytest.raises(OpError, match="axis 3 out of range"):
        infer("Flatten", [(3, 5)], axis=3)


def test_builder_error_names_the_node():
    b = GraphBuilder()
    x = b.input("x", (2, 3))
    with pytest.raises(GraphBuildError, match=r"node 'reshape'.*\[2, 3\]"):
        b.op("Reshape", [x], {"shape": [5]})
