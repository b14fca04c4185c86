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

# The bench's models (bench_cpu_strategies.MODELS) at smaller batches: parameters do not
# depend on the batch.
SIZES = {
    "lstm": dict(batch=2, seq=3, hidden=256, layers=2, vocab=2000),
    "dcgan": dict(batch=2),
    "resnet-50": dict(depth=50, batch=2, image=64, width=0.25, classes=100),
    "wide_deep": dict(batch=4),
}


@pytest.mark.parametrize("label", TWINS)
def test_twin_has_the_zoo_models_parameters(label):
    theirs, ours = zoo_twin_params(label, SIZES[label])
    assert theirs == ours

