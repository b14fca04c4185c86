"""planner.torch on held-out models (torch_heldout.py: flip, GRU LM, MobileNetV3 and ConvNeXt
blocks, a ViT with a class token): each trains through torch.export, the planner and a built
CPU executor, and after three SGD steps on fixed batches its params(), keyed by state_dict()
names, equal PyTorch's within float32 noise (the tolerance argument of
tests/importers/torch_training_check.py, tests/importers/torch_step.py `mismatches`).
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch.nn import functional as F  # noqa: E402

from planner.graph import run  # noqa: E402
from planner.importers.torch.convert import convert  # noqa: E402
from planner.ops.base import get_op  # noqa: E402
from planner.torch.training import export  # noqa: E402
from tests.importers.torch_heldout import MODELS  # noqa: E402
from tests.importers.torch_training_check import STEPS, trains_like_pytorch  # noqa: E402


def _case(name: str):
    make, inputs, loss, labels = MODELS[name]
    torch.manual_seed(0)
    model = make().train()
    with torch.no_grad():  # off the init constants (norms' ones and zeros)
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    g = torch.Generator().manual_seed(1)
    batches = [(inputs(g), labels(g)) for _ in range(STEPS)]
    return model, loss, batches


@pytest.mark.parametrize("name", sorted(MODELS))
def test_trains_like_pytorch_with_sgd(name, tmp_path):
    model, loss, batches = _case(name)
    trains_like_pytorch(model, loss, batches, "sgd", tmp_path)


def test_flip_is_a_backward_slice():
    """torch.flip over two axes: one Slice with step -1 on each (size-1 axes left alone), whose
    numpy reference and gradient (SliceGrad) are torch.flip's."""

    class Flip(torch.nn.Module):
        def forward(self, x):
            return torch.flip(x, [0, -1, 1])

    x = torch.randn(3, 1, 4)
    graph = convert(export(Flip(), (x,), None, None)).graph
    (node,) = graph.nodes
    assert node.op == "Slice"
    assert (node.attrs["axes"], node.attrs["steps"]) == ([0, 2], [-1, -1])
    slice_op = get_op("Slice")
    (y,) = slice_op.reference([x.numpy()], node.attrs)
    np.testing.assert_array_equal(y, torch.flip(x, [0, 2]).numpy())
    dy = np.random.default_rng(0).standard_normal(y.shape).astype(np.float32)
    (dx,) = get_op("SliceGrad").reference(
        [dy], {**slice_op.normalize_attrs(node.attrs), "input_shape": [3, 1, 4]})
    np.testing.assert_array_equal(dx, torch.flip(torch.from_numpy(dy), [0, 2]).numpy())


def test_a_mask_built_in_forward_is_a_constant():
    """tril(ones) and its negation read only constants: torch evaluates them at import, and
    the Where reads the mask's value; no op of the graph computes it."""
    model, loss, batches = _case("masked_attention")
    imported = convert(export(model, (batches[0][0],), loss, batches[0][1]))
    # the masking Where: its condition is computed by no op (a max(dim)'s decomposition has a
    # Where of its own, over a computed condition)
    produced = {t for n in imported.graph.nodes for t in n.outputs}
    (where,) = [n for n in imported.graph.nodes
                if n.op == "Where" and n.inputs[0] not in produced]
    mask = imported.params()[where.inputs[0]]
    np.testing.assert_array_equal(mask, ~np.tril(np.ones((5, 5), dtype=bool)))
    assert imported.graph.tensor(where.inputs[0]).role == "state"


def test_random_ops_are_not_folded():
    """torch.rand reads no tensor but is drawn in the step (a random op), never a constant."""
    class Noisy(torch.nn.Module):
        def forward(self, x):
            return x + torch.rand(3)

    graph = convert(export(Noisy(), (torch.randn(2, 3),), None, None)).graph
    assert [n.op for n in graph.nodes] == ["RandomUniform", "Add"]


def test_batch_statistics_without_running_ones_over_a_batch_are_a_group_norm():
    """aten._native_batch_norm_legit.no_stats over (N, C, L), N > 1: a GroupNorm of the batch
    as one sample, channels first (issue 86)."""
    class BatchStats(torch.nn.Module):
        def forward(self, x):
            return F.batch_norm(x, None, None, training=True)

    x = torch.randn(2, 3, 4)
    imported = convert(export(BatchStats(), (x,), None, None))
    assert "GroupNorm" in {n.op for n in imported.graph.nodes}
    out = run(imported.graph, {imported.inputs[0]: x.numpy()}, imported.params())
    np.testing.assert_allclose(out[imported.graph.outputs[0]], BatchStats()(x).numpy(),
                               rtol=1e-5, atol=1e-5)


def test_batch_statistics_without_running_ones_over_a_batch():
    # BatchNorm(track_running_stats=False)'s op, over a batch of 2 (not InstanceNorm's one
    # sample): the batch moved inside one sample, GroupNorm with a group per channel
    from planner.graph.interpret import run

    class BatchStats(torch.nn.Module):
        def forward(self, x, w, b):
            return F.batch_norm(x, None, None, w, b, training=True, eps=1e-3)

    for shape in ((2, 3, 4), (5, 3), (2, 3, 2, 2)):
        x = torch.randn(shape, dtype=torch.float64) * 3 + 1
        w, b = torch.randn(3, dtype=torch.float64), torch.randn(3, dtype=torch.float64)
        graph = convert(export(BatchStats(), (x.float(), w.float(), b.float()), None,
                               None)).graph
        assert "GroupNorm" in [n.op for n in graph.nodes]
        feeds = dict(zip([t.name for t in graph.by_role("input")],
                         (x.float().numpy(), w.float().numpy(), b.float().numpy()),
                         strict=True))
        got = run(graph, feeds, {}, keep="outputs")[graph.outputs[0]]
        want = BatchStats()(x, w, b).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


def test_ops_of_constants_with_several_outputs_fold():
    class MaxOfConstants(torch.nn.Module):
        def forward(self, x):
            values, indices = torch.arange(6.0).reshape(2, 3).flip(1).max(dim=1)
            return x * values + indices.to(torch.float32)

    imported = convert(export(MaxOfConstants(), (torch.randn(4, 2),), None, None))
    assert {n.op for n in imported.graph.nodes} <= {"Mul", "Add", "Fill"}  # no max computed
    x = torch.randn(4, 2)
    out = run(imported.graph, {imported.inputs[0]: x.numpy()}, imported.params())
    np.testing.assert_array_equal(out[imported.graph.outputs[0]],
                                  MaxOfConstants()(x).numpy())


@pytest.mark.parametrize("mode", ["constant", "reflect", "replicate"])
def test_padding_is_pytorchs(mode):
    """F.pad's (before, after) pairs run from the last axis backwards; the planner's Pad takes
    ONNX's layout. 1-D and 2-D, asymmetric, on the numpy reference."""

    class Padded(torch.nn.Module):
        def forward(self, x):
            value = {"value": 0.5} if mode == "constant" else {}
            return F.pad(x, (1, 2, 2, 1), mode=mode, **value) + \
                F.pad(x[:, :, 0], (2, 1), mode=mode, **value)[:, :, None, :]

    x = torch.randn(2, 3, 4, 5)
    imported = convert(export(Padded(), (x,), None, None))
    assert {n.op for n in imported.graph.nodes} >= {"Pad"}
    out = run(imported.graph, {imported.inputs[0]: x.numpy()}, imported.params())
    np.testing.assert_array_equal(out[imported.graph.outputs[0]], Padded()(x).numpy())
