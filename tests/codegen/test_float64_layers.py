"""float64 convolutions, normalisations and softmaxes on the CPU executor (kernels/conv_f64.cpp,
norms_f64.cpp, group_norm.cpp): each layer through torch.compile(backend="planner") with the
fallback off (a refusal raises) against torch in float64, its output, every gradient and
BatchNorm's running statistics; and a physics-informed-style model with a convolution and a
LayerNorm trained through planner.torch.trainer, step by step against torch float64.

Tolerances, from float64 rounding (u = 2^-53, 1.1e-16): each element is a sum of K products
(K the longest reduction behind it: C/groups kh kw taps forward, the batch's positions in a
filter gradient, a normalised row or channel), which both sides add in their own orders; each
sum is within K u of the sum of its terms' magnitudes (Higham), here within a few times the
output's largest |value| (unit-scale data, the cancellations of a normalisation's gradient
included). So each output is held to 64 K u of its largest |value|: a wrong tap, a missed
image or a wrong variance shows at 1e-3 or more.

Five Adam steps (lr 2^-10, a float32 value: docs/executor.md, "dtypes") of the trained model:
each step's gradients carry ~K u (K <= 64 here), Adam's m / sqrt(v) keeps their relative error,
so parameters agree to ~1e-14 relative after five steps; 1e-11 leaves margin.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch")
nn, F = torch.nn, torch.nn.functional

U = 2.0 ** -53
LR = 2.0 ** -10


class Layer(nn.Module):
    """One layer, its input a leaf with a gradient (the data gradient is checked too)."""

    def __init__(self, layer: nn.Module, after=None):
        super().__init__()
        self.layer, self.after = layer, after

    def forward(self, x):
        y = self.layer(x)
        return self.after(y) if self.after else y


def _seeded(seed: int) -> None:
    torch.manual_seed(seed)


# name -> (make the layer, input shape, K: the longest reduction behind an output)
CASES = {
    "conv2d_groups_stride_dilation_pads": (
        lambda: nn.Conv2d(4, 6, 3, stride=(2, 1), padding=(1, 2), dilation=(1, 2), groups=2),
        (2, 4, 7, 9), 2 * 4 * 9),
    "conv2d_5x5_bias": (lambda: nn.Conv2d(3, 5, 5, padding=2), (3, 3, 8, 8), 3 * 64),
    "conv1d_stride_dilation": (lambda: nn.Conv1d(3, 4, 3, stride=2, padding=2, dilation=2),
                               (2, 3, 17), 2 * 9),
    "conv3d": (lambda: nn.Conv3d(2, 3, (2, 3, 3), stride=(1, 2, 1), padding=1),
               (2, 2, 4, 5, 5), 2 * 5 * 3 * 5),
    "conv_transpose2d": (lambda: nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1,
                                                    output_padding=1, groups=2),
                         (2, 4, 5, 4), 2 * 20),
    "layer_norm_two_axes": (lambda: nn.LayerNorm((5, 6)), (3, 4, 5, 6), 30 * 12),
    "batch_norm_training": (lambda: nn.BatchNorm2d(3), (4, 3, 5, 5), 100),
    "batch_norm_eval": (lambda: nn.BatchNorm2d(3).eval(), (4, 3, 5, 5), 100),
    "batch_norm1d": (lambda: nn.BatchNorm1d(6, momentum=0.3), (8, 6), 8),
    "group_norm": (lambda: nn.GroupNorm(2, 6), (3, 6, 4, 4), 48 * 3),
    "softmax": (lambda: nn.Softmax(dim=1), (3, 7, 5), 7),
    "log_softmax": (lambda: nn.LogSoftmax(dim=-1), (4, 9), 9),
}


def _trained_stats(layer: nn.Module) -> None:
    """BatchNorm in eval mode with running statistics of its own (not 0 and 1)."""
    for m in layer.modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2.0)
        if isinstance(m, (nn.modules.batchnorm._BatchNorm, nn.LayerNorm, nn.GroupNorm)):
            with torch.no_grad():
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.5, 0.5)


def _run(call, model, x, cotangent):
    """call(x) (model itself or its compiled form), and the gradients of x and of model's
    parameters of the sum of the output times the cotangent."""
    x = x.clone().requires_grad_(True)
    out = call(x)
    (out * cotangent).sum().backward()
    grads = {"x": x.grad, **{k: p.grad for k, p in model.named_parameters()}}
    return out.detach(), grads


def _held(name: str, got: torch.Tensor, want: torch.Tensor, k: int) -> None:
    assert got.dtype == torch.float64 and got.shape == want.shape, name
    scale = max(float(want.abs().max()), 1e-300)
    err = float((got - want).abs().max()) / scale
    assert err <= 64 * k * U, f"{name}: rel. error {err:.2e} > {64 * k * U:.2e}"


@pytest.mark.parametrize("name", sorted(CASES))
def test_float64_layer_matches_torch_float64(name):
    from tests.helpers.compile_cases import compiled

    make, shape, k = CASES[name]
    _seeded(1)
    layer = Layer(make()).double()
    _trained_stats(layer)
    ref = copy.deepcopy(layer)
    x = torch.randn(*shape, dtype=torch.float64)
    with torch.no_grad():  # (on a copy: a training BatchNorm's call updates its statistics)
        cotangent = torch.randn_like(copy.deepcopy(ref)(x))
    got_out, got_grads = _run(compiled(layer, fallback=False), layer, x, cotangent)
    want_out, want_grads = _run(ref, ref, x, cotangent)
    _held("output", got_out, want_out, k)
    for key, want in want_grads.items():
        _held(f"gradient of {key}", got_grads[key], want, k)
    for (key, got), want in zip(layer.state_dict().items(), ref.state_dict().values(),
                                strict=True):
        if got.is_floating_point():
            _held(key, got, want, k)
        else:
            assert torch.equal(got, want), key


class ConvPinn(nn.Module):
    """A physics-informed network over sampled points of (x, t): a Conv1d over neighbouring
    points, a LayerNorm of each point's features, then a Tanh MLP head giving u."""

    def __init__(self, width: int = 16):
        super().__init__()
        self.conv = nn.Conv1d(2, width, 3, padding=1)
        self.norm = nn.LayerNorm(width)
        self.head = nn.Sequential(nn.Linear(width, width), nn.Tanh(), nn.Linear(width, 1))

    def forward(self, xt):  # (B, 2, L) -> (B, L)
        h = torch.tanh(self.conv(xt)).transpose(1, 2)
        return self.head(self.norm(h)).squeeze(-1)


