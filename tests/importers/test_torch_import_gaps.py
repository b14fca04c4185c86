"""The PyTorch models that did not import (issue 35): the trainer called more than once, a
loss of several terms, `aten.as_strided` and `aten.index.Tensor`, and errors that name the
module path. PyTorch is the reference throughout."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

import planner.torch  # noqa: E402


def test_trainer_can_be_called_again():
    """The package's `trainer` stays the function after its module is imported (a second
    call once raised "'module' object is not callable")."""
    for _ in range(3):
        with pytest.raises(ValueError, match="unknown optimizer 'nope'"):
            planner.torch.trainer(nn.Linear(2, 2), (torch.randn(1, 2),), loss=F.mse_loss,
                                  labels=torch.randn(1, 2), optimizer="nope")
    assert callable(planner.torch.trainer)
