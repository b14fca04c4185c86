"""MatMul weights packed once per step (templates/cpu/runtime/weight_packs.h): a weight three
MatMuls read (a recurrence through one matrix, as an RNN's) is packed, and steps that update it
keep matching the reference interpreter, so every step multiplies by that step's weight, not by
a pack left from the step before; a weight read once is not packed."""

from __future__ import annotations

import numpy as np
import pytest

from planner.frontend.autodiff import make_training_graph
from planner.graph.builder import GraphBuilder
from planner.graph.interpret import random_feeds, train_step
from planner.graph.optimizer import Optimizer
from tests.codegen.helpers import build_module, rel_error, start_state

N, ROWS = 96, 8


def recurrence(steps: int):
    """h_t = tanh(h_{t-1} W), `steps` times through one W, and an MSE loss: forward, W is B of
    `steps` MatMuls; backward, of `steps` more reading it transposed."""
    b = GraphBuilder(f"recurrence{steps}")
    w = b.param("w", (N, N), init="glorot")
    h = b.input("x", (ROWS, N))
    for t in range(steps):
        h = b.op("Tanh", [b.op("MatMul", [h, w], name=f"step{t}")], name=f"tanh{t}")
    loss = b.op("MSE", [h, b.input("y", (ROWS, N))], name="loss")
    return make_training_graph(b.build(outputs=[loss]), Optimizer(kind="sgd", lr=0.5))


@pytest.mark.parametrize("steps, packed", [(3, True), (1, False)])
def test_packed_weights_follow_every_update(tmp_path, steps, packed):
    graph = recurrence(steps)
    module = build_module(graph, tmp_path / f"recurrence{steps}")
    ex = module.Executor()
    state = start_state(graph)
    ex.load_params(state)
    feeds = random_feeds(graph, seed=2)
    for _ in range(3):
        want, state = train_step(graph, feeds, state)
        got = ex.step(feeds)
        # Float32 sums of N products, a few steps deep: ~1e-6 relative each; the reference
        # runs in float32 too, so the two differ by summation order only.
        assert rel_error(got["loss"], want["loss"]) < 1e-4
        np.testing.assert_allclose(ex.params()["w"], state["w"], rtol=0, atol=1e-5)
    stats = ex.stats()
    # A packed (N, N) float32 weight in oneDNN's blocked layout: at least N * N * 4 bytes (its
    # blocks pad). Which of the two ways it is read (plain forward, transposed backward) gets
    # a pack is oneDNN's choice per ISA (AVX-512: both; AVX2: one), at least one of them.
    assert (stats["packed_weight_bytes"] >= N * N * 4) == packed
    assert (stats["packed_weight_bytes"] == 0) == (not packed)
    assert stats["held_bytes"] == (stats["arena_bytes"] + stats["host_store_bytes"]
                                   + stats["unplanned_scratch_bytes"]
                                   + stats["packed_weight_bytes"])
