"""Cases beyond the OpInfo samples for nanmedian, the norms' statistics outputs, avg_pool's
divisor_override, empty batches and conv_transpose's output_padding: each module exported,
imported and run forward and backward on the reference interpreter against torch in float64
(tests/importers/opinfo_cases.check_call, the OpInfo suite's own comparison)."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
from torch.nn import functional as F  # noqa: E402

from tests.importers.opinfo_cases import check_call, check_sample  # noqa: E402

NAN = math.nan


def _distinct(*shape: int) -> torch.Tensor:
    """Values without ties (a median's gradient goes to one index; torch's and the planner's
    agree on which only where the values differ)."""
    g = torch.Generator().manual_seed(math.prod(shape))
    return (torch.randperm(math.prod(shape), generator=g).float() / 7.0 - 3.0).reshape(shape)


def _with_nans(all_nan: bool = False) -> torch.Tensor:
    x = _distinct(4, 6)
    x[0, 1] = x[0, 4] = NAN  # some NaN
    x[3, 0] = NAN
    if all_nan:
        x[2] = NAN
    return x


@pytest.mark.parametrize("call", [
    lambda t: torch.nanmedian(t),
    lambda t: torch.nanmedian(t, dim=1),
    lambda t: torch.nanmedian(t, dim=0, keepdim=True),
    lambda t: torch.nanmedian(t[:, :5], dim=-1),  # an odd count of numbers on some lines
], ids=["all", "dim1", "dim0-keepdim", "odd"])
def test_nanmedian_skips_nans(call):
    assert check_call(call, _with_nans()) == ("pass", "")


@pytest.mark.parametrize("width", [5, 6])
def test_nanmedian_is_nan_where_every_value_is(width):
    """Values only: torch's index on an all-NaN line (so where its gradient goes) is whatever
    its nth_element leaves there (3 of 6 on this machine), which it does not document."""
    assert check_call(lambda t: torch.nanmedian(t[:, :width], dim=1).values.detach(),
                      _with_nans(all_nan=True)) == ("pass", "")
    assert check_call(lambda t: torch.nanmedian(t[:, :width]), _with_nans(all_nan=True)) == \
        ("pass", "")


def test_nanmedian_of_a_line_without_nan_is_the_lower_median():
    assert check_call(lambda t: torch.nanmedian(t, dim=1), _distinct(3, 8)) == ("pass", "")


@pytest.mark.parametrize("groups", [1, 2, 6])
def test_group_norms_mean_and_rstd_are_torchs_with_their_gradients(groups):
    x = _distinct(2, 6, 5)
    assert check_call(lambda t: torch.native_group_norm(t, None, None, 2, 6, 5, groups, 1e-3),
                      x) == ("pass", "")


def test_layer_norms_mean_and_rstd_are_torchs():
    x = _distinct(3, 4, 5)
    assert check_call(lambda t: torch.native_layer_norm(t, [4, 5], None, None, 1e-2),
                      x) == ("pass", "")


@pytest.mark.parametrize("kwargs", [
    {"kernel_size": 3, "stride": 2, "padding": 1, "divisor_override": 2},
    {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True, "divisor_override": 5},
    {"kernel_size": 2, "stride": 1, "count_include_pad": False, "divisor_override": 3},
], ids=["padded", "ceil", "exclusive"])
def test_avg_pool2d_divisor_override_divides_each_window_sum(kwargs):
    assert check_call(lambda t: F.avg_pool2d(t, **kwargs), _distinct(2, 3, 7, 6)) == \
        ("pass", "")


def test_avg_pool3d_divisor_override():
    assert check_call(lambda t: F.avg_pool3d(t, 3, 2, 1, ceil_mode=True, divisor_override=4),
                      _distinct(1, 2, 5, 6, 5)) == ("pass", "")


@pytest.mark.parametrize("pool", [
    lambda t: F.adaptive_avg_pool1d(t, 3),
    lambda t: F.adaptive_avg_pool3d(t, (2, 3, 1)),
], ids=["1d", "3d"])
def test_adaptive_avg_pool_of_an_empty_batch(pool):
    x = torch.zeros((0, 4, 7) if pool.__code__.co_consts.count(3) == 1 else (0, 2, 4, 6, 3))
    assert check_call(pool, x) == ("pass", "")


@pytest.mark.parametrize("kwargs", [
    # output_padding above the stride, below the dilation, more than the padding: zero rows
    {"stride": 2, "padding": 0, "output_padding": 2, "dilation": 3},
    # taken from the far pad first
    {"stride": (2, 1), "padding": (2, 1), "output_padding": (2, 1), "dilation": (3, 2)},
    # partly from the pad, the rest as ConvTranspose2D's own output_padding and a Pad
    {"stride": 2, "padding": 1, "output_padding": 3, "dilation": 4, "groups": 2},
], ids=["zeros", "pad", "both"])
def test_conv_transpose2d_output_padding_up_to_the_dilation(kwargs):
    x, w, b = _distinct(2, 4, 3, 4), _distinct(4, 3, 2, 3) / 5, _distinct(3 * kwargs.get(
        "groups", 1))
    w = w if kwargs.get("groups", 1) == 1 else _distinct(4, 3, 2, 3) / 5
    assert check_call(lambda t, ww, bb: F.conv_transpose2d(t, ww, bb, **kwargs), x, w, b) == \
        ("pass", "")


def test_conv_transpose3d_output_padding_up_to_the_dilation():
    x, w = _distinct(1, 2, 3, 3, 2), _distinct(2, 2, 2, 2, 2) / 5
    assert check_call(lambda t, ww: F.conv_transpose3d(t, ww, stride=(1, 2, 2), padding=1,
                                                       output_padding=(0, 2, 1),
                                                       dilation=(1, 3, 2)), x, w) == \
        ("pass", "")


def test_conv_transpose1d_output_padding_up_to_the_dilation():
    x, w = _distinct(2, 3, 5), _distinct(3, 2, 3) / 5
    assert check_call(lambda t, ww: F.conv_transpose1d(t, ww, stride=2, output_padding=3,
                                                       dilation=4), x, w) == ("pass", "")


# ---- search and histograms (planner/importers/torch/rules_search.py) ----------------------------

_SEQ = torch.tensor([-2.0, -0.5, -0.5, 0.0, 1.25, 3.0])


@pytest.mark.parametrize("kwargs", [{}, {"right": True}, {"side": "right"},
                                    {"out_int32": True}],
                         ids=["left", "right", "side", "int32"])
def test_searchsorted_on_ties_and_the_ends(kwargs):
    v = torch.tensor([[-3.0, -2.0, -0.5, 0.0, 0.1], [3.0, 4.0, 1.25, -0.5, NAN]])
    assert check_call(lambda s, x: torch.searchsorted(s, x, **kwargs), _SEQ, v) == ("pass", "")


def test_searchsorted_with_a_line_per_row_and_a_sorter():
    seq = torch.tensor([[3.0, -1.0, 2.0, 0.0], [5.0, 1.0, 4.0, 9.0]])
    sorter = torch.argsort(seq, dim=1)
    v = torch.tensor([[0.0, 2.5, -4.0], [4.0, 9.0, 10.0]])
    assert check_call(lambda s, x, o: torch.searchsorted(s, x, sorter=o), seq, v, sorter) == \
        ("pass", "")
    assert check_call(lambda s, x: torch.searchsorted(s, x, right=True), seq.sort().values,
                      v) == ("pass", "")


def test_searchsorted_of_nan_and_a_scalar():
    assert check_call(lambda s, x: torch.searchsorted(s, x), _SEQ,
                      torch.tensor([-1.0, 0.5, 2.0, NAN])) == ("pass", "")
    assert check_call(lambda s: torch.searchsorted(s, 0.5), _SEQ) == ("pass", "")


def test_bucketize_and_isin():
    x = torch.tensor([[-3.0, -0.5, 1.0], [3.0, 0.0, 7.0]])
    assert check_call(lambda t, e: torch.bucketize(t, e, right=True), x, _SEQ) == ("pass", "")
    assert check_call(lambda t, e: torch.isin(t, e), x, _SEQ) == ("pass", "")
    assert check_call(lambda t, e: torch.isin(t, e, invert=True), x, _SEQ) == ("pass", "")


@pytest.mark.parametrize("call", [
    lambda t: torch.histc(t, bins=7, min=-1.0, max=2.0),  # elements outside not counted
    lambda t: torch.histc(t, bins=5),  # the data's own range, the maximum in the last bin
    lambda t: torch.histc(t[:1, :1], bins=4),  # one value: [v - 1, v + 1]
    lambda t: torch.histc(t * 0.0 + 1.0, bins=3),  # equal values: [0, 2]
], ids=["range", "data", "widened", "equal"])
def test_histc(call):
    assert _no_gradient(call, _distinct(4, 5)) == ("pass", "")


def _no_gradient(fn, *args, **kwargs):
    """check_call of an op torch does not differentiate (histc, histogram)."""
    from types import SimpleNamespace

    return check_sample(SimpleNamespace(op=fn, supports_autograd=False),
                        SimpleNamespace(input=args[0], args=args[1:], kwargs=kwargs))


@pytest.mark.parametrize("kwargs", [
    {"bins": 6}, {"bins": 4, "range": (-1.0, 1.5)}, {"bins": 5, "density": True},
    {"bins": 3, "range": (-2.0, 0.0), "density": True}, {"bins": 12},
], ids=["data", "range", "density", "range-density", "many"])
def test_histogram_of_a_bin_count(kwargs):
    assert _no_gradient(lambda t: torch.histogram(t, **kwargs), _distinct(3, 7)) == \
        ("pass", "")


def test_histogram_with_weights_and_edges():
    x, w = _distinct(20), torch.linspace(0.1, 2.0, 20)
    edges = torch.tensor([-3.0, -1.0, 0.0, 0.5, 4.0])
    assert _no_gradient(lambda t, ww: torch.histogram(t, 4, weight=ww), x, w) == ("pass", "")
    assert _no_gradient(lambda t, e, ww: torch.histogram(t, e, weight=ww, density=True),
                        x, edges, w) == ("pass", "")


@pytest.mark.parametrize("dims", [2, 3])
def test_max_pool_backward_called_directly_differentiates_in_its_grad(dims):
    """The gradient called as an op, its own gradient taken with respect to grad_output (a
    parameter here) and the input (none: the indices carry no gradient)."""
    aten = torch.ops.aten
    pool = aten.max_pool2d_with_indices if dims == 2 else aten.max_pool3d_with_indices
    back = aten.max_pool2d_with_indices_backward if dims == 2 else \
        aten.max_pool3d_with_indices_backward
    k, s, p, d = [3] * dims, [2] * dims, [1] * dims, [1] * dims
    x = _distinct(2, 3, *([5] * dims))

    def call(g, t):
        _, idx = pool(t, k, s, p, d, True)
        return back(g, t, k, s, p, d, True, idx)

    g = _distinct(2, 3, *([3] * dims))
    assert check_call(call, g, x) == ("pass", "")


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_logcumsumexp_over_a_range_wider_than_exp_holds(dim):
    """Lines rising from -500 to 40: a max-shifted cumsum would underflow to -inf at their
    start; the scan of logaddexp keeps every value (and its gradient) torch's."""
    x = torch.linspace(-500.0, 40.0, 5 * 37).reshape(5, 37) + _distinct(5, 37)
    assert check_call(lambda t: torch.logcumsumexp(t, dim), x) == ("pass", "")


