"""GridSample and GridSampleGrad (planner/ops/grid_sample.py; F.grid_sample and F.affine_grid)
against PyTorch: every mode, padding and align_corners, 2-D and 3-D, on random images and grids
whose points fall inside and outside the image, forward and backward (to the image and to the
grid) on the reference interpreter and on the CPU executor (torch.compile(backend="planner"));
and a small spatial-transformer network trained through planner.torch.trainer against eager
PyTorch.

Tolerance: opinfo_cases.compare / torch_step.mismatches, 10x PyTorch's own float32 error
against float64 plus 16 ulps of the tensor's scale."""

from __future__ import annotations

import copy
import itertools

import numpy as np
import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from planner.ops import get_op  # noqa: E402
from tests.importers.opinfo_cases import check_call, compare  # noqa: E402
from tests.importers.torch_step import Step, mismatches, sgd_run  # noqa: E402

COMBOS = list(itertools.product(("bilinear", "nearest"), ("zeros", "border", "reflection"),
                                (False, True)))


def _inputs(seed: int, n=2, c=3, h=5, w=6, oh=4, ow=7):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, c, h, w, generator=g)
    # a third of the points outside [-1, 1], some far (reflected several times)
    grid = (torch.rand(n, oh, ow, 2, generator=g) * 2 - 1) * 1.6
    grid[0, 0, :3] = torch.tensor([[3.7, -2.9], [-4.2, 0.3], [0.1, 5.3]])
    return x, grid


def _inputs3d(seed: int):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(2, 2, 3, 4, 5, generator=g)
    grid = (torch.rand(2, 2, 3, 4, 3, generator=g) * 2 - 1) * 1.6
    grid[0, 0, 0, :2] = torch.tensor([[3.7, -2.9, 0.4], [-0.2, 0.3, 5.3]])
    return x, grid


@pytest.mark.parametrize("dims", [2, 3])
@pytest.mark.parametrize("mode,padding,align", COMBOS)
def test_reference_matches_torch_forward_and_backward(mode, padding, align, dims):
    x, grid = _inputs(1) if dims == 2 else _inputs3d(1)
    got = check_call(lambda x, g: F.grid_sample(x, g, mode=mode, padding_mode=padding,
                                                align_corners=align), x, grid)
    assert got == ("pass", ""), got


@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align", [False, True])
def test_reference_single_pixel_axes_and_affine_grids(padding, align):
    """An axis of one pixel (reflection with align_corners reflects at one point) and a grid
    from F.affine_grid of a parameter theta: its gradient flows through the grid."""
    x, grid = _inputs(2, h=1, w=4)
    assert check_call(lambda x, g: F.grid_sample(x, g, padding_mode=padding,
                                                 align_corners=align), x, grid) == ("pass", "")
    theta = torch.tensor([[[0.9, 0.3, 0.2], [-0.2, 1.3, -0.1]],
                          [[1.4, -0.4, 0.5], [0.3, 0.7, 0.6]]])
    x, _ = _inputs(3)
    got = check_call(lambda x, t: F.grid_sample(
        x, F.affine_grid(t, [2, 3, 4, 5], align_corners=align), padding_mode=padding,
        align_corners=align), x, theta)
    assert got == ("pass", ""), got


def test_shape_rule_refuses_in_one_line():
    from planner.ops import TensorType
    from planner.ops.base import OpError

    op = get_op("GridSample")
    a = op.normalize_attrs({"mode": "bicubic"})
    with pytest.raises(OpError, match="GridSample: mode 'bicubic' is not one of"):
        op.infer([TensorType((1, 2, 3, 3), "float32"), TensorType((1, 2, 2, 2), "float32")], a)
    with pytest.raises(OpError, match=r"grid \[2, 2, 2, 2\] must be \(N, OH, OW, 2\)"):
        op.infer([TensorType((1, 2, 3, 3), "float32"), TensorType((2, 2, 2, 2), "float32")],
                 op.normalize_attrs({}))


