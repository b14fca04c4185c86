"""The in-place draws (exponential_, cauchy_, geometric_, log_normal_, normal_, uniform_) on a
buffer or a parameter, randint_like, rrelu in training and the uninitialized factories through
the torch front end (planner/importers/torch/rules_random.py).

Statistics at fixed seeds on the reference interpreter, bounds as tests/ops/test_random.py's (a
correct generator fails with probability below 1e-4): Kolmogorov-Smirnov D < 1.95 / sqrt(n)
against the distribution's own CDF, chi-square over the first geometric counts below
k + 5 sqrt(2k) (bins expecting 5 or more).
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from scipy import stats  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

from planner.frontend.autodiff import gradients  # noqa: E402
from planner.graph import run  # noqa: E402
from planner.importers.torch.context import TorchImportError  # noqa: E402
from planner.importers.torch.convert import convert  # noqa: E402

N = 40_000
KS = 1.95 / math.sqrt(N)


def _export(model, args=()):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.export.export(model, args)


class Refill(nn.Module):
    """A noise buffer drawn afresh by `draw` in every forward, and read (times 1) after."""

    def __init__(self, draw, as_parameter: bool = False):
        super().__init__()
        if as_parameter:
            self.noise = nn.Parameter(torch.zeros(N), requires_grad=False)
        else:
            self.register_buffer("noise", torch.zeros(N))
        self.draw = draw

    def forward(self):
        with torch.no_grad():
            self.draw(self.noise)
        return self.noise * 1.0


def _drawn(draw, as_parameter: bool = False) -> np.ndarray:
    imported = convert(_export(Refill(draw, as_parameter)))
    (out,) = imported.graph.outputs
    return run(imported.graph, {}, imported.params(), keep="outputs")[out].astype(np.float64)


CASES = [
    ("exponential", lambda t: t.exponential_(2.5), stats.expon(scale=1 / 2.5).cdf),
    ("cauchy", lambda t: t.cauchy_(1.5, 0.5), stats.cauchy(loc=1.5, scale=0.5).cdf),
    ("log_normal", lambda t: t.log_normal_(0.3, 0.7),
     stats.lognorm(s=0.7, scale=math.exp(0.3)).cdf),
    ("normal", lambda t: t.normal_(-1.0, 2.0), stats.norm(-1.0, 2.0).cdf),
    ("uniform", lambda t: t.uniform_(-2.0, 3.0), stats.uniform(-2.0, 5.0).cdf),
]


@pytest.mark.parametrize("name,draw,cdf", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("as_parameter", [False, True], ids=["buffer", "parameter"])
def test_in_place_draws_have_torchs_distribution(name, draw, cdf, as_parameter):
    x = _drawn(draw, as_parameter)
    assert np.isfinite(x).all()
    assert stats.kstest(x, cdf).statistic < KS, name
    # torch's own draw passes the same test (the bound is not too tight for a right answer)
    assert stats.kstest(draw(torch.zeros(N, dtype=torch.float64)).numpy(), cdf).statistic < KS


@pytest.mark.parametrize("p", [0.2, 0.7, 0.95])
def test_geometric_counts_trials_to_the_first_success(p):
    x = _drawn(lambda t: t.geometric_(p))
    assert (x >= 1).all() and (x == np.round(x)).all()
    # counts 1..k-1, and k or more together: every bin expects 5 or more
    k = min(12, 1 + int(math.log(5 / N) / math.log1p(-p)))
    counts = np.array([np.sum(x == j) for j in range(1, k)] + [np.sum(x >= k)])
    pmf = np.array([(1 - p) ** (j - 1) * p for j in range(1, k)] + [(1 - p) ** (k - 1)])
    chi2 = float(np.sum((counts - N * pmf) ** 2 / (N * pmf)))
    assert chi2 < (k - 1) + 5 * math.sqrt(2 * (k - 1))
    assert abs(x.mean() - 1 / p) < 4 * math.sqrt((1 - p) / p**2 / N)


def test_a_draw_is_fresh_each_step_and_reads_no_old_value():
    imported = convert(_export(Refill(lambda t: t.exponential_())))
    g = imported.graph
    assert "noise" not in {t.name for t in g.by_role("param", "state")}
    assert {n.op for n in g.nodes} >= {"RandomUniform", "Log1p"}


class Shifted(nn.Module):
    """A trained parameter written in forward: the planner updates those by the optimizer only
    (a frozen one written in forward is state, as a buffer: tests/importers/
    test_training_semantics.py's EMA target network)."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.zeros(4))

    def forward(self, x):
        with torch.no_grad():
            self.w.add_(1.0)
        return x * self.w


def test_a_trained_parameter_overwritten_in_forward_is_refused_in_one_line():
    with pytest.raises(TorchImportError, match=r"^parameter 'w': overwritten in forward by node "
                       r"'add'.*not a fresh random draw"):
        convert(_export(Shifted(), (torch.ones(4),)))


def test_randint_like_of_a_float_tensor_is_a_float_of_integers():
    class M(nn.Module):
        def forward(self, x):
            return torch.randint_like(x, 3, 9)

    imported = convert(_export(M(), (torch.zeros(N),)))
    (out,) = imported.graph.outputs
    x = run(imported.graph, {imported.inputs[0]: np.zeros(N, np.float32)}, {},
            keep="outputs")[out]
    assert x.dtype == np.float32 and set(np.unique(x).tolist()) == set(range(3, 9))
    counts = np.bincount(x.astype(np.int64) - 3)
    assert float(np.sum((counts - N / 6) ** 2 / (N / 6))) < 5 + 5 * math.sqrt(10)


def test_rrelu_in_training_draws_slopes_and_differentiates_through_them():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.x = nn.Parameter(torch.linspace(-3.0, 1.0, N))

        def forward(self):
            return F.rrelu(self.x, 0.1, 0.4, training=True)

    imported = convert(_export(M().train()))
    (out,) = imported.graph.outputs
    graph, grads = gradients(imported.graph, wrt=["x"], of=[out])
    dy = np.random.default_rng(0).standard_normal(N).astype(np.float32)
    got = run(graph, {f"grad/{out}": dy}, imported.params())
    x = imported.params()["x"]
    y, dx = got[out], got[grads["x"]]
    neg = x <= 0
    slope = y[neg] / x[neg]
    assert np.array_equal(y[~neg], x[~neg]) and np.array_equal(dx[~neg], dy[~neg])
    assert 0.1 <= slope.min() and slope.max() < 0.4
    assert stats.kstest(slope[np.abs(x[neg]) > 1e-3], stats.uniform(0.1, 0.3).cdf).statistic \
        < 1.95 / math.sqrt(neg.sum() * 0.9)
    np.testing.assert_allclose(dx[neg], dy[neg] * slope, rtol=1e-5, atol=1e-6)


def test_uninitialized_factories_are_zeros_and_the_plan_is_the_same_every_import():
    class M(nn.Module):
        def forward(self, x):
            return torch.empty_like(x) + x, x.new_empty_strided((2, 3), (3, 1)) * 1.0

    x = torch.randn(2, 3)
    a, b = (convert(_export(M(), (x,))) for _ in range(2))
    out = run(a.graph, {a.inputs[0]: x.numpy()}, a.params(), keep="outputs")
    np.testing.assert_array_equal(out[a.graph.outputs[0]], x.numpy())
    np.testing.assert_array_equal(out[a.graph.outputs[1]], np.zeros((2, 3), np.float32))
    assert a.graph == b.graph
    assert all(np.array_equal(v, b.params()[k]) for k, v in a.params().items())


PROBS = [0.1, 0.0, 0.25, 0.4, 0.05, 0.2]


def _multinomial(samples: int, replacement: bool, rows: int) -> np.ndarray:
    class M(nn.Module):
        def forward(self, p):
            return torch.multinomial(p, samples, replacement=replacement)

    p = torch.tensor([PROBS] * rows) * 3.0  # unnormalized, as torch takes them
    imported = convert(_export(M(), (p,)))
    (out,) = imported.graph.outputs
    return run(imported.graph, {imported.inputs[0]: p.numpy()}, {}, keep="outputs")[out]


def _chi2_below_bound(picks: np.ndarray, probs: np.ndarray) -> None:
    keep = probs > 0
    counts = np.bincount(picks.ravel(), minlength=len(probs))
    assert counts[~keep].sum() == 0  # a zero-probability category is never drawn
    want = picks.size * probs[keep]
    chi2 = float(np.sum((counts[keep] - want) ** 2 / want))
    k = keep.sum() - 1
    assert chi2 < k + 5 * math.sqrt(2 * k)


def test_multinomial_with_replacement_draws_each_category_by_its_weight():
    picks = _multinomial(N // 4, True, 4)
    assert picks.shape == (4, N // 4) and picks.dtype == np.int64
    _chi2_below_bound(picks, np.array(PROBS))


def test_multinomial_without_replacement_draws_distinct_categories_in_weight_order():
    picks = _multinomial(3, False, N // 4)
    assert picks.shape == (N // 4, 3)
    assert all(len(set(row)) == 3 for row in picks.tolist())
    _chi2_below_bound(picks[:, 0], np.array(PROBS))  # the first: by the weights
    assert not np.isin(picks, [1]).any()
