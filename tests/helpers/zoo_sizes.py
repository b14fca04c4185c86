"""The bench's zoo models at small batches (parameters do not depend on the batch)."""

from __future__ import annotations

# The bench's models (bench_cpu_strategies.MODELS) at smaller batches: parameters do not
# depend on the batch.
SIZES = {
    "lstm": dict(batch=2, seq=3, hidden=256, layers=2, vocab=2000),
    "dcgan": dict(batch=2),
    "resnet-50": dict(depth=50, batch=2, image=64, width=0.25, classes=100),
    "wide_deep": dict(batch=4),
}
