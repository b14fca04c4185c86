"""The onnx package's PyTorch-exported conformance cases through import -> plan -> build -> run.

Every case whose ops and dtypes the CPU executor supports is imported, and all of them are
merged into one inference graph (names prefixed by the case), so one plan and one build cover
them; each case's outputs are then checked against its stored outputs. Cases outside the
executor's ops or dtypes are reported as skipped with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np
import onnx
import pytest

from codegen import support
from codegen.backends import RUNTIMES
from codegen.errors import UnsupportedError
from planner.graph import check_graph
from planner.importers import OnnxImportError, import_onnx
from planner.ir.graph import Graph
from tests.codegen.helpers import build_module
from tests.codegen.merged_graph import merge
from tests.importers.pytorch_cases import CASE_DIRS, load_tensor

RTOL = 1e-4


@dataclass(frozen=True)
class Case:
    name: str
    graph: Graph | None = None
    params: tuple = ()
    feeds: tuple = ()
    expected: tuple = ()
    skipped: str = ""


@cache
def case(index: int) -> Case:
    d = CASE_DIRS[index]
    model = onnx.load(str(d / "model.onnx"))
    try:
        imported = import_onnx(model)
    except OnnxImportError as e:
        return Case(d.name, skipped=f"import: {e}".splitlines()[0])
    graph = check_graph(imported.graph)
    try:
        support.check(graph, RUNTIMES["cpu"])
    except UnsupportedError as e:
        return Case(d.name, skipped=str(e).split(";")[0])
    data = d / "test_data_set_0"
    initializers = {t.name for t in model.graph.initializer}
    names = [i.name for i in model.graph.input if i.name not in initializers]
    feeds = tuple((n, load_tensor(data / f"input_{k}.pb")) for k, n in enumerate(names))
    expected = tuple(load_tensor(data / f"output_{k}.pb") for k in range(len(model.graph.output)))
    return Case(d.name, graph, tuple(imported.params().items()), feeds, expected)


def runnable() -> list[int]:
    return [k for k in range(len(CASE_DIRS)) if not case(k).skipped]


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict[int, dict[str, np.ndarray]]:
    """Every runnable case's outputs from one executor of their merged graph."""
    merged = merge("onnx_conformance", {f"c{k}/": case(k).graph for k in runnable()})
    module = build_module(merged, tmp_path_factory.mktemp("onnx") / "onnx_conformance")
    ex = module.Executor()
    ex.load_params({f"c{k}/{n}": v for k in runnable() for n, v in case(k).params})
    out = ex.forward({f"c{k}/{n}": v for k in runnable() for n, v in case(k).feeds})
    return {k: {o: out[f"c{k}/{o}"] for o in case(k).graph.outputs} for k in runnable()}


def excess(got: np.ndarray, want: np.ndarray) -> float:
    """max |got - want| / (RTOL |want| + atol), atol 1e-5 of the output's scale: <= 1 passes.
    NaN and infinities must sit where the stored output has them (sqrt or pow of a negative)."""
    if want.dtype.kind != "f":
        return 0.0 if np.array_equal(got, want) else np.inf
    special = ~np.isfinite(want)
    if not np.array_equal(got[special], want[special], equal_nan=True):
        return np.inf
    g, w = got[~special].astype(np.float64), want[~special].astype(np.float64)
    atol = 1e-5 * max(1.0, float(np.abs(w).max(initial=0.0)))
    return float(np.max(np.abs(g - w) / (RTOL * np.abs(w) + atol), initial=0.0))


@pytest.mark.parametrize("index", range(len(CASE_DIRS)), ids=[p.name for p in CASE_DIRS])
def test_case_runs_in_the_generated_executor(index, results):
    c = case(index)
    if c.skipped:
        pytest.skip(c.skipped)
    for name, want in zip(c.graph.outputs, c.expected, strict=True):
        got = results[index][name]
        assert got.shape == want.shape, f"{c.name}: {name} shape {got.shape} != {want.shape}"
        assert excess(got, want) <= 1.0, f"{c.name}: {name} off by {excess(got, want):.2f}x"


def test_most_cases_run():
    assert len(runnable()) >= 70
