"""PyTorch's OpInfos through every stage (issue 86): exported, imported, planned for this host,
built into the CPU executor and run forward and backward against torch in float64
(tests/helpers/opinfo_stages.py). Each OpInfo must stop at the stage, with the line,
tests/importers/opinfo_staged_expectations.json records for it (`make opinfo-staged` rewrites
it, or `python bench/opinfo_sweep.py --stages matches --write NAME ...` for a few), and
docs/opinfo-stages.md must be the page generated from that file.

A handful of OpInfos runs with the suite (a few families, one that stops before the executor),
merged into one package; the whole sweep is marked `opinfo_full`, a group of op_db per case.
The same of the complex64 sweep (tests/importers/opinfo_complex64_staged_expectations.json,
`make opinfo-complex64`): a handful of complex arithmetic and DFT OpInfos, their complex
tensors as planes, through every stage.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from planner.importers.opinfo_stages_page import (
    STAGES,
    load_expectations,
    opinfo_stages_page,
    staged_expectations,
)

DOC = Path(__file__).resolve().parents[2] / "docs" / "opinfo-stages.md"
EXPECTED = load_expectations()
COMPLEX = load_expectations(staged_expectations("complex64"))
DTYPES = {"float32": EXPECTED, "complex64": COMPLEX}

# One of a few families through every stage, in one package: an element-wise op, a reduction,
# a convolution, a small-matrix op, a random op (shapes compared), and one stopped before the
# executor (nonzero of a 0-d tensor: refused by the import).
HANDFUL = ("hypot", "sum", "nn.functional.conv2d", "linalg.inv", "normal", "nonzero")
# complex64: the arithmetic lowered to the planes (a product, a quotient, the scaled modulus),
# an elementary function (tanh: its derivative torch's formula), the DFT (c2c and the
# Hermitian c2r), a view, and one refused by the import (pow by a complex tensor).
HANDFUL_COMPLEX64 = ("mul", "div.no_rounding_mode", "abs", "tanh", "fft.fft", "fft.irfft",
                     "view_as_real", "pow")


def _check(names, dtype: str = "float32") -> None:
    from tests.helpers.opinfo_stages import stage_group

    got = {s.name: s.expectation for s in stage_group(list(names), dtype=dtype)}
    want = {n: DTYPES[dtype][n][1:] for n in names}
    assert got == want, (
        f"OpInfos stop elsewhere than the {dtype} staged expectations say (if this is "
        f"progress, rewrite the rows: python bench/opinfo_sweep.py --dtype {dtype} --stages "
        "matches --write NAME ...)")


@pytest.mark.ci_sample
def test_a_handful_of_opinfos_through_every_stage():
    pytest.importorskip("torch")
    pytest.importorskip("expecttest")
    assert {EXPECTED[n][1] for n in HANDFUL} == {"matches", "exportable"}
    _check(HANDFUL)


@pytest.mark.ci_sample
def test_a_handful_of_complex64_opinfos_through_every_stage():
    pytest.importorskip("torch")
    pytest.importorskip("expecttest")
    assert {COMPLEX[n][1] for n in HANDFUL_COMPLEX64} == {"matches", "exportable"}
    _check(HANDFUL_COMPLEX64, "complex64")


def test_an_opinfo_of_no_ops_alone_runs_beside_the_carrier():
    """clone's import has no ops (its output is its parameter): planned alone, it is planned
    beside a one-Relu part, and its values (and the carrier's) come back from the executor."""
    pytest.importorskip("torch")
    pytest.importorskip("expecttest")
    assert EXPECTED["clone"][1] == "matches"
    _check(["clone"])


def test_the_executors_values_are_what_is_compared():
    """The executor sample of abs matches torch; fed other parameters (moved by 1) than
    torch's, the same package's run is off by about 1 and said to be."""
    pytest.importorskip("torch")
    pytest.importorskip("expecttest")
    import dataclasses

    from tests.codegen.merged_graph import merge
    from tests.helpers.opinfo_stages import built, executor_sample, host_plan, mismatches
    from tests.importers.opinfo_cases import by_name

    early, (k, run) = executor_sample(by_name()["abs"], "abs", "elementwise")
    assert early is None and k == 0
    package = built(host_plan(merge("opinfo", {"": run.graph})))
    assert mismatches(package, {"": run}) == {}
    moved = dataclasses.replace(run, params={n: v + 1 for n, v in run.params.items()})
    line = mismatches(package, {"": moved})[""]
    assert line.startswith(tuple(run.torch)) and float(line.split("error ")[1].split(",")[0]) \
        == pytest.approx(1.0, abs=1e-5), line


def _groups() -> list[tuple[str, list[str]]]:
    """The sweeps' groups (opinfo_stages.groups, from the expectations' names: no torch at
    collection), so that each case finds the sweep's package in the host's cache."""
    from tests.helpers.opinfo_stages import GROUP

    return [(dtype, names[k:k + GROUP]) for dtype, rows in DTYPES.items()
            for names in [sorted(rows)] for k in range(0, len(names), GROUP)]


@pytest.mark.opinfo_full
@pytest.mark.parametrize("dtype_group", _groups(), ids=lambda g: f"{g[0]}-{g[1][0]}")
def test_opinfo_staged_full_sweep(dtype_group):
    pytest.importorskip("torch")
    pytest.importorskip("expecttest")
    dtype, group = dtype_group
    _check(group, dtype)


def test_the_stages_page_is_current():
    assert DOC.read_text(encoding="utf-8") == opinfo_stages_page(), (
        "docs/opinfo-stages.md is stale: run python -m planner.importers.opinfo_stages_page "
        "-o docs/opinfo-stages.md")


@pytest.mark.parametrize("dtype", DTYPES)
def test_the_expectations_name_every_opinfo_at_a_stage(dtype):
    pytest.importorskip("torch")
    pytest.importorskip("expecttest")
    from tests.importers.opinfo_cases import expectations_path
    from tests.importers.opinfo_cases import load_expectations as reference

    assert DTYPES[dtype] and sorted(DTYPES[dtype]) == sorted(
        reference(expectations_path("sample", dtype))), (
        f"op_db's {dtype} OpInfos and the {dtype} staged expectations differ: run make "
        + ("opinfo-staged" if dtype == "float32" else "opinfo-complex64"))
    assert all(row[1] in STAGES and (row[1] == "matches") == (row[2] == "")
               for row in DTYPES[dtype].values())


# Silently wrong or crashing OpInfos past the reference stage, known and not yet fixed, with
# why: the acceptance is none. A new one, or one fixed, fails the test below.
KNOWN_OFF: dict[str, str] = {}


@pytest.mark.parametrize("dtype", DTYPES)
def test_nothing_past_the_reference_stage_is_silently_wrong_or_crashes(dtype):
    off = {n: row[2] for n, row in DTYPES[dtype].items()
           if STAGES.index(row[1]) >= STAGES.index("imported")
           and row[2].startswith(("wrong:", "crash:"))}
    assert off == KNOWN_OFF


@pytest.mark.parametrize("dtype", DTYPES)
def test_the_stages_agree_with_the_reference_stage(dtype):
    """An OpInfo passes the reference stage (tests/importers/opinfo_expectations.json, or
    complex64's) when its executor sample was found: it reached `imported` (whose sample is
    the first to pass), unless a sample passes that the reference run did not find (none
    can)."""
    import json

    from planner.importers.opinfo_stages_page import EXPECTATIONS_DIR

    file = "opinfo_expectations.json" if dtype == "float32" else \
        f"opinfo_{dtype}_expectations.json"
    reference = json.loads((EXPECTATIONS_DIR / file).read_text(encoding="utf-8"))
    for name, (_, stage, _) in DTYPES[dtype].items():
        exported = reference[name][1] != "export"
        assert (stage != "op_db") == exported, name
        if reference[name][1] == "pass":
            assert STAGES.index(stage) >= STAGES.index("imported"), name
