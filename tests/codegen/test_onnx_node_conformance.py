"""The onnx node conformance cases (float32) through the generated CPU executor: every case
that passes on the reference and whose ops the executor has must pass there too."""

from __future__ import annotations

import pytest

from tests.codegen.node_executor import executor_excess, runnable
from tests.importers.node_cases import float32_cases, outcome, summary


@pytest.fixture(scope="module")
def results():
    return [outcome(c) for c in float32_cases()]


def test_executor_matches_every_case_it_runs(results, tmp_path_factory, capsys):
    worst = executor_excess(results, tmp_path_factory.mktemp("onnx_node"))
    failed = sorted(f"{case}: {w:.3g}x" for case, w in worst.items() if not w <= 1.0)
    counts = summary(results)
    with capsys.disabled():
        print(f"\nONNX node conformance (float32): {counts['cases']} cases, {counts['imported']} "
              f"import, {counts['reference']} pass on the reference, {len(worst)} run through "
              f"the executor, {len(worst) - len(failed)} pass there")
    assert len(runnable(results)) >= 100
    assert failed == []
