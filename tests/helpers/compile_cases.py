"""What the torch.compile backend's tests share (tests/test_torch_compile.py's tolerances):
the backend compiled with analytical costs, eager-vs-backend comparisons, a small ConvNet and
seeded batches."""

from __future__ import annotations

import torch

nn = torch.nn
F = torch.nn.functional

import planner.torch  # noqa: E402,F401  (registers the backend)

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
