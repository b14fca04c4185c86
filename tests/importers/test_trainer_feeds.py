"""The trainer's feeds as the executor takes them (planner/torch/training.py, _numpy): the
feed's dtype and C order, a 0-d array kept 0-d (numpy's ascontiguousarray makes it [1]), and a
cast that would change a label refused in one line naming the feed (PyTorch refuses the dtype;
the cast would train on other labels)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from planner.torch.training import _numpy  # noqa: E402


def test_a_0d_feed_stays_0d():
    for v in (torch.tensor(0.5), np.float32(0.5), 0.5, np.array(3)):
        a = _numpy(v, "float32", "x")
        assert a.shape == () and a.dtype == np.float32 and a.flags.c_contiguous


def test_strided_feeds_are_made_c_contiguous():
    a = _numpy(torch.arange(6.0).reshape(2, 3).t(), "float32", "x")
    assert a.flags.c_contiguous and a.tolist() == [[0, 3], [1, 4], [2, 5]]


@pytest.mark.parametrize("value, dtype, held", [
    (torch.tensor([0.0, 1.0]), "int64", [0, 1]),          # integral floats: the same labels
    (np.array([1.5e300]), "float32", [np.inf]),            # float to float: rounding, as torch
    (np.array([2**31 - 1], np.int64), "int32", [2**31 - 1]),
    (np.array([0, 1]), "bool", [False, True]),
])
def test_casts_that_keep_every_value_pass(value, dtype, held):
    assert _numpy(value, dtype, "y").tolist() == held


@pytest.mark.parametrize("value, dtype, shown", [
    (torch.tensor([0.5, 1.0]), "int64", "0.5"),
    (np.array([np.nan]), "int64", "nan"),
    (np.array([2**40]), "int32", "1099511627776"),
    (np.array([-1]), "uint8", "-1"),
    (np.array([2]), "bool", "2"),
])
def test_casts_that_change_a_label_are_refused_naming_the_feed(value, dtype, shown):
    with pytest.raises(ValueError, match=rf"^feed 'labels' holds {shown} \(\w+\), which "
                                         rf"{dtype} cannot hold; the trainer's feed is {dtype}"):
        _numpy(value, dtype, "labels")
