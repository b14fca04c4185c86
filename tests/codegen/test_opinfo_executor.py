"""The OpInfo suite's passing samples through the generated CPU executor (issue 46,
deliverable 5): every passing sample of the fast subset's OpInfos (tests/importers/
opinfo_cases.py: forward and the vector-Jacobian product of its parameters) whose ops the CPU
runtime has is merged into one graph, built once and run once; each output and gradient is held
to torch's float64 value by the suite's rule (10 x torch's float32 noise plus a floor of the
tensor's scale), the floor 1e-4 of the scale here as for the ONNX cases on the executor
(tests/codegen/node_executor.py: vectorised transcendental functions are not correctly
rounded)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("expecttest")

from codegen import support  # noqa: E402
from codegen.backends import RUNTIMES  # noqa: E402
from codegen.errors import UnsupportedError  # noqa: E402
from tests.codegen.helpers import build_module  # noqa: E402
from tests.codegen.merged_graph import merge  # noqa: E402
from tests.importers.opinfo_cases import (  # noqa: E402
    EPS32,
    by_name,
    check_opinfo,
    compare,
    fast_subset,
    load_expectations,
)

EXECUTOR_ULPS = 1e-4 / EPS32
MIN_RUNS = 40  # the fast subset's passing samples the CPU runtime has ops for, at least


def _runnable(graph) -> bool:
    try:
        support.check(graph, RUNTIMES["cpu"])
    except UnsupportedError:
        return False
    return True


def passing_samples_on_the_cpu_executor(names, folder) -> tuple[int, list[str]]:
    """The passing samples of OpInfos `names` the CPU runtime has ops for, merged, built under
    `folder` and run once: (how many, the mismatches)."""
    ops = by_name()
    runs = []
    for name in names:
        mine: list = []
        check_opinfo(ops[name], runs=mine)
        runs += [(f"{name} sample {k}", r) for k, r in enumerate(mine) if _runnable(r.graph)]
    if not runs:
        return 0, []
    merged = merge("opinfo_executor", {f"s{k}/": r.graph for k, (_, r) in enumerate(runs)})
    executor = build_module(merged, folder).Executor()
    executor.load_params({f"s{k}/{n}": v for k, (_, r) in enumerate(runs)
                          for n, v in r.params.items()})
    # a cotangent no gradient reads (max_pool's gradient called on a constant) is no input
    feeds = {f"s{k}/{n}": v for k, (_, r) in enumerate(runs) for n, v in r.feeds.items()}
    out = executor.forward({n: v for n, v in feeds.items() if merged.consumers.get(n)})
    bad = [compare(f"{label}: {tensor}", np.asarray(out[f"s{k}/{tensor}"]), t32, t64,
                   ulps=EXECUTOR_ULPS)
           for k, (label, r) in enumerate(runs) for tensor, (t32, t64) in r.torch.items()]
    return len(runs), [b for b in bad if b]


def test_fast_subset_passing_samples_on_the_cpu_executor(tmp_path):
    expected = load_expectations()
    names = [n for n in fast_subset(expected) if expected[n].outcome == "pass"]
    count, bad = passing_samples_on_the_cpu_executor(names, tmp_path / "opinfo_executor")
    assert count >= MIN_RUNS, f"only {count} samples the CPU executor can run"
    assert bad == []
