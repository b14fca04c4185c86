"""`t.detach()` stops the gradient as in PyTorch: torch.export writes aten.detach, whose
decomposition (aten.alias) would pass the gradient on, so the planner keeps it whole as a
StopGradient. A module whose loss reads a value both through and around a detach trains with
torch's gradients (twice the gradient without the stop)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from planner.frontend.autodiff import gradients  # noqa: E402
from planner.graph import run  # noqa: E402
from planner.importers.torch.convert import convert  # noqa: E402


class Detached(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.tensor([0.5, -1.5, 2.0]))

    def forward(self, x):
        y = x * self.w
        return (y * y.detach()).sum()   # d/dw = x * y, not 2 x * y


def test_detach_stops_the_gradient():
    x = np.array([1.0, 2.0, -3.0], np.float32)
    module = Detached()
    imported = convert(torch.export.export(module, (torch.from_numpy(x),)))
    assert "StopGradient" in [n.op for n in imported.graph.nodes]
    graph, grads = gradients(imported.graph, ["w"])
    got = run(graph, {imported.inputs[0]: x}, imported.params())[grads["w"]]
    loss = module(torch.from_numpy(x))
    loss.backward()
    np.testing.assert_allclose(got, module.w.grad.numpy(), rtol=1e-6)
    np.testing.assert_allclose(got, x * x * module.w.detach().numpy(), rtol=1e-6)
