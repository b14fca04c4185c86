"""The OpInfo suite's passing samples through the generated CPU executor (issue 46,
deliverable 5): every passing sample of the fast subset's OpInfos (tests/importers/
opinfo_cases.py: forward and the vector-Jacobian product of its parameters) whose ops the CPU
runtime has is merged into one graph, built once and run once; each output and gradient is held
to torch's float64 value by the suite's rule (10 x torch's float32 noise plus a floor of the
tensor's scale), the floor 1e-4 of the scale here as for the ONNX cases on the executor
(tests/codegen/node_executor.py: vectorised transcendental functions are not correctly
rounded)."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("expecttest")

from codegen import support  # noqa: E402
from codegen.backends import RUNTIMES  # noqa: E402
from codegen.errors import UnsupportedError  # noqa: E402
from tests.codegen.merged_graph import executor_mismatches  # noqa: E402
from tests.importers.opinfo_cases import (  # noqa: E402
    by_name,
    check_opinfo,
    fast_subset,
    load_expectations,
)

MIN_RUNS = 40  # the fast subset's passing samples the CPU runtime has ops for, at least


def _runnable(graph) -> bool:
    try:
        support.check(graph, RUNTIMES["cpu"])
    except UnsupportedError:
        return False
    return True


def test_fast_subset_passing_samples_on_the_cpu_executor(tmp_path):
    expected = load_expectations()
    ops = by_name()
    runs = []
    for name in fast_subset(expected):
        if expected[name].outcome != "pass":
            continue
        mine: list = []
        check_opinfo(ops[name], runs=mine)
        runs += [(f"{name} sample {k}", r) for k, r in enumerate(mine) if _runnable(r.graph)]
    assert len(runs) >= MIN_RUNS, f"only {len(runs)} samples the CPU executor can run"
    assert executor_mismatches("opinfo_executor", runs, tmp_path) == []
