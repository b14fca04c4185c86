"""Every convention of planner/ops/kinks.py at its breakpoints on the compiled CPU executor:
each entry's forward-and-backward graph (tests/helpers/kink_cases.py, the interpreter's run
of it held to torch.autograd there) merged into one graph, built once and run once, each output
and gradient held to torch's float64 value (tests/codegen/merged_graph.executor_mismatches)."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from planner.ops.kinks import KINKS  # noqa: E402
from tests.codegen.merged_graph import executor_mismatches  # noqa: E402
from tests.helpers.kink_cases import check_kink  # noqa: E402
from tests.helpers.opinfo_executor import runnable  # noqa: E402

# entries the CPU runtime has no kernels for, with why (the interpreter's test holds them):
# none since float64 Pow (float_power) runs there
NOT_ON_CPU: dict[str, str] = {}


def test_every_convention_on_the_cpu_executor(tmp_path):
    runs, skipped = [], []
    for kink in KINKS:
        mine: list = []
        assert check_kink(kink, runs=mine) == ("pass", ""), kink.name
        for r in mine:
            (runs if runnable(r.graph) else skipped).append((kink.name, r))
    # every other entry runs on the CPU executor
    assert sorted({name for name, _ in skipped}) == sorted(NOT_ON_CPU)
    assert executor_mismatches("kinks", runs, tmp_path) == []
