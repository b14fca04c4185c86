"""Empty tensors (issue 86): every OpInfo sample holding a 0-sized tensor (a batch of 0, an
empty axis scanned, reduced or pooled) imports and runs forward and backward on the reference
interpreter to torch's empty results and gradients (tests/importers/opinfo_cases.py's check),
or is refused in one line: never a crash (an IndexError of a reference, a shape rule asking for
positive sizes) and never a wrong value.

The property holds over op_db: its fast part runs the OpInfos named by the issue and the suite's
family-balanced subset, the whole sweep is marked `opinfo_full` (`-m opinfo_full`).
"""

from __future__ import annotations

import functools

import pytest

pytest.importorskip("torch")
pytest.importorskip("expecttest")

from tests.importers.opinfo_cases import (  # noqa: E402
    _seeded,
    _Skip,
    by_name,
    check_sample,
    fast_subset,
    load_expectations,
    pytree_leaves,
)

SAMPLES = 3  # empty samples checked per OpInfo, at most
# the issue's: cumprod's backward of a (0,) tensor, masked.cumprod of (5, 0, 0), avg_pool1d of
# a batch of 0; and the families whose gradients were written for positive sizes
NAMED = ("cumprod", "masked.cumprod", "nn.functional.avg_pool1d", "nn.functional.avg_pool2d",
         "nn.functional.max_pool1d", "nn.functional.max_pool3d", "nn.functional.conv2d",
         "nn.functional.group_norm", "nn.functional.adaptive_max_pool2d", "cumsum",
         "logcumsumexp", "masked.cumsum", "native_group_norm", "nonzero_static")
EXPECTED = load_expectations()
FAST = sorted(set(NAMED) | set(fast_subset(EXPECTED)))


@functools.cache
def _ops() -> dict:
    return by_name()


def _empty_samples(name: str) -> list:
    import torch

    out = []
    for s in _seeded(_ops()[name]):
        if any(isinstance(v, torch.Tensor) and v.numel() == 0
               for v in pytree_leaves((s.input, s.args, s.kwargs))):
            out.append(s)
            if len(out) == SAMPLES:
                break
    return out


def _check(name: str) -> None:
    samples = _empty_samples(name)
    if not samples:
        return  # the OpInfo has no empty sample: nothing to hold
    for k, sample in enumerate(samples):
        try:
            status, detail = check_sample(_ops()[name], sample, seed=k)
        except _Skip:
            continue  # torch cannot export it
        assert status in ("pass", "refused") and "\n" not in detail, (
            f"{name}, empty sample {k}: {status}: {detail}")


@pytest.mark.ci_sample
@pytest.mark.parametrize("name", FAST)
def test_empty_samples_match_torch_or_are_refused(name):
    _check(name)


def test_the_issues_empty_cases_match_torch():
    """The three cases the issue names pass outright (not refused)."""
    for name in ("cumprod", "masked.cumprod", "nn.functional.avg_pool1d"):
        samples = _empty_samples(name)
        assert samples, name
        for k, sample in enumerate(samples):
            assert check_sample(_ops()[name], sample, seed=k) == ("pass", ""), (name, k)


@pytest.mark.opinfo_full
@pytest.mark.parametrize("name", sorted(set(EXPECTED) - set(FAST)))
def test_empty_samples_of_every_opinfo(name):
    _check(name)
