"""A linear layer's Relu folded into its GEMM (planner/frontend/passes/fold_bias.py) trains as
PyTorch does: a Linear+ReLU MLP and an nn.TransformerEncoderLayer (its feed-forward block's default
activation="relu") stepped through planner.torch.trainer on the generated CPU executor match
PyTorch's steps within float32 noise (tests/helpers/training_semantics.py's `mismatches`:
10x PyTorch's own float32 error against float64 plus 16 ulps), and their plans run each
hidden Relu inside its MatMul. The kernel's NaN and inf handling is
tests/codegen/test_op_kernels.py's (the MatMul cases with `activation: relu`)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from tests.helpers.training_semantics import (  # noqa: E402
    BATCH,
    Case,
    ce,
    mismatches,
    planner_steps,
    planner_trainer,
    torch_run,
)

STEPS = 2


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 12), nn.ReLU(),
                         nn.Linear(12, 3))


class _Encoder(nn.Module):
    """One encoder layer (default activation: relu) over (N, T, 16), mean-pooled into a head."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(16, 2, dim_feedforward=32, dropout=0.0,
                                                batch_first=True)
        self.head = nn.Linear(16, 3)

    def forward(self, x):
        return self.head(self.layer(x).mean(1))


def _encoder() -> nn.Module:
    torch.manual_seed(0)
    return _Encoder()


def _batches(*shape: int):
    def made():
        g = torch.Generator().manual_seed(1)
        return [((torch.randn(*shape, generator=g),), torch.randint(0, 3, (BATCH,), generator=g))
                for _ in range(STEPS)]
    return made


CASES = {"mlp": (Case("mlp", _mlp, _batches(BATCH, 8), ce), 2),
         "encoder": (Case("encoder", _encoder, _batches(BATCH, 5, 16), ce), 1)}


@pytest.mark.parametrize("name", sorted(CASES))
def test_folded_relu_trains_as_pytorch(name):
    case, relus = CASES[name]
    t = planner_trainer(case)
    nodes = t.plan.graph.nodes
    assert [n.op for n in nodes if n.op == "MatMul" and n.attrs.get("activation") == "relu"] \
        == ["MatMul"] * relus
    assert "Relu" not in [n.op for n in nodes]
    assert [n.op for n in nodes].count("ReluGrad") == relus
    ours = planner_steps(case, t, STEPS)
    f32, f64 = torch_run(case, torch.float32, STEPS), torch_run(case, torch.float64, STEPS)
    assert mismatches(ours, f32, f64) == []
