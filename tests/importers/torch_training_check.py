"""planner.torch's trainer against PyTorch's own optimizer: a module steps on fixed batches
through both, and every parameter and buffer (keyed by state_dict() names) must end where
PyTorch leaves it (tests/importers/test_torch_export.py and test_torch_heldout.py).

Tolerance: the result is compared with PyTorch run in float64 (the exact answer to float32
precision). Each float32 implementation differs from it by rounding, accumulated over the
forward pass, the backward pass and three updates; PyTorch's own float32 run shows how large
that is for this model and tensor (|t32 - t64|, "noise"). The executor sums in other orders
(oneDNN's blocked GEMMs and convolutions), so its rounding differs but is of the same size: it
may be off by 10 x noise, plus 16 float32 ulps of the tensor's scale for tensors where
PyTorch's float32 happens to be exact (tests/importers/torch_step.py, `mismatches`). The losses
of the steps agree to 1e-4 relative.
"""

from __future__ import annotations

import copy

import torch

from planner.torch.training import trainer
from tests.importers.torch_step import Step, mismatches

STEPS = 3
LR = {"sgd": 0.05, "adam": 0.01}


def torch_run(model, loss, batches, optimizer: str, dtype) -> Step:
    """PyTorch's own steps of a copy of `model` in `dtype` on `batches`: the last loss and the
    state_dict() after them."""
    model = copy.deepcopy(model).to(dtype)
    opt = (torch.optim.SGD(model.parameters(), lr=LR["sgd"]) if optimizer == "sgd"
           else torch.optim.Adam(model.parameters(), lr=LR["adam"]))
    losses = []
    for x, y in batches:
        opt.zero_grad()
        value = loss(model(x.to(dtype) if x.is_floating_point() else x),
                     y.to(dtype) if y.is_floating_point() else y)
        value.backward()
        opt.step()
        losses.append(float(value))
    return Step(losses[-1], {k: v.detach().numpy().copy() for k, v in model.state_dict().items()})


def trains_like_pytorch(model, loss, batches, optimizer: str, out_dir, costs=None):
    """Our trainer (its plan priced by `costs`) and PyTorch (float32 and float64) step `model`
    on `batches`; our params() are keyed like its state_dict() and within float32 noise of
    PyTorch's (`mismatches`). Returns (trainer, ours, PyTorch float32, PyTorch float64)."""
    x0, y0 = batches[0]
    t = trainer(model, (x0,), loss=loss, labels=y0, optimizer=optimizer, lr=LR[optimizer],
                out_dir=out_dir, costs=costs)
    losses = [t.step(x, y) for x, y in batches]
    ours = Step(losses[-1], t.params())
    f32 = torch_run(model, loss, batches, optimizer, torch.float32)
    f64 = torch_run(model, loss, batches, optimizer, torch.float64)
    assert set(ours.state) == set(model.state_dict())
    assert mismatches(ours, f32, f64) == []
    return t, ours, f32, f64
