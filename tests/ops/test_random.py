"""The random ops (planner/ops/random.py): their distributions by statistics at fixed seeds,
their stream (Dropout's, keyed by seed, step and rank), and the CPU executor drawing the
reference's numbers bit for bit.

Statistical bounds: each test draws n values at one fixed seed, so it either always passes or
always fails; the bounds are set where a correct generator fails with probability below 1e-4
(mean: 4 standard errors; Kolmogorov-Smirnov: D < 1.95 / sqrt(n), the 0.1% critical value;
chi-square with k degrees of freedom: below k + 5 sqrt(2k)), and a wrong distribution (a
shifted mean, a wrong variance, a biased coin) fails them by far at these n.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from planner.frontend.autodiff import DROPOUT_STEP, make_training_graph
from planner.graph import GraphBuilder, Optimizer, check_graph
from planner.ops import OpError, TensorType, get_op
from planner.ops.dropout import dropout_mask, step_seed
from planner.ops.random import draws

N = 40_000


def draw(op: str, inputs: list[np.ndarray] | None = None, **attrs) -> np.ndarray:
    opdef = get_op(op)
    return opdef.reference(inputs or [], opdef.normalize_attrs(attrs))[0]


def ks_statistic(x: np.ndarray, cdf) -> float:
    x = np.sort(x.astype(np.float64))
    f = cdf(x)
    n = len(x)
    return float(max(np.max(np.arange(1, n + 1) / n - f), np.max(f - np.arange(n) / n)))


def chi_square(counts: np.ndarray, expected: np.ndarray) -> float:
    return float(np.sum((counts - expected) ** 2 / expected))


KS_BOUND = 1.95 / math.sqrt(N)


def test_uniform_is_uniform_on_low_high():
    x = draw("RandomUniform", shape=[N], seed=11, low=-2.0, high=3.0)
    assert x.dtype == np.float32 and x.min() >= -2.0 and x.max() < 3.0
    assert abs(x.mean() - 0.5) < 4 * 5 / math.sqrt(12 * N)
    assert ks_statistic(x, lambda v: (v + 2.0) / 5.0) < KS_BOUND


def test_normal_has_its_mean_std_and_shape():
    x = draw("RandomNormal", shape=[N], seed=12, mean=1.5, std=2.0)
    assert abs(x.mean() - 1.5) < 4 * 2.0 / math.sqrt(N)
    # The sample variance's standard error is sigma^2 sqrt(2 / (n - 1)).
    assert abs(x.var(ddof=1) - 4.0) < 4 * 4.0 * math.sqrt(2 / (N - 1))
    cdf = np.vectorize(lambda v: 0.5 * (1 + math.erf((v - 1.5) / (2.0 * math.sqrt(2)))))
    assert ks_statistic(x, cdf) < KS_BOUND


@pytest.mark.parametrize("p", [0.1, 0.8])
def test_bernoulli_with_a_scalar_p(p):
    x = draw("Bernoulli", shape=[N, 1], seed=13, p=p)
    assert set(np.unique(x).tolist()) <= {0.0, 1.0} and x.shape == (N, 1)
    assert abs(x.mean() - p) < 4 * math.sqrt(p * (1 - p) / N)


def test_bernoulli_with_a_tensor_of_probabilities():
    p = np.tile(np.array([0.0, 0.25, 0.5, 1.0], dtype=np.float32), N // 4)
    x = draw("Bernoulli", [p], seed=14).reshape(-1, 4)
    assert x[:, 0].sum() == 0 and x[:, 3].all()
    for k, q in ((1, 0.25), (2, 0.5)):
        assert abs(x[:, k].mean() - q) < 4 * math.sqrt(q * (1 - q) / (N // 4))


def test_randint_covers_its_range_evenly():
    x = draw("RandomInt", shape=[N], seed=15, low=-3, high=7)
    assert x.dtype == np.int64 and x.min() == -3 and x.max() == 6
    counts = np.bincount(x + 3, minlength=10)
    assert chi_square(counts, np.full(10, N / 10)) < 9 + 5 * math.sqrt(18)


def test_randperm_is_a_uniform_permutation():
    firsts = []
    for seed in range(2000):
        perm = draw("RandomPerm", n=6, seed=seed)
        assert sorted(perm.tolist()) == list(range(6))
        firsts.append(perm[0])
    counts = np.bincount(firsts, minlength=6)
    assert chi_square(counts, np.full(6, 2000 / 6)) < 5 + 5 * math.sqrt(10)


def test_the_stream_is_dropouts_and_moves_with_the_step_and_the_rank():
    d = draws(seed=21, step=3, n=1000)
    keep = (d >> np.uint64(11)).astype(np.float64) * 2.0**-53 >= 0.4
    assert keep.tolist() == dropout_mask(step_seed(21, 3), 1000, 0.4).tolist()
    assert not np.array_equal(d, draws(seed=21, step=4, n=1000))
    assert not np.array_equal(d, draws(seed=21, step=3, n=1000, rank=1))
    assert not np.array_equal(d, draws(seed=22, step=3, n=1000))
    # The step is an input: step 3 read from it draws the same numbers as the key above.
    step = np.array(3, dtype=np.int64)
    x = draw("RandomUniform", [step], shape=[1000], seed=21)
    assert np.array_equal(x, ((d >> np.uint64(40)).astype(np.float64) * 2.0**-24)
                          .astype(np.float32))


def test_bad_attributes_and_inputs_are_refused_naming_the_op():
    def infer(op, ins, **attrs):
        return get_op(op).infer(ins, get_op(op).normalize_attrs(attrs))

    with pytest.raises(OpError, match="Bernoulli: p must lie in"):
        infer("Bernoulli", [], p=1.5)
    with pytest.raises(OpError, match="RandomInt: high - low"):
        infer("RandomInt", [], low=3, high=3)
    with pytest.raises(OpError, match="RandomUniform takes"):
        infer("RandomUniform", [TensorType((2,), "float32")])
    with pytest.raises(OpError, match="RandomNormal: step must be an int64 scalar"):
        infer("RandomNormal", [TensorType((2,), "int64")])


def test_training_graphs_feed_the_step_counter_to_random_ops():
    b = GraphBuilder("noisy")
    x = b.input("x", (4, 3))
    w = b.param("w", (3, 3), init="glorot")
    noise = b.op("RandomNormal", [], {"shape": [4, 3], "seed": 1, "std": 0.1}, name="noise")
    keep = b.op("Bernoulli", [], {"shape": [4, 1], "seed": 2, "p": 0.75}, name="keep")
    y = b.op("Mul", [b.op("Add", [b.op("MatMul", [x, w]), noise]), keep])
    loss = b.op("MSE", [y, b.input("t", (4, 3))], name="loss")
    g = make_training_graph(check_graph(b.build(outputs=[loss])), Optimizer(kind="sgd", lr=0.1))
    for name in ("noise", "keep"):
        assert g.producer[name].inputs[-1] == DROPOUT_STEP
    assert any(n.op == "Increment" and DROPOUT_STEP in n.inputs for n in g.nodes)


# ---- the CPU executor draws the reference's bits ---------------------------------------------

CASES = {
    "uniform": ("RandomUniform", {"shape": [300, 70], "seed": 3, "low": -1.0, "high": 4.0}),
    "normal": ("RandomNormal", {"shape": [300, 70], "seed": 4, "mean": 0.5, "std": 2.0}),
    "coin": ("Bernoulli", {"shape": [300, 70], "seed": 5, "p": 0.3}),
    "ints": ("RandomInt", {"shape": [300, 70], "seed": 6, "low": 5, "high": 1000}),
    "perm": ("RandomPerm", {"n": 500, "seed": 7}),
}


@pytest.fixture(scope="module")
def executor(tmp_path_factory):
    from tests.codegen.helpers import build_module

    b = GraphBuilder("random_bits")
    step = b.input("step", (), "int64")
    p = b.input("p", (300, 70))
    outs = [b.op(op, [step], attrs, name=name) for name, (op, attrs) in CASES.items()]
    outs.append(b.op("Bernoulli", [p, step], {"seed": 8}, name="coins"))
    graph = check_graph(b.build(outputs=outs))
    module = build_module(graph, tmp_path_factory.mktemp("random") / "random_bits")
    return graph, module.Executor()


def _p() -> np.ndarray:
    return np.random.default_rng(0).uniform(0, 1, (300, 70)).astype(np.float32)


@pytest.mark.parametrize("step", [0, 7])
def test_the_cpu_executor_draws_the_references_bits(executor, step):
    from planner.graph import run

    graph, ex = executor
    feeds = {"step": np.array(step, dtype=np.int64), "p": _p()}
    got = ex.forward(feeds)
    want = run(graph, feeds, {}, keep="outputs")
    for name in graph.outputs:
        assert got[name].dtype == want[name].dtype
        assert np.array_equal(got[name], want[name]), name


def test_data_parallel_ranks_draw_their_own_streams(executor):
    graph, ex = executor
    feeds = {"step": np.array(2, dtype=np.int64), "p": _p()}
    rank0 = ex.forward(feeds)

    def never(*args):  # a plan without collectives never calls it
        raise AssertionError("no collective expected")

    ex.set_collective(never, 1)
    try:
        rank1 = ex.forward(feeds)
    finally:
        ex.set_collective(never, 0)
    d = draws(seed=3, step=2, n=300 * 70, rank=1)
    want = ((5.0 * (d >> np.uint64(40)).astype(np.float64) * 2.0**-24) - 1.0).astype(np.float32)
    assert np.array_equal(rank1["uniform"].ravel(), want)
    for name in graph.outputs:
        assert not np.array_equal(rank0[name], rank1[name]), name
    assert np.array_equal(ex.forward(feeds)["uniform"], rank0["uniform"])
