"""The fp16-mixed loss-scaling case the interpreter and executor tests share: a small MLP
trained with dynamic loss scaling, whose input at OVERFLOW_STEP is scaled so that its scaled
gradients overflow float16, and PyTorch's own scale update to hold the scales to."""

from __future__ import annotations

import numpy as np
import pytest

from planner.frontend.autodiff import make_training_graph
from planner.graph.interpret import INIT_LOSS_SCALE, random_feeds
from planner.graph.optimizer import LossScaling, Optimizer
from planner.zoo import build

GROWTH_INTERVAL = 3
OVERFLOW_STEP = 2      # its input is large enough that the scaled gradients overflow float16
STEPS = 8


def loss_scaled_mlp(kind: str, scaling: LossScaling | None = None):
    """The MLP's fp16-mixed training graph with optimizer `kind`, loss scaling on (growth after
    GROWTH_INTERVAL clean steps) unless `scaling` says otherwise."""
    return make_training_graph(build("mlp", batch=4, hidden=[8], in_features=6, classes=3),
                               Optimizer(kind=kind, lr=0.01), precision="fp16-mixed",
                               loss_scaling=scaling or LossScaling(growth_interval=GROWTH_INTERVAL))


def params(g) -> list[str]:
    """The names of the parameters the step updates."""
    return [t.updates for t in g.tensors if t.role == "param" and t.updates]


def feeds_for(g, step: int) -> dict[str, np.ndarray]:
    f = random_feeds(g, seed=10 + step)
    scale = 1e3 if step == OVERFLOW_STEP else 0.1   # 1e3 * 2^16 / 4 per element: past 65504
    return {**f, "x": (f["x"] * scale).astype(np.float32)}


def torch_scales(flags: list[bool], growth_interval: int) -> list[float]:
    """The scale after each step, by PyTorch's update (GradScaler's defaults otherwise)."""
    torch = pytest.importorskip("torch")
    scale = torch.full((), INIT_LOSS_SCALE, dtype=torch.float32)
    tracker = torch.zeros((), dtype=torch.int32)
    out = []
    for found in flags:
        torch._amp_update_scale_(scale, tracker, torch.full((), float(found)), 2.0, 0.5,
                                 growth_interval)
        out.append(float(scale))
    return out
