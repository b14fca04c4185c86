"""Dropout's mask is keyed by the data-parallel rank, as the random ops' draws are
(planner/ops/dropout.py, templates/common/random.h): rank 0 is the reference's mask, rank k the
generator's rank-k stream, forward and backward alike; the CUDA kernel's seed offset spells the
same stream."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from planner.graph import GraphBuilder, check_graph
from planner.ops.dropout import GOLDEN_GAMMA
from planner.ops.random import RANK_GAMMA, draws

ROOT = Path(__file__).resolve().parents[2]
RATE, SEED, SHAPE = 0.3, 11, (200, 50)


def _mask(rank: int, step: int) -> np.ndarray:
    d = draws(seed=SEED, step=step, n=int(np.prod(SHAPE)), rank=rank)
    return ((d >> np.uint64(11)).astype(np.float64) * 2.0**-53 >= RATE).reshape(SHAPE)


@pytest.fixture(scope="module")
def executor(tmp_path_factory):
    from tests.codegen.helpers import build_module

    b = GraphBuilder("dropout_rank")
    x, dy, step = b.input("x", SHAPE), b.input("dy", SHAPE), b.input("step", (), "int64")
    y = b.op("Dropout", [x, step], {"rate": RATE, "seed": SEED}, name="y")
    dx = b.op("DropoutGrad", [dy, step], {"rate": RATE, "seed": SEED}, name="dx")
    graph = check_graph(b.build(outputs=[y, dx]))
    return graph, build_module(graph, tmp_path_factory.mktemp("dropout") / "dropout_rank") \
        .Executor()


def test_ranks_drop_their_own_elements_forward_and_backward(executor):
    from planner.graph import run

    graph, ex = executor
    rng = np.random.default_rng(0)
    feeds = {"x": rng.uniform(1, 2, SHAPE).astype(np.float32),
             "dy": rng.uniform(1, 2, SHAPE).astype(np.float32), "step": np.array(4, np.int64)}

    def never(*args):  # a plan without collectives never calls it
        raise AssertionError("no collective expected")

    rank0 = ex.forward(feeds)
    ex.set_collective(never, 1)
    try:
        rank1 = ex.forward(feeds)
    finally:
        ex.set_collective(never, 0)
    want0 = run(graph, feeds, {}, keep="outputs")
    for name in ("y", "dx"):
        assert np.array_equal(rank0[name], want0[name]), name  # rank 0: the reference's
        assert np.array_equal(rank0[name] != 0, _mask(0, 4)), name
        assert np.array_equal(rank1[name] != 0, _mask(1, 4)), name
    assert np.array_equal(rank1["y"] != 0, rank1["dx"] != 0)  # backward: the forward's mask
    # independent streams: the ranks' masks agree where two independent coins would
    agree = float(np.mean(_mask(0, 4) == _mask(1, 4)))
    assert abs(agree - (RATE**2 + (1 - RATE) ** 2)) < 0.02


def test_the_cuda_seed_offset_is_the_rank_stream():
    """The generated CUDA Dropout knows only its seed: rank k runs it with seed + k
    kRngRankSeed, whose counter (seed + k kRngRankSeed) * golden gamma is rng_base's."""
    text = (ROOT / "templates" / "common" / "random.h").read_text()
    offset = int(re.search(r"kRngRankSeed = (0x[0-9A-F]+)ull", text).group(1), 16)
    mask = (1 << 64) - 1
    for seed, rank in [(0, 1), (SEED, 3), (2**63 + 5, 7)]:
        assert (seed + rank * offset) * GOLDEN_GAMMA & mask == \
            (seed * GOLDEN_GAMMA + rank * RANK_GAMMA) & mask
