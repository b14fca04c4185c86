"""The CPU executor's fused attention softmax (templates/cpu/runtime/kernels/scaled_softmax.cpp)
against its numpy reference, on rows long enough for the vector loops' remainders and on rows
of -inf, NaN and +inf, with an error bound derived from the kernel's arithmetic.

Forward, per row of n scores z = scale * x (float32, rounded as Scale's), max m, y = e / S:
each term e_j = exp(z_j - m) carries the rounding of z_j (|z_j| u), of z_j - m (|z_j - m| u)
and exp_nonpositive's own error (under 1.5 u, vmath.h), S the float sum of n terms ((n - 1) u
relative), 1 / S and the product by it 2 u: with y <= 1, |y - y*| <= (2 max|z| + n + 4) u,
u = 2^-24.
Backward, dx = scale * y * (dy - sum(dy * y)) with sum(y) = 1: the float dot product errs by at
most n u max|dy|, the subtraction and the two products by 3 u (|dy| + |dot|) <= 6 u max|dy|:
|dx - dx*| <= |scale| (n + 6) u max|dy|.
"""

from __future__ import annotations

import numpy as np
import pytest

from planner.graph import GraphBuilder, check_graph
from planner.ops import get_op
from tests.codegen.helpers import build_module

U = 2.0 ** -24
# (shape, attrs): causal with as many keys as queries and more keys than queries, and none
CASES = [((2, 2, 37, 37), {"scale": 0.125, "causal": True}),
         ((3, 6, 50), {"scale": 0.5, "causal": True}),
         ((3, 8, 100), {"scale": -0.7, "causal": False})]


def _scores(shape, seed, scale):
    """Random scores with, once scaled (inf: +inf after the scale), special rows."""
    x = (np.random.default_rng(seed).standard_normal(shape) * 4).astype(np.float32)
    rows, inf = x.reshape(-1, shape[-1]), np.float32(np.inf * np.sign(scale))
    rows[1, :] = -inf                    # all -inf: NaN
    rows[2, 1] = np.nan                  # NaN among the first scores (unmasked in every case)
    rows[3, 0] = inf                     # +inf: NaN
    rows[4, -1] = np.nan                 # the last score: masked in causal row 4, else NaN
    rows[5, :shape[-1] // 2] = -inf      # half -inf: a causal row 5 reads -inf only
    rows[-1, 3] = -inf                   # one -inf among finite scores: probability 0
    return x


def _reference(op, xs, attrs, dtype):
    opdef = get_op(op)
    with np.errstate(all="ignore"):
        return opdef.reference([x.astype(dtype) for x in xs], opdef.normalize_attrs(attrs))[0]


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    b = GraphBuilder("scaled_softmax")
    feeds, outs = {}, {}
    for k, (shape, attrs) in enumerate(CASES):
        x = _scores(shape, k, attrs["scale"])
        y = _reference("ScaledSoftmax", [x], attrs, np.float32)
        dy = np.random.default_rng(10 + k).standard_normal(shape).astype(np.float32)
        dy.reshape(-1, shape[-1])[6, -1] = np.nan  # masked or not, in the row's dot product
        names = [b.input(f"c{k}/{v}", shape) for v in ("x", "y", "dy")]
        feeds.update(zip(names, (x, np.nan_to_num(y), dy), strict=True))
        outs[k] = (b.op("ScaledSoftmax", [names[0]], attrs, name=f"c{k}/fwd"),
                   b.op("ScaledSoftmaxGrad", [names[2], names[1]], attrs, name=f"c{k}/bwd"))
    graph = check_graph(b.build(outputs=[o for pair in outs.values() for o in pair]))
    got = build_module(graph, tmp_path_factory.mktemp("ss") / "ss").Executor().forward(feeds)
    return {k: ([feeds[f"c{k}/{v}"] for v in ("x", "y", "dy")], got[f], got[g])
            for k, (f, g) in outs.items()}


def _check(got, xs, op, attrs, bound):
    want32, want = (_reference(op, xs, attrs, t) for t in (np.float32, np.float64))
    assert np.array_equal(np.isnan(got), np.isnan(want32)), np.argwhere(
        np.isnan(got) != np.isnan(want32))[:4].tolist()
    ok = ~np.isnan(want32)
    assert np.isfinite(got[ok]).all()
    err = float(np.abs(got[ok] - want[ok]).max())
    assert err <= bound, (err, bound)
    return want32


@pytest.mark.parametrize("k", range(len(CASES)))
def test_forward_matches_reference_within_its_bound(k, executed):
    (x, _, _), y, _ = executed[k]
    shape, attrs = CASES[k]
    z = np.abs(np.float32(attrs["scale"]) * x[np.isfinite(x)]).max()
    want = _check(y, [x], "ScaledSoftmax", attrs, (2 * z + shape[-1] + 4) * U)
    rows, want_rows = y.reshape(-1, shape[-1]), want.reshape(-1, shape[-1])
    assert np.isnan(rows[1:4]).all() and not np.isnan(rows[-1]).any() and rows[-1, 3] == 0
    assert np.isnan(rows[4]).all() != attrs["causal"]          # masked NaN: ignored
    if attrs["causal"]:  # exact zeros above the diagonal
        height = shape[-2]
        for r in range(rows.shape[0]):
            if not np.isnan(want_rows[r]).any():
                assert (rows[r, r % height + 1:] == 0).all()


@pytest.mark.parametrize("k", range(len(CASES)))
def test_backward_matches_reference_within_its_bound(k, executed):
    (_, y, dy), _, dx = executed[k]
    shape, attrs = CASES[k]
    dmax = float(np.abs(dy[np.isfinite(dy)]).max())
    bound = abs(attrs["scale"]) * (shape[-1] + 6) * U * dmax
    _check(dx, [dy, y], "ScaledSoftmaxGrad", attrs, bound)
    assert np.isnan(dx.reshape(-1, shape[-1])[6]).any()
