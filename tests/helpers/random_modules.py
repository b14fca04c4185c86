"""A residual block with torchvision's stochastic depth (random per row), the module the random
ops' training tests share (tests/importers/test_torch_random.py, test_torch_losses_executor.py)."""

from __future__ import annotations

import torch
from torch import nn


def stochastic_depth(x, p: float, training: bool):
    """torchvision.ops.stochastic_depth, mode="row"."""
    if not training or p == 0.0:
        return x
    survival = 1.0 - p
    noise = torch.empty([x.shape[0]] + [1] * (x.ndim - 1), dtype=x.dtype)
    noise = noise.bernoulli_(survival)
    if survival > 0.0:
        noise.div_(survival)
    return x * noise


class Residual(nn.Module):
    def __init__(self, p: float = 0.5, mask=None) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 3, 3, padding=1)
        self.head = nn.Linear(3 * 4 * 4, 5)
        self.p, self.mask = p, mask

    def forward(self, x):
        branch = torch.relu(self.conv(x))
        if self.mask is None:
            branch = stochastic_depth(branch, self.p, self.training)
        else:  # the planner's keep mask, for the comparison
            branch = branch * self.mask.to(x.dtype) / (1.0 - self.p)
        return self.head((x + branch).flatten(1))
