"""`torch.autocast("cpu", dtype=torch.bfloat16)` around a model compiled with backend="planner".

Dynamo guards on autocast's state; the graph the planner imports is traced under it, so it
carries autocast's casts (a Linear's input and weight to bfloat16, its output in bfloat16), and
the plan computes what eager autocast computes: the same ops in the same dtypes. Where the plan
has no bfloat16 kernel for an op, the graph runs eagerly after one line naming the op.

Tolerance: both sides round the same values to bfloat16 (8 bits: a relative 2^-9 per rounding)
at the same places, accumulating in float32 in another order, so a result may land one
bfloat16 rounding apart, and that difference passes through at most a few more ops: four
bfloat16 ulps (4 x 2^-8) of the largest value bounds it, while a missing cast (float32 where
eager has bfloat16) or a wrong value shows at percents or not at all (the dtypes are compared).
"""

from __future__ import annotations

import copy
import warnings

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

import planner.torch  # noqa: E402,F401  (registers the backend)
from planner.torch.piece import PlannerFallback  # noqa: E402

RTOL = 4 * 2.0 ** -8


def assert_close(got, want, what: str) -> None:
    assert got.dtype == want.dtype, f"{what}: {got.dtype}, eager {want.dtype}"
    scale = max(float(want.detach().abs().max()), 1e-3)
    err = float((got.detach().double() - want.detach().double()).abs().max())
    assert err <= RTOL * scale, f"{what}: |diff| {err:.3g} > {RTOL:.3g} x {scale:.3g}"


def step_under_autocast(model, x, y):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(x)
    loss = ((out.float() - y) ** 2).mean()
    loss.backward()
    return out, loss


def compare(model, x, y):
    """The compiled model's output, loss and gradients beside eager's; the fallback lines."""
    ref = copy.deepcopy(model)
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="planner", options={"costs": "analytical"})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out, loss = step_under_autocast(compiled, x, y)
    want_out, want_loss = step_under_autocast(ref, x, y)
    assert_close(out, want_out, "output")
    assert_close(loss, want_loss, "loss")
    for (name, p), q in zip(model.named_parameters(), ref.parameters(), strict=True):
        assert_close(p.grad, q.grad, f"{name}.grad")
    return [str(w.message) for w in caught if w.category is PlannerFallback]


def test_autocast_bfloat16_is_planned_as_eager_computes_it():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(12, 16), nn.LayerNorm(16), nn.ReLU(), nn.Linear(16, 4))
    x, y = torch.randn(8, 12), torch.randn(8, 4)
    assert compare(model, x, y) == []


class Inside(nn.Module):
    """autocast entered inside the compiled forward (Dynamo's graph enters and exits it)."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(12, 16), nn.Linear(16, 4)

    def forward(self, x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return self.b(torch.relu(self.a(x)))


def test_autocast_entered_inside_the_forward_is_planned_too():
    torch.manual_seed(1)
    x, y = torch.randn(8, 12), torch.randn(8, 4)
    assert compare(Inside(), x, y) == []


def test_an_op_without_a_bfloat16_kernel_runs_eagerly_named_in_one_line():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(12, 16), nn.LogSoftmax(-1))
    x, y = torch.randn(8, 12), torch.randn(8, 16)
    fallbacks = compare(model, x, y)
    assert len(fallbacks) == 1 and "\n" not in fallbacks[0], fallbacks
    assert "LogSoftmax" in fallbacks[0] and "bfloat16" in fallbacks[0]
