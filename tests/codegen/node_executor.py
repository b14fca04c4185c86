"""The onnx node conformance cases (tests/importers/node_cases.py) through the generated CPU
executor: every case that passes on the reference and whose ops and dtypes the executor has is
merged into one inference graph (names prefixed by the case), planned, built once and run once;
each case's outputs are then held to its expected ones with the reference's tolerance."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from codegen import support
from codegen.errors import UnsupportedError
from planner.graph import check_graph
from planner.graph.ir import Graph
from tests.codegen.helpers import build_module
from tests.codegen.test_onnx_conformance import prefixed
from tests.importers.node_cases import RTOL, Outcome, excess, float32_cases


def runnable(results: list[Outcome]) -> list[Outcome]:
    """The cases that pass on the reference and that the CPU executor can run."""
    out = []
    for r in results:
        if not r.passed:
            continue
        try:
            support.check(r.graph)
        except UnsupportedError:
            continue
        out.append(r)
    return out


def executor_excess(results: list[Outcome], folder: Path) -> dict[str, float]:
    """Per runnable case, its worst output's excess over the tolerance (<= 1 passes)."""
    cases = runnable(results)
    expected = {c.name: c.outputs for c in float32_cases()}
    parts = [prefixed(f"c{k}/", r.graph) for k, r in enumerate(cases)]
    merged = check_graph(Graph(name="onnx_node_conformance", kind="inference",
                               tensors=tuple(t for g in parts for t in g.tensors),
                               nodes=tuple(n for g in parts for n in g.nodes),
                               outputs=tuple(o for g in parts for o in g.outputs)))
    ex = build_module(merged, folder / "onnx_node_conformance").Executor()
    ex.load_params({f"c{k}/{n}": v for k, r in enumerate(cases) for n, v in r.params.items()})
    out = ex.forward({f"c{k}/{n}": v for k, r in enumerate(cases) for n, v in r.feeds.items()})
    worst = {}
    for k, r in enumerate(cases):
        rtol = RTOL.get(r.case, 1e-5)
        worst[r.case] = max(excess(np.asarray(out[f"c{k}/{o}"]), want, rtol)
                            for o, want in zip(r.graph.outputs, expected[r.case], strict=True))
    return worst
