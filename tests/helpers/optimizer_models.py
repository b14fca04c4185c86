"""The tiny MLP the optimizer tests train (tests/importers/test_torch_optimizers.py) and its
data-parallel ranks run (tests/importers/dp_trainer_worker.py)."""

from __future__ import annotations

import torch


class MLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(6, 8)
        self.fc2 = torch.nn.Linear(8, 3)

    def forward(self, x):
        return self.fc2(torch.tanh(self.fc1(x)))