class Samplers(torch.nn.Module):
    """The image and the grid as parameters, sampled every way at once: one build (2-D or 3-D
    by the image's rank)."""

    def __init__(self, x, grid) -> None:
        super().__init__()
        self.x = torch.nn.Parameter(x.clone())
        self.grid = torch.nn.Parameter(grid.clone())

    def forward(self):
        return tuple(F.grid_sample(self.x, self.grid, mode=m, padding_mode=p, align_corners=a)
                     for m, p, a in COMBOS)


def _eager(module, cotangents, dtype):
    m = copy.deepcopy(module).to(dtype)
    outs = m()
    torch.autograd.backward(outs, [c.to(dtype) for c in cotangents])
    return ([o.detach().numpy() for o in outs],
            {k: p.grad.numpy() for k, p in m.named_parameters()})


@pytest.mark.parametrize("dims", [2, 3])
def test_cpu_executor_matches_torch_forward_and_backward(dims):
    x, grid = _inputs(4) if dims == 2 else _inputs3d(4)
    module = Samplers(x, grid)
    g = torch.Generator().manual_seed(5)
    shape = (*x.shape[:2], *grid.shape[1:-1])
    cotangents = [torch.randn(*shape, generator=g) for _ in COMBOS]
    (o32, g32), (o64, g64) = (_eager(module, cotangents, d) for d in (torch.float32,
                                                                     torch.float64))
    mine = copy.deepcopy(module)
    outs = torch.compile(mine, backend="planner", options={"fallback": False})()
    torch.autograd.backward(outs, cotangents)
    for k, combo in enumerate(COMBOS):
        assert not compare(f"{combo}", outs[k].detach().numpy(), o32[k], o64[k])
    for name, p in mine.named_parameters():
        assert not compare(name, p.grad.numpy(), g32[name], g64[name])


class SpatialTransformer(torch.nn.Module):
    """MNIST-style STN, shrunk: a localisation net predicts theta (initialised near the
    identity), affine_grid + grid_sample warp the image, a small classifier reads it."""

    def __init__(self, padding: str) -> None:
        super().__init__()
        self.padding = padding
        self.loc = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3), torch.nn.MaxPool2d(2),
                                       torch.nn.ReLU(), torch.nn.Flatten(),
                                       torch.nn.Linear(4 * 3 * 3, 6))
        with torch.no_grad():
            self.loc[-1].weight.mul_(0.1)
            self.loc[-1].bias.copy_(torch.tensor([1.0, 0.1, 0.05, -0.1, 0.9, -0.05]))
        self.head = torch.nn.Sequential(torch.nn.Conv2d(1, 3, 3), torch.nn.ReLU(),
                                        torch.nn.Flatten(), torch.nn.Linear(3 * 6 * 6, 4))

    def forward(self, x):
        theta = self.loc(x).view(-1, 2, 3)
        grid = F.affine_grid(theta, list(x.shape), align_corners=False)
        return self.head(F.grid_sample(x, grid, padding_mode=self.padding,
                                       align_corners=False))



@pytest.mark.parametrize("padding", ["zeros", "reflection"])
def test_spatial_transformer_trains_as_pytorch(padding, tmp_path):
    from planner.torch import trainer

    torch.manual_seed(0)
    model = SpatialTransformer(padding)
    g = torch.Generator().manual_seed(1)
    batches = [(torch.randn(4, 1, 8, 8, generator=g), torch.randint(0, 4, (4,), generator=g))
               for _ in range(4)]
    lr = 0.05
    t = trainer(copy.deepcopy(model), (batches[0][0],), loss=F.cross_entropy,
                labels=batches[0][1], optimizer="sgd", lr=lr, out_dir=tmp_path)
    for x, y in batches:
        value = t.step(x, y)
    ours = Step(value, {k: np.asarray(v) for k, v in t.params().items()})
    f32 = sgd_run(model, batches, torch.float32, lr)
    f64 = sgd_run(model, batches, torch.float64, lr)
    assert not mismatches(ours, f32, f64, set(f64.state))
    # the warp trained: theta's layer moved
    assert not np.allclose(ours.state["loc.4.bias"], model.loc[-1].bias.detach().numpy())
