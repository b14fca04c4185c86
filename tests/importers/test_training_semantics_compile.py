"""The training-semantics matrix (tests/helpers/training_semantics.py) through
torch.compile(model, backend="planner"): the case's own PyTorch loop (its torch.optim, the
between-steps update, the outputs fed back) with only the module compiled, held to PyTorch
float32 with float64 as the noise floor, as the trainer is (tests/importers/
test_training_semantics.py). Each case plans and builds a forward and a backward executor (and
an inference one for the evaluation): CI runs one case (SAMPLE), `-m slow` the others the
backend's own tests (tests/test_torch_compile.py) do not already cover in kind; `-m
compile_full` runs all.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import planner.torch  # noqa: E402,F401  (registers the backend)
from planner.torch.piece import PlannerFallback  # noqa: E402
from tests.helpers.training_semantics import CASES, Case, mismatches, torch_run  # noqa: E402

# `make test` runs SAMPLE (the compile matrix's representative in CI), `-m slow` the rest of
# SLOW (cases the backend's own tests do not cover in kind), `-m compile_full` all.
SAMPLE = "tied_weights"
SLOW = ("no_grad_teacher", "in_place_buffer", "ema_target_network", "running_stats_indexed")


def planned(model):
    torch._dynamo.reset()
    return torch.compile(model, backend="planner", options={"costs": "analytical"})


@pytest.mark.parametrize("case", [
    pytest.param(c, marks=pytest.mark.ci_sample, id=c.name) if c.name == SAMPLE else
    pytest.param(c, marks=pytest.mark.slow, id=c.name) if c.name in SLOW else
    pytest.param(c, marks=pytest.mark.compile_full, id=c.name) for c in CASES])
def test_trains_as_pytorch_through_the_backend(case: Case):
    with warnings.catch_warnings():
        warnings.simplefilter("error", PlannerFallback)  # every piece planned, none eager
        ours = torch_run(case, torch.float32, wrap=planned)
    f32, f64 = torch_run(case, torch.float32), torch_run(case, torch.float64)
    assert mismatches(ours, f32, f64) == []
    start = case.make().state_dict()
    for key in case.unchanged:  # frozen: not a bit moved
        np.testing.assert_array_equal(ours.state[key], start[key].numpy(), err_msg=key)
