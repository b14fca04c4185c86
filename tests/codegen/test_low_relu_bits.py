"""Relu and ReluGrad on bfloat16 and float16 tensors run on the bits in the CPU runtime
(kernels/math.cpp): every special value (signed zeros, infinities, NaN of either sign,
subnormals of the low type, the largest finite) gives what the reference interpreter gives,
bit for bit but for NaN payloads (a NaN stays a NaN). The low feeds go in as torch tensors
(numpy has no bfloat16 over DLPack)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from planner.graph.builder import GraphBuilder
from planner.graph.interpret import run
from tests.codegen.helpers import build_module

torch = pytest.importorskip("torch")

SPECIAL = [0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, -np.nan, 1e-40, -1e-40, 6e-8, -6e-8,
           3e38, -3e38, 60000.0, -60000.0]
TYPES = {"bfloat16": ml_dtypes.bfloat16, "float16": np.float16}


@pytest.mark.parametrize("low", sorted(TYPES))
def test_relu_and_its_gradient_on_the_bits(low, tmp_path):
    special = np.array(SPECIAL, dtype=np.float32).astype(TYPES[low])  # inf where too large
    n = special.size
    b = GraphBuilder("low_relu")
    x, dy = b.input("x", (n, n), low), b.input("dy", (n, n), low)
    y = b.op("Relu", [x], name="relu")
    dx = b.op("ReluGrad", [dy, y], name="relu_grad")
    graph = b.build(outputs=[y, dx])
    # every special value of x against every special value of dy
    feeds = {"x": np.repeat(special[:, None], n, axis=1),
             "dy": np.repeat(special[None, :], n, axis=0)}
    as_torch = {k: torch.from_numpy(v.view(np.uint16).astype(np.int16)).view(
        {"bfloat16": torch.bfloat16, "float16": torch.float16}[low]) for k, v in feeds.items()}
    got = build_module(graph, tmp_path / f"relu_{low}").Executor().forward(as_torch)
    want = run(graph, feeds, {})
    for name in (y, dx):
        g, w = np.asarray(got[name]), np.asarray(want[name])
        assert g.dtype == w.dtype == np.dtype(TYPES[low])
        nan = np.isnan(w.astype(np.float32))
        assert np.array_equal(np.isnan(g.astype(np.float32)), nan), name
        assert np.array_equal(g.view(np.uint16)[~nan], w.view(np.uint16)[~nan]), name
