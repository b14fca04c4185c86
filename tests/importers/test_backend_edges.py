"""torch.compile(model, backend="planner") at its edges, against eager PyTorch: outputs that
alias each other in eager (`(y, y.view(-1))`) alias each other (a write through one is seen
through the other, a gradient into the view reaches the base); ReLU's gradient at a NaN input
passes the incoming gradient, as threshold_backward; a module whose frame Dynamo skips (an
nn.GRU: Dynamo traces no RNN module) is told once, in one PlannerFallback line, not run
eagerly in silence."""

from __future__ import annotations

import copy
import warnings

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

import planner.torch  # noqa: E402,F401  (registers the backend)
from planner.torch.piece import PlannerFallback  # noqa: E402


def planned(model):
    torch._dynamo.reset()
    return torch.compile(model, backend="planner", options={"costs": "analytical"})


class Aliased(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 3)

    def forward(self, x):
        y = self.lin(x)
        return y, y.view(-1)


def _shares(a, b) -> bool:
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


def test_outputs_aliased_in_eager_stay_aliased():
    torch.manual_seed(0)
    model, x = Aliased(), torch.randn(2, 4)
    compiled = planned(model)
    with warnings.catch_warnings():
        warnings.simplefilter("error", PlannerFallback)  # planned, not eager
        y, flat = compiled(x)
        assert _shares(y, flat) and flat.shape == (6,)
        # a gradient into the view reaches the base's producers, as eager
        (y.sum() + (flat * torch.arange(6.0)).sum()).backward()
        got = [p.grad.clone() for p in model.parameters()]
        model.zero_grad()
        ey, eflat = model(x)
        (ey.sum() + (eflat * torch.arange(6.0)).sum()).backward()
        for a, b in zip(got, [p.grad for p in model.parameters()], strict=True):
            torch.testing.assert_close(a, b)
        with torch.no_grad():
            y, flat = compiled(x)
            assert _shares(y, flat)
            y.mul_(2)  # a write through one is seen through the other
            assert torch.equal(flat.view(2, 3), y)


class NanRelu(nn.Module):
    def forward(self, x):
        return torch.relu(x) * 3


def test_relu_passes_the_gradient_at_a_nan_input_as_pytorch():
    x = torch.tensor([[float("nan"), -1.0, 0.0, 2.0]], requires_grad=True)
    planned(NanRelu())(x).sum().backward()
    ours = x.grad.clone()
    x.grad = None
    NanRelu()(x).sum().backward()
    assert torch.equal(x.grad, torch.tensor([[3.0, 0.0, 0.0, 3.0]]))
    assert torch.equal(ours, x.grad)


class WithGRU(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.gru, self.head = nn.GRU(4, 5, batch_first=True), nn.Linear(5, 2)

    def forward(self, x):
        out, _ = self.gru(x)
        return self.head(out[:, -1])


def test_a_frame_dynamo_skips_is_told_once():
    # planned() resets Dynamo first, which clears its callbacks: they are registered again
    # (planner/torch/skipped.py), else this frame, which never reaches the backend, ran
    # eagerly unsaid
    model, x = WithGRU(), torch.randn(2, 3, 4)
    compiled = planned(model)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            out = compiled(x)
            out.sum().backward()
    told = [str(w.message) for w in caught if issubclass(w.category, PlannerFallback)]
    assert len(told) == 1, told
    assert "\n" not in told[0]
    assert told[0].startswith("torch.compile(backend='planner'): Dynamo skipped forward at "), \
        told[0]
    assert "test_backend_edges.py" in told[0]
    assert "GRU(4, 5, batch_first=True)" in told[0] and "runs eagerly" in told[0]
    torch.testing.assert_close(out, model(x))


def test_a_module_cast_to_bfloat16_is_planned_and_matches_eager():
    # Its example feeds converted by their bits (torch's .numpy() refuses bfloat16): a
    # TypeError out of the fallback before. Both sides round every result to bfloat16 (8
    # bits of mantissa: a relative step of 2^-8); sums of 8 products accumulate in float32 on
    # both, so results and gradients agree to a few bfloat16 steps.
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 4), nn.ReLU(), nn.Linear(4, 2)).to(torch.bfloat16)
    reference = copy.deepcopy(model)
    x = torch.randn(3, 8, dtype=torch.bfloat16)
    compiled = torch.compile(model, backend="planner", options={"costs": "analytical",
                                                                "fallback": False})
    out = compiled(x)
    want = reference(x)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), want.float(), rtol=3e-2, atol=3e-2)
    out.float().sum().backward()
    want.float().sum().backward()
    for a, b in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(a.grad.float(), b.grad.float(), rtol=3e-2, atol=3e-2)
