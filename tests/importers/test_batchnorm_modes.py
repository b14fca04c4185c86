"""BatchNorm's two modes beside the usual one, through both entry points:
`track_running_stats=False` (batch statistics in train() and eval() alike) trains as PyTorch
(the matrix case `batchnorm_batch_statistics`, tests/helpers/training_semantics.py, stepped by
tests/importers/test_training_semantics.py and its backend twin); `momentum=None` (the
cumulative moving average) is refused by the trainer in one line naming the module and what
works, and trains as PyTorch through torch.compile(backend="planner"), which it names.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import planner.torch  # noqa: E402
from planner.torch import TorchImportError  # noqa: E402
from tests.helpers.training_semantics import (  # noqa: E402
    MLP_DATA,
    BatchStatistics,
    Case,
    _seeded,
    ce,
    mismatches,
    torch_run,
)

CUMULATIVE = Case("batchnorm_cumulative_average",
                  _seeded(lambda: BatchStatistics(momentum=None, track=True)), MLP_DATA, ce)


def test_the_trainer_refuses_a_cumulative_average_naming_the_module():
    inputs, labels = MLP_DATA()[0]
    with pytest.raises(TorchImportError) as e:
        planner.torch.trainer(CUMULATIVE.make(), inputs, loss=ce, labels=labels,
                              costs="analytical")
    text = str(e.value)
    assert "\n" not in text
    assert text.startswith("BatchStatistics: module 'norm1' (BatchNorm1d) has momentum=None "
                           "(a cumulative moving average"), text
    assert "give it a momentum (0.1 is PyTorch's default)" in text
    assert "GuardOnDataDependentSymNode" not in text


def test_an_eval_batchnorm_with_no_momentum_is_left_alone():
    from planner.torch.norm_modes import cumulative_norms

    model = CUMULATIVE.make()
    model.norm1.eval()  # an eval() BatchNorm updates nothing: its momentum is never read
    assert cumulative_norms(model, "BatchStatistics") is None


@pytest.mark.slow
def test_the_backend_trains_a_cumulative_average_as_pytorch():
    # the refusal's remedy: Dynamo breaks the graph at float(num_batches_tracked) and the
    # pieces around it are planned; every step, the running statistics, evaluate() as eager
    def planned(model):
        torch._dynamo.reset()
        return torch.compile(model, backend="planner", options={"costs": "analytical"})

    ours = torch_run(CUMULATIVE, torch.float32, wrap=planned)
    f32, f64 = torch_run(CUMULATIVE, torch.float32), torch_run(CUMULATIVE, torch.float64)
    assert mismatches(ours, f32, f64) == []
    assert ours.state["norm1.num_batches_tracked"] == 3
