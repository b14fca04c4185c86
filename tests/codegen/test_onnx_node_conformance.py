"""The onnx node conformance cases (float32) through the generated CPU executor: every case
that passes on the reference and whose ops the executor has must pass there too (as the cases
are, and with their small integer inputs made constants: node_cases.outcome)."""

from __future__ import annotations

import pytest

from tests.codegen.node_executor import executor_excess
from tests.importers.node_cases import float32_cases, outcome


@pytest.fixture(scope="module")
def results():
    return [outcome(c, static) for static in (False, True) for c in float32_cases()]


def test_executor_matches_every_case_it_runs(results, tmp_path_factory, capsys):
    worst = executor_excess(results, tmp_path_factory.mktemp("onnx_node"))
    half = len(results) // 2
    failed = sorted(f"{results[k].case}{' (static ints)' if k >= half else ''}: {w:.3g}x"
                    for k, w in worst.items() if not w <= 1.0)
    ran = [sum(1 for k in worst if (k >= half) == static) for static in (False, True)]
    with capsys.disabled():
        print(f"\nONNX node conformance (float32) through the executor: {ran[0]} cases run "
              f"({ran[1]} with small integer inputs as constants), {len(failed)} fail")
    assert ran[0] >= 150 and ran[1] >= ran[0]
    assert failed == []
