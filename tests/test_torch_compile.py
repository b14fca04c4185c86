"""torch.compile(model, backend="planner") against the same loop run eagerly.

Every case trains a copy of the module eagerly and one through the backend from the same
weights on the same batches, then holds the losses, gradients, parameters and buffers to
eager's. Tolerances: a float32 forward or gradient differs from eager's by the rounding of
sums in another order, a few ulps (2^-24) times the number of terms summed (here at most a few
hundred) of the largest value: 1e-5 of the largest |value| leaves room for that and is far
below any real error (a missing term, a wrong input, a stale parameter all show at percents).
Plans are priced by the analytical model (no measuring) to keep the tests to seconds of
planning; each planned call still builds its executors.
"""

from __future__ import annotations

import copy
import warnings

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

import planner.torch  # noqa: E402,F401  (registers the backend)
from planner.torch.context import TorchImportError  # noqa: E402
from planner.torch.piece import PlannerFallback  # noqa: E402

OPTIONS = {"costs": "analytical"}
RTOL = 1e-5


def compiled(model, **options):
    torch._dynamo.reset()
    return torch.compile(model, backend="planner", options={**OPTIONS, **options})


def assert_close(got, want, what: str, rtol: float = RTOL) -> None:
    scale = max(float(want.abs().max()), 1e-3) if want.is_floating_point() else 0
    if not want.is_floating_point():
        assert torch.equal(got, want), what
        return
    err = float((got.double() - want.double()).abs().max())
    assert err <= rtol * scale, f"{what}: |diff| {err:.3g} > {rtol} x {scale:.3g}"


def assert_same_state(model, ref, rtol: float = RTOL) -> None:
    got, want = model.state_dict(), ref.state_dict()
    assert list(got) == list(want)
    for k in want:
        assert_close(got[k], want[k], k, rtol)


class ConvNet(nn.Module):
    """Conv-BN-ReLU twice, pooled, a head; a no_grad region and a frozen BatchNorm inside."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 6, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(6)
        self.conv2 = nn.Conv2d(6, 8, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(8)
        self.head = nn.Linear(8, 4)

    def forward(self, x):
        with torch.no_grad():  # a statistic of the input, no gradient through it
            scale = x.abs().mean() + 1.0
        h = F.relu(self.bn1(self.conv1(x / scale)))
        h = F.relu(self.bn2(self.conv2(h)))
        return self.head(h.mean((2, 3)))


def train(model, batches, optimizer, clip: float | None = None):
    losses = []
    for x, y in batches:
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        if clip is not None:
            nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        losses.append(float(loss))
    return losses


def batches(n: int, shape, classes: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(*shape, generator=g), torch.randint(0, classes, (shape[0],),
                                                             generator=g)) for _ in range(n)]


def test_trains_as_eager_with_frozen_params_eval_submodule_groups_and_buffers():
    torch.manual_seed(0)
    model = ConvNet()
    model.conv1.bias.requires_grad_(False)  # frozen: no gradient, never updated
    model.bn2.eval()  # an eval submodule: running statistics read, not updated
    ref = copy.deepcopy(model)

    def sgd(m):  # two parameter groups, momentum and weight decay in one
        return torch.optim.SGD([{"params": [m.head.weight, m.head.bias], "lr": 0.05},
                                {"params": [p for n, p in m.named_parameters()
                                            if not n.startswith("head")],
                                 "weight_decay": 1e-3}], lr=0.1, momentum=0.9)

    data = batches(3, (4, 3, 6, 6), 4)
    got = train(compiled(model), data, sgd(model))
    want = train(ref, data, sgd(ref))
    assert got == pytest.approx(want, rel=RTOL)
    assert_same_state(model, ref)
    assert model.bn1.num_batches_tracked.item() == 3 and model.bn2.num_batches_tracked == 0
    assert model.conv1.bias.grad is None


def test_gradients_of_inputs_and_several_outputs():
    """A graph's input that needs a gradient (a piece after a graph break gets its activation
    so), two outputs, one of them an integer that needs none."""
    torch.manual_seed(1)
    lin = nn.Linear(5, 3)

    def f(x):
        h = torch.tanh(lin(x))
        return h, h.argmax(-1), (h * h).sum()

    ref = copy.deepcopy(lin)  # eager runs on an equal copy
    x = torch.randn(4, 5, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_(True)
    torch._dynamo.reset()
    h, idx, s = torch.compile(f, backend="planner", options=OPTIONS)(x)
    h2 = torch.tanh(ref(x_ref))
    s2 = (h2 * h2).sum()
    (h.sum() * 2 + s).backward()
    (h2.sum() * 2 + s2).backward()
    assert not idx.requires_grad and torch.equal(idx, h2.argmax(-1))
    assert_close(h.detach(), h2.detach(), "h")
    assert_close(x.grad, x_ref.grad, "x.grad")
    assert_close(lin.weight.grad, ref.weight.grad, "weight.grad")
    assert_close(lin.bias.grad, ref.bias.grad, "bias.grad")


class Breaks(nn.Module):
    """A graph break (print) and an op the planner lacks (an FFT): three pieces, one eager."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.b = nn.Linear(8, 8)
        self.c = nn.Linear(8, 3)

    def forward(self, x):
        h = torch.relu(self.a(x))
        print("", end="")  # a graph break
        h = torch.fft.fft(self.b(h)).real
        return self.c(torch.relu(h))


def test_graph_break_and_unsupported_op_fall_back_in_one_line():
    torch.manual_seed(2)
    model = Breaks()
    ref = copy.deepcopy(model)
    data = batches(2, (4, 8), 3)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = train(compiled(model), data, torch.optim.SGD(model.parameters(), lr=0.1))
    want = train(ref, data, torch.optim.SGD(ref.parameters(), lr=0.1))
    fallbacks = [str(w.message) for w in caught if w.category is PlannerFallback]
    assert len(fallbacks) == 1, fallbacks  # once per graph and call signature
    assert "aten._fft_r2c" in fallbacks[0] and "\n" not in fallbacks[0]
    assert got == pytest.approx(want, rel=RTOL)
    assert_same_state(model, ref)


def test_fallback_false_raises_the_refusal():
    model = Breaks()
    with pytest.raises(TorchImportError, match="fft"):
        compiled(model, fallback=False)(torch.randn(2, 8))


def test_unknown_option_is_named():
    with pytest.raises(Exception, match="bogus"):
        compiled(nn.Linear(2, 2), bogus=1)(torch.randn(1, 2))


def test_registered_with_dynamo():
    assert "planner" in torch._dynamo.list_backends(exclude_tags=())
