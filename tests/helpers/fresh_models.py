"""PyTorch's own steps of a model, and a trainer's losses and state held to them
(tests/importers/test_fresh_models.py, test_torch_one_hot.py)."""

from __future__ import annotations

import copy

import torch

from tests.importers.torch_step import Step, mismatches

LR = {"sgd": 0.05, "adam": 0.01}


def _cast(v, dtype):
    return v.to(dtype) if v.is_floating_point() else v


def torch_run(model, loss, batches, optimizer: str, dtype) -> Step:
    """PyTorch's own steps of a copy of `model` in `dtype`: the losses and the state_dict()."""
    model = copy.deepcopy(model).to(dtype)
    opt = (torch.optim.SGD(model.parameters(), lr=LR["sgd"]) if optimizer == "sgd"
           else torch.optim.Adam(model.parameters(), lr=LR["adam"]))
    losses = []
    for *inputs, labels in batches:
        opt.zero_grad()
        value = loss(model(*(_cast(x, dtype) for x in inputs)), _cast(labels, dtype))
        value.backward()
        opt.step()
        losses.append(value.item())
    return Step(losses, {k: v.detach().numpy().copy() for k, v in model.state_dict().items()})


def equal_to_torch(ours_losses, ours_state, model, loss, batches, optimizer):
    f32 = torch_run(model, loss, batches, optimizer, torch.float32)
    f64 = torch_run(model, loss, batches, optimizer, torch.float64)
    assert set(ours_state) == set(model.state_dict())
    for k, (a, b) in enumerate(zip(ours_losses, f32.loss, strict=True)):
        assert abs(a - b) <= 1e-4 * abs(b), f"step {k}: loss {a} vs torch {b}"
    last = Step(ours_losses[-1], ours_state)
    assert mismatches(last, Step(f32.loss[-1], f32.state), Step(f64.loss[-1], f64.state)) == []
