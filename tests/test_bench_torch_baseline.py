"""bench/torch_baseline.py's loss, the one the GPU bench times under torch.compile: the same loss
as the translator's torch_forward, and one Dynamo graph with no break (the translator's loop
normalized attributes inside the traced frame, so torch.compile skipped the whole step and
compiled each op's helper alone)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))

from torch_baseline import compile_ops, traced_loss  # noqa: E402

from planner.graph.interpret import init_params, random_feeds  # noqa: E402
from planner.zoo import build as zoo  # noqa: E402
from tests.torch_translator import TORCH_OPS, torch_forward  # noqa: E402

TINY = {"gpt": dict(batch=1, seq=8, dim=16, heads=2, layers=1, vocab=32),
        "resnet": dict(batch=2, depth=18, image=16, width=0.125, classes=4)}


@pytest.mark.parametrize("name", sorted(TINY))
def test_traced_loss_is_the_translators_and_one_graph(name):
    forward = zoo(name, **TINY[name])
    values = {k: torch.tensor(v) for k, v in
              {**init_params(forward, seed=0), **random_feeds(forward, seed=1)}.items()}
    loss = traced_loss(forward, TORCH_OPS)
    # The same ops in the same order on the same values: the same float32 result, bit for bit.
    assert torch.equal(loss(values), torch_forward(forward, values)["loss"])
    # The translator's loop itself breaks the graph (the attributes' sort): the check can fail.
    before = torch._dynamo.explain(lambda v: torch_forward(forward, v)["loss"])(values)
    assert before.graph_break_count >= 1
    after = torch._dynamo.explain(traced_loss(forward, compile_ops()))(values)
    assert (after.graph_count, after.graph_break_count) == (1, 0)
