"""bench/zoo_modules.py: the nn.Module twins that the CPU benches' PyTorch columns (eager and
torch.compile) run are the zoo's models: the same parameter count at the bench's sizes."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))

from zoo_modules import TWINS, zoo_twin_params  # noqa: E402

from tests.helpers.zoo_sizes import SIZES  # noqa: E402


@pytest.mark.parametrize("label", TWINS)
def test_twin_has_the_zoo_models_parameters(label):
    theirs, ours = zoo_twin_params(label, SIZES[label])
    assert theirs == ours

