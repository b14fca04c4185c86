"""BatchNorm and BatchNormGrad with batch statistics on float32 (N, C, rest >= 2) run plain
loops in the CPU runtime (kernels/batch_norm.cpp), one channel per thread with sums in double
in a fixed order: the reference's values within float32 rounding, and the same bits whichever
thread count a schedule gives the op. BatchNorm1d's (N, C) keeps oneDNN; both forms are in the
op cases (tests/codegen/op_cases.py)."""

from __future__ import annotations

import os

import numpy as np
import pytest

from planner.graph.builder import GraphBuilder
from planner.graph.interpret import run
from tests.codegen.helpers import build_module, rel_error

# rest = 5 * 7 = 35: four runs of the 8 partials and a remainder per run; 11 images: the sums
# in two chunks of images (kernels/batch_norm.cpp kChunkImages), the second short.
SHAPE = (11, 32, 5, 7)


def batch_norm_graph():
    b = GraphBuilder("bn_loops")
    c = (SHAPE[1],)
    x, dy = b.input("x", SHAPE), b.input("dy", SHAPE)
    scale, bias = b.input("scale", c), b.input("bias", c)
    mean, var = b.input("running_mean", c), b.input("running_var", c)
    y, new_mean, new_var, saved_mean, saved_invstd = b.op_n(
        "BatchNorm", [x, scale, bias, mean, var], {"epsilon": 1e-5, "momentum": 0.1},
        name="bn")
    dx, dscale, dbias = b.op_n("BatchNormGrad", [dy, x, scale, saved_mean, saved_invstd],
                               {"epsilon": 1e-5}, name="bn_grad")
    return b.build(outputs=[y, new_mean, new_var, saved_mean, saved_invstd, dx, dscale, dbias])


def feeds() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    c = SHAPE[1]
    # A channel offset far from its spread: a one-pass variance would lose digits to it.
    x = rng.standard_normal(SHAPE) * 0.5 + rng.uniform(-20, 20, (1, c, 1, 1))
    return {"x": x.astype(np.float32), "dy": rng.standard_normal(SHAPE).astype(np.float32),
            "scale": rng.uniform(0.5, 1.5, c).astype(np.float32),
            "bias": rng.uniform(-1, 1, c).astype(np.float32),
            "running_mean": rng.uniform(-1, 1, c).astype(np.float32),
            "running_var": rng.uniform(0.5, 2, c).astype(np.float32)}


@pytest.fixture(scope="module")
def module(tmp_path_factory):
    return build_module(batch_norm_graph(), tmp_path_factory.mktemp("bn") / "bn_loops")


def test_batch_norm_loops_give_the_reference_values(module):
    graph, fed = batch_norm_graph(), feeds()
    ex = module.Executor()
    assert all(s.get("impl", "") == "" for s in ex.stats()["ops"]
               if s["op"].startswith("BatchNorm")), "the loops, not oneDNN, ran"
    got = ex.forward(fed)
    want = run(graph, {k: v.astype(np.float64) for k, v in fed.items()}, {})
    for name in graph.outputs:
        # A few float32 roundings of values of the outputs' own size (the centred x and dy
        # terms are O(1) here): 1e-5 leaves a margin of ~50 ulps.
        assert rel_error(got[name], want[name]) < 1e-5, name


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="one CPU: every schedule has 1 thread")
def test_batch_norm_loops_give_the_same_bits_on_one_thread_and_on_two(module):
    fed = feeds()
    ex = module.Executor()
    ex.set_variant("main")
    assert all(s["threads"] >= 2 for s in ex.stats()["ops"] if s["op"].startswith("BatchNorm"))
    two = ex.forward(fed)
    ex.set_variant("cores-1")
    one = ex.forward(fed)
    for name, value in two.items():
        np.testing.assert_array_equal(value, one[name], err_msg=name)
