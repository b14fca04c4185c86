"""Conformance: the onnx package's PyTorch-exported cases (backend/test/data/pytorch-converted and
pytorch-operator). Every case whose ops the importer supports is imported, run through the
planner's reference interpreter with the initializers as params, and compared with the stored
outputs. A case is skipped only when the import reports unsupported ops, and those must be the
ones the planner knowingly lacks; any other import error or a wrong output fails.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np
import onnx
import pytest

from planner.graph import check_graph
from planner.graph.interpret import run
from planner.importers import OnnxImportError, import_onnx
from tests.importers.node_cases import excess
from tests.importers.pytorch_cases import CASE_DIRS, load_tensor

# What the planner does not have, by design or not yet: 3-D convolutions and pools, and
# InstanceNormalization.
KNOWN_UNSUPPORTED = {"Conv (3-D)", "MaxPool (3-D)", "AveragePool (3-D)", "InstanceNormalization"}


@dataclass(frozen=True)
class Outcome:
    case: str
    unsupported: tuple[str, ...] = ()  # non-empty: skipped
    worst: float = 0.0                 # largest |got - want| / (rtol |want| + atol)


@cache
def outcome(case_dir: Path) -> Outcome:
    model = onnx.load(str(case_dir / "model.onnx"))
    try:
        imported = import_onnx(model)
    except OnnxImportError as e:
        if not e.unsupported:
            raise
        return Outcome(case_dir.name, unsupported=tuple(sorted(e.unsupported)))
    graph = check_graph(imported.graph)
    data = case_dir / "test_data_set_0"
    initializers = {t.name for t in model.graph.initializer}
    names = [i.name for i in model.graph.input if i.name not in initializers]
    feeds = {n: load_tensor(data / f"input_{k}.pb") for k, n in enumerate(names)}
    expected = [load_tensor(data / f"output_{k}.pb") for k in range(len(model.graph.output))]
    with np.errstate(invalid="ignore"):  # Sqrt and Pow cases have NaNs on purpose
        got = run(graph, feeds, imported.params(), keep="outputs")
    worst = 0.0
    for name, want in zip(graph.outputs, expected, strict=True):
        value = got[name]
        assert value.shape == want.shape and value.dtype == want.dtype, (
            f"{case_dir.name}: output {name!r} is {value.dtype}{list(value.shape)}, expected "
            f"{want.dtype}{list(want.shape)}")
        worst = max(worst, excess(value, want))
    return Outcome(case_dir.name, worst=worst)


@pytest.mark.parametrize("case_dir", CASE_DIRS, ids=[p.name for p in CASE_DIRS])
def test_case_matches_stored_outputs(case_dir):
    result = outcome(case_dir)
    if result.unsupported:
        assert set(result.unsupported) <= KNOWN_UNSUPPORTED, result.unsupported
        pytest.skip(f"unsupported: {', '.join(result.unsupported)}")
    assert result.worst <= 1.0, f"{result.case}: error {result.worst:.2f}x the tolerance"


def test_summary_lists_skips_and_counts_passes(capsys):
    results = [outcome(p) for p in CASE_DIRS]
    skipped = [r for r in results if r.unsupported]
    passed = [r for r in results if not r.unsupported and r.worst <= 1.0]
    with capsys.disabled():
        print(f"\nONNX conformance: {len(passed)} of {len(results)} cases pass, "
              f"{len(skipped)} skipped for unsupported ops:")
        for r in skipped:
            print(f"  {r.case}: {', '.join(r.unsupported)}")
    assert len(passed) + len(skipped) == len(results)
    assert len(CASE_DIRS) > 100  # the onnx package ships 117: the harness must find them
