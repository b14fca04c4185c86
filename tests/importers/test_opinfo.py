"""The OpInfo conformance suite (issue 46): each OpInfo of PyTorch's op_db, exported,
imported and run forward and backward on the reference interpreter against torch in float64
(tests/importers/opinfo_cases.py), must give the outcome tests/importers/opinfo_expectations.json
records for it: "pass", "export" (torch.export fails), or its one-line refusal. An op that
starts failing fails here, and so does a refusal that starts passing (update the file:
`make opinfo`, or `python bench/opinfo_sweep.py --write NAME ...` for a few).

A fixed, family-balanced subset (opinfo_cases.fast_subset) runs with the suite; the whole
sweep is marked `opinfo_full`, which runs only when asked for (`-m opinfo_full`).

The same holds for each OpInfo's held-out reference inputs (up to 8 of its `reference_inputs`
past the ones equal to its sample inputs: exact zeros, ties, extremal values), whose outcomes
tests/importers/opinfo_reference_expectations.json records ("none": no held-out inputs).
"""

from __future__ import annotations

import functools

import pytest

pytest.importorskip("torch")
# op_db's module needs expecttest (the dev extra): without it the suite is skipped, not failed.
pytest.importorskip("expecttest")

from tests.importers.opinfo_cases import (  # noqa: E402
    REFERENCE_EXPECTATIONS,
    by_name,
    check_opinfo,
    fast_subset,
    load_expectations,
)

EXPECTED = load_expectations()
FAST = fast_subset(EXPECTED)
REFERENCE = load_expectations(REFERENCE_EXPECTATIONS)
# 4 a family: each runs up to 8 held-out samples
REFERENCE_FAST = fast_subset({n: e for n, e in REFERENCE.items() if e.outcome != "none"}, 2)


@functools.cache
def _ops() -> dict:
    return by_name()


def _check(name: str, inputs: str = "sample") -> None:
    outcome = check_opinfo(_ops()[name], inputs=inputs)
    want = (EXPECTED if inputs == "sample" else REFERENCE)[name].outcome
    assert outcome.expectation == want, (
        f"{name} ({inputs} inputs): expected {want!r}, got {outcome.status}: "
        f"{outcome.detail!r} (if this is progress, rewrite the expectation: python "
        f"bench/opinfo_sweep.py --inputs {inputs} --write {name})")


@pytest.mark.ci_sample
@pytest.mark.parametrize("name", FAST)
def test_opinfo_fast_subset(name):
    _check(name)


@pytest.mark.opinfo_full
@pytest.mark.parametrize("name", sorted(set(EXPECTED) - set(FAST)))
def test_opinfo_full_sweep(name):
    _check(name)


@pytest.mark.parametrize("name", REFERENCE_FAST)
def test_opinfo_reference_inputs_fast_subset(name):
    _check(name, "reference")


@pytest.mark.opinfo_full
@pytest.mark.parametrize("name", sorted(set(REFERENCE) - set(REFERENCE_FAST)))
def test_opinfo_reference_inputs_full_sweep(name):
    _check(name, "reference")


def test_expectations_name_every_float32_opinfo_of_op_db():
    assert sorted(_ops()) == sorted(EXPECTED) == sorted(REFERENCE), (
        "op_db's float32 OpInfos and the expectations files differ: run make opinfo")
    assert len(FAST) >= 60 and len({EXPECTED[n].family for n in FAST}) == \
        len({e.family for e in EXPECTED.values()})


# Silently wrong or crashing OpInfos known and not yet fixed, with why: the acceptance
# is none. A new one, or one fixed, fails the test below (then edit this table). (Where torch's
# own suite marks torch's backward wrong, as_strided_scatter's, the harness takes the finite
# difference as the reference too: opinfo_cases._autograd_known_wrong.)
KNOWN_OFF: dict[str, str] = {}


# The same on the held-out reference inputs.
KNOWN_OFF_REFERENCE: dict[str, str] = {}


@pytest.mark.parametrize("inputs", ["sample", "reference"])
def test_every_refusal_is_one_line_and_nothing_else_is_silently_wrong_or_crashes(inputs):
    rows = EXPECTED if inputs == "sample" else REFERENCE
    lines = {n: e.outcome for n, e in rows.items()}
    assert all("\n" not in v and v for v in lines.values())
    bad = {n: v for n, v in lines.items() if v.startswith(("wrong:", "crash:"))}
    assert bad == (KNOWN_OFF if inputs == "sample" else KNOWN_OFF_REFERENCE)
