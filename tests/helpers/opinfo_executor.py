"""The OpInfo suite's passing samples on the generated CPU executor, merged into one graph
(tests/codegen/test_opinfo_executor*.py)."""

from __future__ import annotations

from codegen import support
from codegen.backends import RUNTIMES
from codegen.errors import UnsupportedError
from tests.codegen.merged_graph import executor_mismatches
from tests.importers.opinfo_cases import by_name, check_opinfo


def runnable(graph) -> bool:
    try:
        support.check(graph, RUNTIMES["cpu"])
    except UnsupportedError:
        return False
    return True


def check_on_cpu(names, tmp_path, min_runs: int) -> None:
    """Every passing sample of the OpInfos `names` that the CPU runtime runs, merged into one
    graph, built and run once, each output and gradient held to torch's float64 value."""
    ops = by_name()
    runs = []
    for name in names:
        mine: list = []
        check_opinfo(ops[name], runs=mine)
        runs += [(f"{name} sample {k}", r) for k, r in enumerate(mine) if runnable(r.graph)]
    assert len(runs) >= min_runs, f"only {len(runs)} samples the CPU executor can run"
    assert executor_mismatches("opinfo_executor", runs, tmp_path) == []
