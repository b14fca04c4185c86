"""float64 pools and losses on the CPU executor (kernels/pool_f64.cpp, pool_nd.cpp, loss.cpp,
nll_loss.cpp, eltwise.cpp's Softplus): each pooling layer and each loss through
torch.compile(backend="planner") with the fallback off (a refusal raises) against torch in
float64, the output and every gradient; each kernel's bits on one thread and two, and its
numpy reference in float64 (test_float64.py holds the op cases' variants to it too); and a
small float64 CNN (convolutions, a max pool, an average pool, cross-entropy) trained through
planner.torch.trainer and through the backend, step by step against torch float64.

Tolerances, from float64 rounding (u = 2^-53, 1.1e-16):
  - A max pool's output is an element of x, and its gradient adds each window's dy at the
    window's first maximum, the outputs in order, as torch's CPU kernel does
    (MaxPoolKernel.cpp): torch's bits. A windowed average sums its taps in row-major order in
    double and divides once by the same divisor, its gradient adds dy / divisor over each
    window in output order, as AvgPoolKernel.cpp: torch's bits too. Those cases are held to
    the bit. The others (an adaptive average, which torch divides by each axis's count in
    turn; divisor_override, a mean times taps / divisor here) are held, as
    test_float64_layers.py's layers, to 64 K u of the largest |value|, K the longest sum
    behind an element (a window's taps, or the windows overlapping an input).
  - A loss sums over N x C logits (a log-sum-exp per position, then the positions) in an order
    other than torch's vectorised one: each sum within K u of its terms' magnitudes (Higham),
    the terms a few times the loss here; held to 64 K u of the largest |value|, K = N C.
  - The CNN: five Adam steps at lr 2^-10 (a float32 value: docs/executor.md, "dtypes"). Each
    step's gradients carry ~K u, K <= 1024 (the filter gradient's sums over the batch's
    positions), Adam's m / sqrt(v) keeps their relative error and moves each parameter by
    ~lr, so losses and parameters agree to ~1e-13 relative after five steps; 1e-11 leaves
    margin, and a wrong window, class or count shows at 1e-3 or more.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch")
nn, F = torch.nn, torch.nn.functional

from tests.helpers.float64_params import assert_params_close  # noqa: E402

U = 2.0 ** -53
LR = 2.0 ** -10
EXACT = 0  # K of a case held to the bit


def _g(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# name -> (make the layer, input shape, K: 0 for torch's bits, else the longest sum)
POOLS = {
    "max_pool2d": (lambda: nn.MaxPool2d(2), (2, 3, 8, 8), EXACT),
    "max_pool2d_pad_ceil_dilation": (
        lambda: nn.MaxPool2d(3, 2, padding=1, dilation=2, ceil_mode=True), (2, 3, 11, 10), EXACT),
    "max_pool1d": (lambda: nn.MaxPool1d(3, 2, padding=1), (2, 3, 17), EXACT),
    "max_pool3d": (lambda: nn.MaxPool3d((2, 3, 3), stride=(1, 2, 2), padding=(0, 1, 1)),
                   (2, 2, 4, 7, 7), EXACT),
    "adaptive_max_pool2d": (lambda: nn.AdaptiveMaxPool2d((3, 4)), (2, 3, 8, 9), EXACT),
    "avg_pool2d": (lambda: nn.AvgPool2d(3, 2, padding=1), (2, 3, 9, 8), EXACT),
    "avg_pool2d_exclude_pad_ceil": (
        lambda: nn.AvgPool2d(3, 2, padding=1, ceil_mode=True, count_include_pad=False),
        (2, 3, 10, 9), EXACT),
    # the last window overhangs the padding: AvgPoolND (rules_pool.py)
    "avg_pool2d_include_pad_ceil": (lambda: nn.AvgPool2d(3, 2, padding=1, ceil_mode=True),
                                    (2, 3, 10, 10), EXACT),
    "avg_pool1d": (lambda: nn.AvgPool1d(4, 3, padding=2), (2, 3, 20), EXACT),
    "avg_pool3d": (lambda: nn.AvgPool3d(2, stride=(1, 2, 2)), (2, 2, 4, 6, 6), EXACT),
    "avg_pool2d_divisor": (lambda: nn.AvgPool2d(3, 2, padding=1, divisor_override=4),
                           (2, 3, 9, 9), 9),
    "adaptive_avg_pool2d": (lambda: nn.AdaptiveAvgPool2d((3, 5)), (2, 3, 8, 11), 12),
}


class CausalAttention(nn.Module):
    """Self-attention of x over its earlier positions (CausalMask, then Softmax's rows)."""

    def forward(self, x):
        return F.scaled_dot_product_attention(x, x, x, is_causal=True)


# Layers built on the pools and the mask: LocalResponseNorm's window sum is an AvgPoolND.
# K: LRN's chain (a 3-tap mean, a power, a quotient, and their gradients) ~16 roundings;
# attention's longest sum, a row of 6 scores times 4 features.
BUILT_ON = {
    "local_response_norm": (lambda: nn.LocalResponseNorm(3), (2, 6, 5, 5), 16),
    "causal_attention": (CausalAttention, (2, 3, 6, 4), 24),
}


class Loss(nn.Module):
    """A loss of x against fixed targets (and class weights), as a model's last line."""

    def __init__(self, fn, **targets):
        super().__init__()
        self.fn = fn
        for k, v in targets.items():
            self.register_buffer(k, v)

    def forward(self, x):
        return self.fn(self, x)


def _losses():
    n, c = 6, 5
    y = torch.randint(0, c, (n,), generator=_g(5))
    y_img = torch.randint(0, c, (2, 3, 4), generator=_g(6))
    w = torch.rand(c, generator=_g(7), dtype=torch.float64) + 0.5
    t = torch.rand(n, c, generator=_g(8), dtype=torch.float64)
    both = {"y": y, "w": w, "t": t}
    flat, k = (n, c), n * c
    return {
        "cross_entropy": (Loss(lambda m, x: F.cross_entropy(x, m.y), y=y), flat, k),
        "cross_entropy_smoothing_ignore": (
            Loss(lambda m, x: F.cross_entropy(x, m.y, ignore_index=2, label_smoothing=0.1),
                 y=y), flat, k),
        "cross_entropy_images": (Loss(lambda m, x: F.cross_entropy(x, m.y), y=y_img),
                                 (2, c, 3, 4), 24 * c),
        "cross_entropy_weight_sum": (
            Loss(lambda m, x: F.cross_entropy(x, m.y, weight=m.w, reduction="sum",
                                              label_smoothing=0.2), y=y, w=w), flat, k),
        "nll_loss_weight_ignore": (
            Loss(lambda m, x: F.nll_loss(F.log_softmax(x, 1), m.y, weight=m.w,
                                         ignore_index=1), y=y, w=w), flat, k),
        "cross_entropy_probabilities": (
            Loss(lambda m, x: F.cross_entropy(x, m.t.softmax(1)), t=t), flat, k),
        "bce_with_logits": (
            Loss(lambda m, x: F.binary_cross_entropy_with_logits(x, m.t), t=t), flat, k),
        "bce_with_logits_weights": (
            Loss(lambda m, x: F.binary_cross_entropy_with_logits(x, m.t, weight=m.t,
                                                                 pos_weight=m.w), **both),
            flat, k),
        "bce": (Loss(lambda m, x: F.binary_cross_entropy(torch.sigmoid(x), m.t), t=t), flat, k),
        "smooth_l1": (Loss(lambda m, x: F.smooth_l1_loss(x, m.t, beta=0.5), t=t), flat, k),
        "huber": (Loss(lambda m, x: F.huber_loss(x, m.t, delta=0.7), t=t), flat, k),
        "l1": (Loss(lambda m, x: F.l1_loss(x, m.t), t=t), flat, k),
    }


LOSSES = _losses()


def _run(call, model, x, cotangent):
    """call(x) and the gradients of x and of model's parameters of sum(output * cotangent)."""
    x = x.clone().requires_grad_(True)
    out = call(x)
    (out * cotangent).sum().backward()
    return out.detach(), {"x": x.grad, **{k: p.grad for k, p in model.named_parameters()}}


def _held(name: str, got: torch.Tensor, want: torch.Tensor, k: int) -> None:
    assert got.dtype == torch.float64 and got.shape == want.shape, name
    if k == EXACT:
        assert torch.equal(got, want), f"{name}: not torch's bits " \
            f"(|diff| {float((got - want).abs().max()):.2e})"
        return
    scale = max(float(want.abs().max()), 1e-300)
    err = float((got - want).abs().max()) / scale
    assert err <= 64 * k * U, f"{name}: rel. error {err:.2e} > {64 * k * U:.2e}"


def _against_torch(model: nn.Module, shape: tuple[int, ...], k: int) -> None:
    from tests.helpers.compile_cases import compiled

    ref = copy.deepcopy(model)
    x = torch.randn(*shape, generator=_g(1), dtype=torch.float64)
    with torch.no_grad():
        cotangent = torch.randn(ref(x).shape, generator=_g(2), dtype=torch.float64)
    got_out, got_grads = _run(compiled(model, fallback=False), model, x, cotangent)
    want_out, want_grads = _run(ref, ref, x, cotangent)
    _held("output", got_out, want_out, k)
    for key, want in want_grads.items():
        _held(f"gradient of {key}", got_grads[key], want, k)


@pytest.mark.parametrize("name", sorted(POOLS))
def test_float64_pool_matches_torch_float64(name):
    make, shape, k = POOLS[name]
    _against_torch(make().double(), shape, k)


@pytest.mark.parametrize("name", sorted(BUILT_ON))
def test_float64_layer_built_on_them_matches_torch_float64(name):
    make, shape, k = BUILT_ON[name]
    _against_torch(make().double(), shape, k)


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_float64_loss_matches_torch_float64(name):
    model, shape, k = LOSSES[name]
    _against_torch(model, shape, k)


class SmallCnn(nn.Module):
    """Conv-ReLU-MaxPool, Conv-ReLU-AvgPool, a linear head over ten classes."""

    def __init__(self, width: int = 4):
        super().__init__()
        self.conv1 = nn.Conv2d(1, width, 3, padding=1)
        self.conv2 = nn.Conv2d(width, 2 * width, 3, padding=1)
        self.head = nn.Linear(2 * width * 4, 10)

    def forward(self, x):  # (B, 1, 8, 8) -> (B, 10)
        h = F.max_pool2d(torch.relu(self.conv1(x)), 2)
        h = F.avg_pool2d(torch.relu(self.conv2(h)), 2)
        return self.head(h.flatten(1))


def _cnn_data(steps: int = 5, batch: int = 16):
    g = _g(3)
    x = torch.randn(batch, 1, 8, 8, generator=g, dtype=torch.float64)
    y = torch.randint(0, 10, (batch,), generator=g)
    return [(x, y)] * steps


def _torch_steps(model, data, call=None):
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    losses = []
    call = model if call is None else call  # (a compiled module has no truth value)
    for x, y in data:
        loss = F.cross_entropy(call(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def test_small_cnn_trains_through_the_trainer_as_torch_float64(tmp_path):
    from planner.torch import trainer

    torch.manual_seed(0)
    model = SmallCnn().double()
    data = _cnn_data()
    t = trainer(copy.deepcopy(model), (data[0][0],), loss=F.cross_entropy, labels=data[0][1],
                optimizer="adam", lr=LR, out_dir=tmp_path, costs="analytical")
    ours = [float(t.step(x, y)) for x, y in data]
    want = _torch_steps(model, data)
    assert ours == pytest.approx(want, rel=1e-11)
    assert want[-1] < want[0]  # it trained
    assert_params_close(t.params(), dict(model.named_parameters()), 1e-11)


def test_small_cnn_trains_through_the_backend_as_torch_float64():
    from tests.helpers.compile_cases import compiled

    torch.manual_seed(0)
    model = SmallCnn().double()
    ref = copy.deepcopy(model)
    data = _cnn_data()
    got = _torch_steps(model, data, call=compiled(model, fallback=False))
    want = _torch_steps(ref, data)
    assert got == pytest.approx(want, rel=1e-11)
    assert_params_close(dict(model.named_parameters()), dict(ref.named_parameters()),
                        1e-11)


# (op, input shapes, attrs): each large enough that its team splits it (kGrain: 32768
# outputs, planes' elements or logits).
POOL2 = {"kernel": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}
TEAM_CASES = [
    ("MaxPool", ((8, 16, 32, 32),), {**POOL2, "dilations": [1, 1]}),
    ("MaxPoolGrad", ((8, 16, 16, 16), (8, 16, 32, 32)), {**POOL2, "dilations": [1, 1]}),
    ("AvgPool", ((8, 16, 32, 32),), {**POOL2, "ceil_mode": True, "count_include_pad": False}),
    ("AvgPoolGrad", ((8, 16, 16, 16),), {**POOL2, "count_include_pad": True,
                                         "input_shape": [8, 16, 32, 32]}),
    ("MaxPoolND", ((4, 8, 8, 16, 16),), {"kernel": [2, 3, 3], "strides": [2, 1, 1],
                                         "pads": [0, 1, 1]}),
    ("AvgPoolND", ((4, 8, 8, 16, 16),), {"output_size": [3, 5, 7]}),
    ("AvgPoolNDGrad", ((4, 8, 3, 5, 7),), {"output_size": [3, 5, 7],
                                           "input_shape": [4, 8, 8, 16, 16]}),
    ("SoftmaxCrossEntropy", ((256, 200), (256,)), {"axis": 1, "label_smoothing": 0.1}),
    ("SoftmaxCrossEntropyGrad", ((), (256, 200), (256,)), {"label_smoothing": 0.1}),
    ("NLLLoss", ((256, 200), (256,), (200,)), {"label_smoothing": 0.1, "ignore_index": 3}),
    ("NLLLossGrad", ((), (256, 200), (256,), (200,)), {"label_smoothing": 0.1}),
    ("SigmoidBCE", ((256, 200), (256, 200)), {}),
    ("SigmoidBCEGrad", ((), (256, 200), (256, 200)), {}),
]


def _team_dtypes(op: str, shapes) -> tuple[str, ...]:
    """float64 values, int64 labels (a loss's input after the logits)."""
    labels = 2 if op.endswith("Grad") else 1
    return tuple("int64" if op.startswith(("SoftmaxCross", "NLL")) and i == labels
                 else "float64" for i in range(len(shapes)))


def test_float64_pools_and_losses_give_the_same_bits_on_one_thread_and_two(tmp_path):
    """Nothing in these kernels is summed across threads (a window or a plane is one thread's,
    a loss's positions are summed in parts fixed by the sizes): one thread and two give the
    same bits, and the reference's values within 1e-12 (a sum of up to 200 terms)."""
    from planner.costs.signature import OpSignature
    from planner.ops import get_op
    from tests.codegen.helpers import ops_on_threads

    sigs = [OpSignature(op=op, shapes=shapes, dtypes=_team_dtypes(op, shapes), attrs=attrs)
            for op, shapes, attrs in TEAM_CASES]
    feeds, got, rows = ops_on_threads(sigs, tmp_path, seed=7)
    for k, sig in enumerate(sigs):
        assert got[1][k].dtype == np.float64, sig.op
        assert np.array_equal(got[1][k].view(np.uint64), got[2][k].view(np.uint64)), sig.op
        opdef = get_op(sig.op)
        xs = [feeds[k][f"in{i}"] for i in range(len(sig.shapes))]
        want = opdef.reference(xs, opdef.normalize_attrs(sig.attrs))[0]
        err = np.abs(got[2][k] - want).max() / np.abs(want).max()
        assert err <= 1e-12, f"{sig.op}: rel. error {err:.2e}"
