"""The onnx node conformance cases (tests/importers/node_cases.py) through the generated CPU
executor: every case that passes on the reference and whose ops and dtypes the executor has
(in either harness mode, node_cases.outcome's static_ints) is merged into one inference graph
(names prefixed by the case), planned, built once and run once; each case's outputs are then
held to its expected ones (EXECUTOR_RTOL)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from codegen import support
from codegen.backends import RUNTIMES
from codegen.errors import UnsupportedError
from tests.codegen.helpers import build_module
from tests.codegen.merged_graph import merge
from tests.importers.node_cases import RTOL, Outcome, excess, float32_cases

# The executor's kernels are held to 1e-4 relative (as in test_onnx_conformance.py), the
# reference to 1e-5: vectorized transcendental functions are not correctly rounded (Log's
# kernel is 1.1e-5 off on test_log).
EXECUTOR_RTOL = 1e-4


def runnable(results: list[Outcome]) -> list[int]:
    """Positions of the cases that pass on the reference and that the CPU executor can run."""
    out = []
    for k, r in enumerate(results):
        if not r.passed:
            continue
        try:
            support.check(r.graph, RUNTIMES["cpu"])
        except UnsupportedError:
            continue
        out.append(k)
    return out


def executor_excess(results: list[Outcome], folder: Path) -> dict[int, float]:
    """Per runnable case (by position in `results`), its worst output's excess over the
    tolerance (<= 1 passes)."""
    cases = {k: results[k] for k in runnable(results)}
    expected = {c.name: c.outputs for c in float32_cases()}
    merged = merge("onnx_node_conformance", {f"c{k}/": r.graph for k, r in cases.items()})
    ex = build_module(merged, folder / "onnx_node_conformance").Executor()
    ex.load_params({f"c{k}/{n}": v for k, r in cases.items() for n, v in r.params.items()})
    out = ex.forward({f"c{k}/{n}": v for k, r in cases.items() for n, v in r.feeds.items()})
    worst = {}
    for k, r in cases.items():
        rtol = max(RTOL.get(r.case, 1e-5), EXECUTOR_RTOL)
        worst[k] = max(excess(np.asarray(out[f"c{k}/{o}"]), want, rtol)
                       for o, want in zip(r.graph.outputs, expected[r.case], strict=True))
    return worst