def test_logcumsumexp_of_a_line_of_one_and_a_scalar():
    assert check_call(lambda t: torch.logcumsumexp(t, 1), _distinct(3, 1)) == ("pass", "")
    assert check_call(lambda t: torch.logcumsumexp(t, 0), torch.tensor(2.0)) == ("pass", "")


@pytest.mark.parametrize("call,x", [
    # ties of count: the smallest value, at its last index
    (lambda t: torch.mode(t, 1), [[3.0, 1.0, 3.0, 1.0, 2.0, 1.0, 3.0],
                                  [5.0, 2.0, 2.0, 5.0, 7.0, 7.0, 0.0]]),
    (lambda t: torch.mode(t, 0, keepdim=True), [[3.0, 5.0], [1.0, 2.0], [3.0, 2.0], [1.0, 5.0]]),
    (lambda t: torch.mode(t, 1), [[1.0, NAN, NAN, 2.0]]),  # NaN: each its own run
    (lambda t: torch.mode(t), 3.0),
], ids=["ties", "dim0", "nan", "scalar"])
def test_mode_is_the_most_frequent_smallest_value_at_its_last_index(call, x):
    assert check_call(call, torch.tensor(x)) == ("pass", "")


@pytest.mark.parametrize("kwargs", [
    {"bins": [3, 4]}, {"bins": [2, 5], "range": [-2.0, 1.0, -3.0, 2.5]},
    {"bins": [4, 3], "density": True},
], ids=["data", "range", "density"])
def test_histogramdd_of_bin_counts(kwargs):
    assert _no_gradient(lambda t: torch.histogramdd(t, **kwargs), _distinct(6, 2, 2)) == \
        ("pass", "")


def test_histogramdd_with_edges_and_weights():
    x, w = _distinct(12, 3), torch.linspace(0.5, 2.0, 12)
    edges = [torch.tensor([-3.0, -1.0, 2.0]), torch.tensor([-2.0, 0.0, 1.0, 3.0]),
             torch.tensor([-4.0, 4.0])]
    assert _no_gradient(lambda t, a, b, c, ww: torch.histogramdd(t, [a, b, c], weight=ww,
                                                                  density=True),
                        x, *edges, w) == ("pass", "")
