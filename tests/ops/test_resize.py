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


def _each_poisoned(shape):
    """A batch of normal (1, H, W) images, one per position k and case: NaN, +inf or -inf at k,
    or +inf at k beside -inf at k + 1 (inf - inf)."""
    h, w = shape
    n = h * w
    base = np.random.default_rng(3).standard_normal((4 * n, 1, h, w)).astype(np.float32)
    flat = base.reshape(4, n, n)
    for k in range(n):
        flat[0, k, k], flat[1, k, k], flat[2, k, k] = np.nan, np.inf, -np.inf
        flat[3, k, k], flat[3, k, (k + 1) % n] = np.inf, -np.inf
    return base


def _same_values(ours, want):
    """NaN exactly where `want` has NaN, the same infinities, finite values to a few ulps."""
    assert ours.shape == want.shape
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(ours), nan), np.argwhere(np.isnan(ours) != nan)[:4].tolist()
    assert np.array_equal(ours[np.isinf(want)], want[np.isinf(want)])
    finite = np.isfinite(want)
    np.testing.assert_allclose(ours[finite], want[finite], rtol=1e-5, atol=1e-6)


# (input H, W; output H, W or the scale factor): up, down, both, an axis unresized, to a length
# of 1, and lengths where PyTorch's float32 coordinate is not the exact one (3 -> 19, 14 -> 18,
# 7 -> 29: the exact coordinate is an integer its float32 one falls short of)
RESAMPLES = [((4, 5), (8, 10)), ((6, 9), (4, 5)), ((4, 5), (7, 3)), ((4, 5), (4, 9)),
             ((3, 5), (1, 2)), ((3, 14), (19, 18)), ((7, 14), (29, 12)), ((4, 5), 1.7)]


# (an align_corners scale is not one: PyTorch ignores it, and the importer drops it)
NONFINITE_CASES = [(attrs, theirs, shape, out) for attrs, theirs in MODES
                   for shape, out in RESAMPLES
                   if not (isinstance(out, float) and theirs.get("align_corners"))]


@pytest.mark.parametrize("attrs,theirs,shape,out", NONFINITE_CASES, ids=[
    f"{t['mode']}{'-corners' if t.get('align_corners') else ''}-{s}-{o}"
    for _, t, s, o in NONFINITE_CASES])
def test_nan_and_infinities_go_where_pytorch_puts_them(attrs, theirs, shape, out):
    # Nearest reads one tap (an infinity stays one); linear multiplies every tap by its weight,
    # zero included (inf * 0 = NaN), forward and backward: PyTorch's F.interpolate.
    if isinstance(out, float):
        size = tuple(int(d * out) for d in shape)
        a, kw = {**attrs, "sizes": list(size), "scales": [out, out]}, {"scale_factor": out}
    else:
        size = out
        a, kw = {**attrs, "sizes": list(size)}, {"size": size}
    x = _each_poisoned(shape)
    with np.errstate(all="ignore"):
        ours = reference("Resize", [x], a)[0]
    _same_values(ours, F.interpolate(torch.tensor(x), **kw, **theirs).numpy())
    dy = _each_poisoned(size)
    tx = torch.zeros((len(dy), 1) + shape, requires_grad=True)
    F.interpolate(tx, **kw, **theirs).backward(torch.tensor(dy))
    with np.errstate(all="ignore"):
        dx = reference("ResizeGrad", [dy], {**a, "input_sizes": list(shape)})[0]
    _same_values(dx, tx.grad.numpy())


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
