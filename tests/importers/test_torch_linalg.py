"""torch.linalg through the torch front end (planner/importers/torch/rules_linalg.py): the error
checks torch.export threads on an effect token (inv, solve, cholesky) are dropped alike by the
in-process exporter and the .pt2 reader, any other effect is refused in one line, and the
imported step equals torch's forward and gradients in float64."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from planner.frontend.autodiff import gradients  # noqa: E402
from planner.graph.interpret import run  # noqa: E402
from planner.importers.torch.context import TorchImportError  # noqa: E402
from planner.importers.torch.convert import convert  # noqa: E402
from tests.helpers.pt2_reader import same_as_in_process  # noqa: E402


class Solver(torch.nn.Module):
    """inv, solve and cholesky: each an op with a check torch.export orders by a token."""

    def __init__(self) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.a = torch.nn.Parameter(torch.randn(3, 3, generator=g) + 3 * torch.eye(3))

    def forward(self, b):
        spd = self.a @ self.a.t() + torch.eye(3)
        x = torch.linalg.solve(self.a, b) + torch.linalg.inv(self.a) @ b
        return (torch.linalg.cholesky(spd) @ x).sum() + torch.logdet(spd)


def test_checks_on_tokens_import_alike_from_a_pt2_file(tmp_path):
    same_as_in_process(Solver(), torch.randn(3, 2), tmp_path)


def test_checks_on_tokens_are_dropped_and_the_step_is_torchs():
    """Forward and gradient on the reference interpreter in float32, against torch in float64
    (a well-conditioned 3 x 3 system: float32 rounding, relative 1e-5 at most)."""
    model = Solver()
    b = torch.randn(3, 2, generator=torch.Generator().manual_seed(1))
    imported = convert(torch.export.export(model, (b,)), name="solver")
    loss = imported.graph.outputs[0]
    graph, names = gradients(imported.graph, wrt=["a"], of=[loss])
    got = run(graph, {imported.inputs[0]: b.numpy(), f"grad/{loss}": np.ones((), np.float32)},
              imported.params())
    exact = model.double()
    want = exact(b.double())
    want.backward()
    np.testing.assert_allclose(got[loss], want.item(), rtol=1e-5)
    np.testing.assert_allclose(got[names["a"]], exact.a.grad.numpy(), rtol=1e-4, atol=1e-5)


class Printing(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.p = torch.nn.Parameter(torch.ones(3))

    def forward(self):
        torch.ops.aten._print("side effect")
        return self.p * 2


def test_another_effect_is_refused_in_one_line():
    with pytest.raises(TorchImportError, match=r"node 'with_effects' \(aten\._print\.default\)"
                       r": an op with a side effect") as e:
        convert(torch.export.export(Printing(), ()))
    assert "\n" not in str(e.value)
