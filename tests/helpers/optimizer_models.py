"""The tiny MLP the optimizer tests train (tests/importers/test_torch_optimizers.py) and its
data-parallel ranks run (tests/importers/dp_trainer_worker.py, dp_cli_twin_worker.py)."""

from __future__ import annotations

import torch


class MLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(6, 8)
        self.fc2 = torch.nn.Linear(8, 3)

    def forward(self, x):
        return self.fc2(torch.tanh(self.fc1(x)))


class TanhNet(torch.nn.Module):
    """Three layers (16-32-32-4): a plan for two ZeRO-3 ranks at 8 rows a rank holds 29312
    bytes unconstrained, and a budget between that and liveness's 28736 makes it lay the arena
    out otherwise (tests/importers/test_torch_cli_twin.py)."""

    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(),
                                       torch.nn.Linear(32, 32), torch.nn.Tanh(),
                                       torch.nn.Linear(32, 4))

    def forward(self, x):
        return self.net(x)
