"""A plan replayed on real bytes (planner.report.replay) against the reference interpreter's
step: the GPU memory tests (tests/memory/test_gpu.py) and the stream schedules under a budget
(tests/schedule/test_gpu_streams.py) hold their plans to it."""

from __future__ import annotations

import numpy as np

from planner.graph.interpret import init_params, random_feeds, train_step
from planner.report.replay import replay

# The reference step per graph name: the tests replay several plans of one graph.
REFERENCE: dict[str, tuple] = {}


def same_step(plan, graph) -> bool:
    """The plan run on real bytes gives the reference interpreter's step, bit for bit."""
    feeds, state = random_feeds(graph), init_params(graph)
    if graph.name not in REFERENCE:
        REFERENCE[graph.name] = train_step(graph, feeds, state)
    want_out, want_state = REFERENCE[graph.name]
    out, new = replay(plan, feeds, state)
    return all(np.array_equal(out[k], want_out[k]) for k in want_out) and \
        all(np.array_equal(new[k], want_state[k]) for k in want_state)
