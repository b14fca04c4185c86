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

The complex64 sweep (issue 86: the OpInfos supporting complex64, their samples in complex64,
complex tensors as planes; opinfo_cases' module docstring) has its own files,
opinfo_complex64_expectations.json and opinfo_complex64_reference_expectations.json (`make
opinfo-complex64`); the complex arithmetic and the DFT family, and one OpInfo of each other
family, run with the suite.
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
    expectations_path,
    fast_subset,
    load_expectations,
)

EXPECTED = load_expectations()
FAST = fast_subset(EXPECTED)
REFERENCE = load_expectations(REFERENCE_EXPECTATIONS)
# 4 a family: each runs up to 8 held-out samples
REFERENCE_FAST = fast_subset({n: e for n, e in REFERENCE.items() if e.outcome != "none"}, 2)


COMPLEX = load_expectations(expectations_path("sample", "complex64"))
COMPLEX_REFERENCE = load_expectations(expectations_path("reference", "complex64"))
# The complex arithmetic and the DFT family's (with the suite), and one of every other family
COMPLEX_ARITHMETIC = ("mul", "div.no_rounding_mode", "add", "sub", "conj", "conj_physical",
                      "abs", "angle", "real", "imag", "view_as_real", "sgn", "exp", "matmul")
COMPLEX_FAST = sorted(set(COMPLEX_ARITHMETIC) | {n for n, e in COMPLEX.items()
                                                 if e.family == "fft"}
                      | set(fast_subset(COMPLEX, 1)))
COMPLEX_REFERENCE_FAST = [n for n in ("mul", "div.no_rounding_mode", "abs", "angle",
                                      "fft.fft", "fft.irfft") if n in COMPLEX_REFERENCE]


@functools.cache
def _ops(dtype: str = "float32") -> dict:
    return by_name(dtype)


def _check(name: str, inputs: str = "sample", dtype: str = "float32") -> None:
    outcome = check_opinfo(_ops(dtype)[name], inputs=inputs, dtype=dtype)
    want = load_expectations(expectations_path(inputs, dtype))[name].outcome
    assert outcome.expectation == want, (
        f"{name} ({dtype}, {inputs} inputs): expected {want!r}, got {outcome.status}: "
        f"{outcome.detail!r} (if this is progress, rewrite the expectation: python "
        f"bench/opinfo_sweep.py --dtype {dtype} --inputs {inputs} --write {name})")


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


# The same of the complex64 sweep, on either input set.
KNOWN_OFF_COMPLEX64: dict[str, str] = {}


@pytest.mark.parametrize(("dtype", "inputs", "known"), [
    ("float32", "sample", KNOWN_OFF), ("float32", "reference", KNOWN_OFF_REFERENCE),
    ("complex64", "sample", KNOWN_OFF_COMPLEX64),
    ("complex64", "reference", KNOWN_OFF_COMPLEX64)])
def test_every_refusal_is_one_line_and_nothing_else_is_silently_wrong_or_crashes(dtype, inputs,
                                                                                 known):
    rows = load_expectations(expectations_path(inputs, dtype))
    lines = {n: e.outcome for n, e in rows.items()}
    assert lines and all("\n" not in v and v for v in lines.values())
    bad = {n: v for n, v in lines.items() if v.startswith(("wrong:", "crash:"))}
    assert bad == known


@pytest.mark.parametrize("name", COMPLEX_FAST)
def test_opinfo_complex64_fast_subset(name):
    _check(name, dtype="complex64")


@pytest.mark.parametrize("name", COMPLEX_REFERENCE_FAST)
def test_opinfo_complex64_reference_inputs_fast_subset(name):
    _check(name, "reference", "complex64")


@pytest.mark.opinfo_full
@pytest.mark.parametrize("name", sorted(set(COMPLEX) - set(COMPLEX_FAST)))
def test_opinfo_complex64_full_sweep(name):
    _check(name, dtype="complex64")


@pytest.mark.opinfo_full
@pytest.mark.parametrize("name", sorted(set(COMPLEX_REFERENCE) - set(COMPLEX_REFERENCE_FAST)))
def test_opinfo_complex64_reference_inputs_full_sweep(name):
    _check(name, "reference", "complex64")


def test_the_complex64_expectations_name_every_complex64_opinfo_of_op_db():
    assert sorted(_ops("complex64")) == sorted(COMPLEX) == sorted(COMPLEX_REFERENCE), (
        "op_db's complex64 OpInfos and the complex64 expectations files differ: run make "
        "opinfo-complex64")
    assert set(COMPLEX_ARITHMETIC) <= set(COMPLEX)
