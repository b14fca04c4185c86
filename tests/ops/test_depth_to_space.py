"""DepthToSpace / SpaceToDepth: against PyTorch's pixel_shuffle / pixel_unshuffle (CRD) and
each other (inverses in both modes), gradients by finite differences, the shape errors, and
nn.PixelShuffle / nn.PixelUnshuffle exports imported and run."""

from __future__ import annotations

import io
import warnings

import numpy as np
import pytest

from planner.ops import OpError, TensorType, get_op
from tests.ops.opcheck import check_gradient, reference

torch = pytest.importorskip("torch")


def _x(shape, dtype=np.float64, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("b", [2, 3])
def test_crd_is_pixel_shuffle_and_unshuffle(b):
    x = _x((2, 2 * b * b, 3, 4))
    got = reference("DepthToSpace", [x], {"blocksize": b, "mode": "CRD"})[0]
    assert np.array_equal(got, torch.nn.functional.pixel_shuffle(torch.tensor(x), b).numpy())
    s = _x((2, 3, 2 * b, 3 * b))
    got = reference("SpaceToDepth", [s], {"blocksize": b, "mode": "CRD"})[0]
    assert np.array_equal(got, torch.nn.functional.pixel_unshuffle(torch.tensor(s), b).numpy())


@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_each_is_the_others_inverse_and_gradient(mode):
    x = _x((2, 8, 3, 5))
    a = {"blocksize": 2, "mode": mode}
    y = reference("DepthToSpace", [x], a)[0]
    assert y.shape == (2, 2, 6, 10)
    assert np.array_equal(reference("SpaceToDepth", [y], a)[0], x)
    check_gradient("DepthToSpace", [x], a)
    check_gradient("SpaceToDepth", [y], a)


def test_shape_errors_name_the_sizes():
    with pytest.raises(OpError, match="6 channels are not a multiple of blocksize"):
        get_op("DepthToSpace").infer([TensorType((1, 6, 2, 2))], {"blocksize": 2, "mode": "DCR"})
    with pytest.raises(OpError, match=r"H and W \(5, 4\) are not multiples of blocksize 2"):
        get_op("SpaceToDepth").infer([TensorType((1, 1, 5, 4))], {"blocksize": 2, "mode": "DCR"})
    with pytest.raises(OpError, match="mode 'XYZ' is not one of"):
        get_op("SpaceToDepth").infer([TensorType((1, 1, 4, 4))], {"blocksize": 2, "mode": "XYZ"})


class Shuffler(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(2, 8, 3, padding=1)
        self.up = torch.nn.PixelShuffle(2)
        self.down = torch.nn.PixelUnshuffle(2)

    def forward(self, x):
        return self.down(torch.relu(self.up(self.conv(x))))


def test_pixel_shuffle_exports_import_and_match_pytorch():
    from planner.graph.interpret import run
    from planner.importers import import_onnx

    torch.manual_seed(0)
    model = Shuffler().eval()
    x = _x((2, 2, 4, 6), np.float32)
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (torch.tensor(x),), f, dynamo=False, opset_version=17)
    graph = import_onnx(f.getvalue())
    ops = [n.op for n in graph.graph.nodes]
    assert "DepthToSpace" in ops
    (out,) = graph.graph.outputs
    ours = run(graph.graph, {graph.graph.by_role("input")[0].name: x}, graph.params(),
               keep="outputs")[out]
    with torch.no_grad():
        np.testing.assert_allclose(ours, model(torch.tensor(x)).numpy(), rtol=1e-5, atol=1e-6)