def _pinn_data(steps: int = 5):
    g = torch.Generator().manual_seed(3)
    xt = torch.rand(8, 2, 32, generator=g, dtype=torch.float64) * 2 - 1
    u = torch.sin(torch.pi * xt[:, 0]) * torch.exp(-xt[:, 1])
    return [(xt, u)] * steps


def test_conv_layer_norm_pinn_trains_through_the_trainer_as_torch_float64(tmp_path):
    from planner.torch import trainer

    torch.manual_seed(0)
    model = ConvPinn().double()
    data = _pinn_data()
    t = trainer(copy.deepcopy(model), (data[0][0],), loss=F.mse_loss, labels=data[0][1],
                optimizer="adam", lr=LR, out_dir=tmp_path, costs="analytical")
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    losses = []
    for step, (xt, u) in enumerate(data):
        ours = float(t.step(xt, u))
        loss = F.mse_loss(model(xt), u)
        opt.zero_grad()
        loss.backward()
        opt.step()
        assert ours == pytest.approx(loss.item(), rel=1e-11), f"step {step}"
        losses.append(ours)
    assert losses[-1] < losses[0]  # it trained
    got = t.params()
    for key, want in model.named_parameters():
        w = want.detach().numpy()
        err = float(np.abs(np.asarray(got[key]) - w).max()) / float(np.abs(w).max())
        assert err <= 1e-11, f"{key}: rel. error {err:.2e}"


# (op, input shapes, attrs): each large enough that its team has work (kGrain: 32768 elements
# or multiply-adds) and, for the convolutions, several pieces (the forward's 16 x 16 outputs in
# 4 row parts, the filter gradient's 72 taps in 16 parts).
CONV = {"pads": [1, 1, 1, 1], "strides": [1, 1], "dilations": [1, 1], "groups": 1}
TEAM_CASES = [
    ("Conv2D", ((4, 8, 16, 16), (16, 8, 3, 3)), CONV),
    ("Conv2DBackpropInput", ((4, 16, 16, 16), (16, 8, 3, 3)),
     {**CONV, "input_shape": [4, 8, 16, 16]}),
    ("Conv2DBackpropFilter", ((4, 8, 16, 16), (4, 16, 16, 16)),
     {**CONV, "filter_shape": [16, 8, 3, 3]}),
    ("ConvTranspose2D", ((4, 16, 8, 8), (16, 4, 4, 4)),
     {**CONV, "strides": [2, 2], "groups": 2}),
    ("LayerNormGrad", ((64, 600), (64, 600), (600,), (64, 1), (64, 1)), {"epsilon": 1e-5}),
    ("BatchNorm", ((16, 8, 16, 16), (8,), (8,), (8,), (8,)), {}),
    ("Softmax", ((64, 600),), {"axis": -1}),
]


def test_float64_kernels_give_the_same_bits_on_one_thread_and_two(tmp_path):
    """The pieces of each float64 kernel are fixed by its sizes, never by its team (the
    kernels' determinism rule, as the float64 MatMul's): one thread and two give the same bits,
    each convolution in the scratch the plan reserved (planner/ops/conv_scratch.py's float64
    rule: nothing unplanned), and the convolutions are the reference's sums."""
    from planner.costs.signature import OpSignature
    from planner.ops import get_op
    from tests.codegen.helpers import ops_on_threads

    sigs = [OpSignature(op=op, shapes=shapes, dtypes=("float64",) * len(shapes), attrs=attrs)
            for op, shapes, attrs in TEAM_CASES]
    feeds, got, rows = ops_on_threads(sigs, tmp_path, seed=7)
    for k, sig in enumerate(sigs):
        assert np.array_equal(got[1][k].view(np.uint64), got[2][k].view(np.uint64)), sig.op
        assert got[1][k].dtype == np.float64
        for t in (1, 2):
            assert rows[t][k]["unplanned_scratch_bytes"] == 0, sig.op
        if sig.op.startswith("Conv"):
            assert "dgemm" in rows[2][k]["impl"], rows[2][k]
            want = get_op(sig.op).reference([feeds[k][f"in{i}"] for i in range(2)],
                                            get_op(sig.op).normalize_attrs(sig.attrs))[0]
            err = np.abs(got[2][k] - want).max() / np.abs(want).max()
            assert err <= 1e-12, f"{sig.op}: rel. error {err:.2e}"
