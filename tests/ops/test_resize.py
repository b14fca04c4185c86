"""Resize: the reference against PyTorch's F.interpolate (nearest, bilinear with and without
align_corners, up and down), the gradient rule against finite differences and torch
autograd, the attribute errors, and nn.Upsample / F.interpolate exports imported and run."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from planner.ops import OpError, TensorType, get_op
from tests.ops.opcheck import apply_rule, check_gradient, reference, rel_error

torch = pytest.importorskip("torch")
F = torch.nn.functional

# (planner attrs, F.interpolate keywords)
MODES = [
    ({"mode": "nearest", "coordinate_mode": "asymmetric", "nearest_mode": "floor"},
     {"mode": "nearest"}),
    ({"mode": "linear", "coordinate_mode": "half_pixel"},
     {"mode": "bilinear", "align_corners": False}),
    ({"mode": "linear", "coordinate_mode": "align_corners"},
     {"mode": "bilinear", "align_corners": True}),
]
SIZES = [(10, 14), (8, 11), (3, 4), (1, 1), (5, 7)]


def _x(dtype, seed=0, shape=(2, 3, 5, 7)):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("attrs,theirs", MODES)
@pytest.mark.parametrize("size", SIZES)
def test_reference_matches_f_interpolate(attrs, theirs, size):
    x = _x(np.float32)
    ours = reference("Resize", [x], {**attrs, "sizes": list(size)})[0]
    want = F.interpolate(torch.tensor(x), size=size, **theirs).numpy()
    assert ours.dtype == np.float32 and ours.shape == want.shape
    # Two float32 lerps of values of order 1: a few ulps.
    np.testing.assert_allclose(ours, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("attrs,theirs", MODES)
@pytest.mark.parametrize("size", [(10, 14), (3, 4)])
def test_gradient_matches_finite_differences_and_torch(attrs, theirs, size):
    x = _x(np.float64, seed=1)
    a = {**attrs, "sizes": list(size)}
    grads, dys = check_gradient("Resize", [x], a)
    tx = torch.tensor(x, requires_grad=True)
    (F.interpolate(tx, size=size, **theirs) * torch.tensor(dys[0])).sum().backward()
    assert rel_error(grads[0], tx.grad.numpy()) < 1e-12
    assert apply_rule("Resize", [x], a)[2] == ["ResizeGrad"]


@pytest.mark.parametrize("coordinate_mode", ["half_pixel", "pytorch_half_pixel",
                                             "align_corners", "asymmetric"])
@pytest.mark.parametrize("nearest_mode", ["round_prefer_floor", "round_prefer_ceil", "floor",
                                          "ceil"])
def test_every_nearest_and_coordinate_mode_has_a_consistent_gradient(coordinate_mode,
                                                                     nearest_mode):
    a = {"sizes": [7, 3], "coordinate_mode": coordinate_mode, "nearest_mode": nearest_mode}
    check_gradient("Resize", [_x(np.float64, 2, (1, 2, 4, 5))], a)
    check_gradient("Resize", [_x(np.float64, 2, (1, 2, 4, 5))], {**a, "mode": "linear"})


def test_attribute_errors_name_the_field():
    op = get_op("Resize")
    x = TensorType((1, 2, 4, 4))
    for attrs, message in [({"sizes": [4, 4], "mode": "cubic"}, "mode 'cubic' is not one of"),
                           ({"sizes": [4]}, r"sizes must be 2 lengths >= 1 \(H, W\), got \[4\]"),
                           ({"sizes": [4, 4], "scales": [2.0, 0.0]}, "scales must be 2 numbers"),
                           ({"sizes": [4, 4], "coordinate_mode": "tf_crop_and_resize"},
                            "coordinate_mode 'tf_crop_and_resize' is not one of")]:
        with pytest.raises(OpError, match=message):
            op.infer([x], op.normalize_attrs(attrs))
    with pytest.raises(OpError, match="must have rank 4"):
        op.infer([TensorType((2, 4, 4))], op.normalize_attrs({"sizes": [4, 4]}))


class Upsampler(torch.nn.Module):
    def __init__(self, **kw) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(2, 3, 3, padding=1)
        self.up = torch.nn.Upsample(**kw)

    def forward(self, x):
        return self.up(self.conv(x))


@pytest.mark.parametrize("kw", [
    {"scale_factor": 2, "mode": "nearest"},
    {"scale_factor": 2, "mode": "bilinear", "align_corners": False},
    {"scale_factor": 2, "mode": "bilinear", "align_corners": True},
    {"size": (5, 9), "mode": "bilinear", "align_corners": False},
    {"size": (3, 4), "mode": "nearest"},
])
def test_upsample_exports_import_and_match_pytorch(kw):
    import io

    from planner.graph.interpret import run
    from planner.importers import import_onnx

    torch.manual_seed(0)
    model = Upsampler(**kw).eval()
    x = _x(np.float32, shape=(2, 2, 4, 6))
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (torch.tensor(x),), f, dynamo=False, opset_version=17)
    imported = import_onnx(f.getvalue())
    assert [n.op for n in imported.graph.nodes].count("Resize") == 1
    (out,) = imported.graph.outputs
    ours = run(imported.graph, {imported.graph.by_role("input")[0].name: x},
               imported.params(), keep="outputs")[out]
    with torch.no_grad():
        want = model(torch.tensor(x)).numpy()
    np.testing.assert_allclose(ours, want, rtol=1e-4, atol=1e-5)
