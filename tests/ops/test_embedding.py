"""Embedding and EmbeddingGrad: against torch (F.embedding and its autograd, repeated ids
accumulating), finite differences, and clear errors."""

from __future__ import annotations

import numpy as np
import pytest

from planner.graph import GraphBuilder
from planner.ops import OpError, TensorType, get_op
from tests.ops.opcheck import RuleBuilder, apply_rule, check_gradient, checked_reference

RNG = np.random.default_rng(0)


@pytest.mark.parametrize("ids_shape", [(5,), (2, 3), (2, 1, 4)])
def test_embedding_matches_torch(ids_shape):
    torch = pytest.importorskip("torch")
    table = RNG.standard_normal((7, 3)).astype(np.float32)
    ids = RNG.integers(0, 7, ids_shape)
    (y,) = checked_reference("Embedding", [table, ids])
    expected = torch.nn.functional.embedding(torch.from_numpy(ids), torch.from_numpy(table))
    assert np.array_equal(y, expected.numpy())


def test_embedding_grad_matches_torch_autograd_with_repeated_ids():
    torch = pytest.importorskip("torch")
    table = RNG.standard_normal((6, 4))
    ids = np.array([[0, 3, 3], [5, 3, 0]])        # 3 three times, 0 twice, 1, 2 and 4 never
    dy = RNG.standard_normal((2, 3, 4))
    (dtable,) = checked_reference("EmbeddingGrad", [ids, dy], num_embeddings=6)
    t = torch.from_numpy(table).requires_grad_()
    torch.nn.functional.embedding(torch.from_numpy(ids), t).backward(torch.from_numpy(dy))
    np.testing.assert_allclose(dtable, t.grad.numpy(), rtol=1e-12, atol=1e-12)
    assert not dtable[[1, 2, 4]].any()


def test_embedding_gradient_rule_by_finite_differences():
    ids = np.array([[1, 1], [0, 4]])
    inputs = [RNG.standard_normal((5, 3)), ids]
    check_gradient("Embedding", inputs, wrt=[0])
    assert apply_rule("Embedding", inputs, wrt=[0])[2] == ["EmbeddingGrad"]


def test_embedding_gradient_rule_never_differentiates_ids_or_a_frozen_table():
    b = GraphBuilder()
    table, ids = b.input("table", (5, 3)), b.input("ids", (4,), "int64")
    b.op("Embedding", [table, ids])
    dy = b.input("dy", (4, 3))
    node = b.build().nodes[-1]
    rule = get_op("Embedding").gradient
    assert get_op("Embedding").nondiff_inputs == (1,)
    assert rule(RuleBuilder(b, {table, ids}), node, [dy])[1] is None
    assert rule(RuleBuilder(b, set()), node, [dy]) == [None, None]


def test_float64_table_gives_float64_rows():
    table, ids = RNG.standard_normal((4, 2)), np.array([3, 0])
    (y,) = checked_reference("Embedding", [table, ids])
    assert y.dtype == np.float64 and np.array_equal(y, table[[3, 0]])


def test_embedding_bytes_do_not_depend_on_table_size():
    ids, out = TensorType((8, 2), "int64"), TensorType((8, 2, 16))
    small = get_op("Embedding").bytes_moved([TensorType((100, 16)), ids], [out], {})
    large = get_op("Embedding").bytes_moved([TensorType((10**6, 16)), ids], [out], {})
    assert small == large == 8 * 2 * 8 + 2 * 8 * 2 * 16 * 4


def test_embedding_grad_flops_one_add_per_dy_element():
    ids, dy = TensorType((8, 2), "int64"), TensorType((8, 2, 16))
    opdef = get_op("EmbeddingGrad")
    outs = opdef.infer([ids, dy], {"num_embeddings": 50})
    assert outs == [TensorType((50, 16))]
    assert opdef.flops([ids, dy], outs, {"num_embeddings": 50}) == 8 * 2 * 16


def test_embedding_errors():
    with pytest.raises(OpError, match="ids must be an integer tensor"):
        get_op("Embedding").infer([TensorType((5, 3)), TensorType((4,), "float32")], {})
    with pytest.raises(OpError, match="table must have rank 2"):
        get_op("Embedding").infer([TensorType((5,)), TensorType((4,), "int64")], {})
    with pytest.raises(OpError, match=r"ids must lie in \[0, 5\), got values from -1 to 2"):
        get_op("Embedding").reference([np.zeros((5, 3)), np.array([2, -1])], {})
    with pytest.raises(OpError, match=r"dy has shape \[4, 2\].*\[3\]"):
        get_op("EmbeddingGrad").infer([TensorType((3,), "int64"), TensorType((4, 2))],
                                      {"num_embeddings": 5})
