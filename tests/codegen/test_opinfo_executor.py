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


def test_fast_subset_passing_samples_on_the_cpu_executor(tmp_path):
    expected = load_expectations()
    check_on_cpu([n for n in fast_subset(expected) if expected[n].outcome == "pass"],
                 tmp_path, MIN_RUNS)


# The small-matrix ops and the diagonals, matrix-vector products and distances made of others
# (planner/ops/linalg.py, planner/torch/rules_linalg.py, rules_products.py): not all in the
# fast subset.
LINALG = ("linalg.inv", "linalg.solve", "linalg.det", "linalg.slogdet", "logdet", "cholesky",
          "linalg.cholesky", "cholesky_solve", "cholesky_inverse", "linalg.solve_triangular",
          "triangular_solve", "linalg.tensorinv", "linalg.tensorsolve", "linalg.matrix_power",
          "diagonal", "diagonal_scatter", "trace", "addmv", "addbmm", "nn.functional.bilinear",
          "nn.functional.linear", "cdist", "dist", "nn.functional.pdist", "lu_unpack",
          "lu_solve", "linalg.lu_solve", "linalg.inv_ex", "linalg.solve_ex", "linalg.cholesky_ex",
          "linalg.svdvals", "norm.nuc", "linalg.cond", "linalg.pinv", "linalg.pinv.singular",
          "linalg.qr", "qr")


def test_linalg_passing_samples_on_the_cpu_executor(tmp_path):
    check_on_cpu(LINALG, tmp_path, 3 * len(LINALG) // 2)


def check_on_cpu(names, tmp_path, min_runs: int) -> None:
    """Every passing sample of the OpInfos `names` that the CPU runtime runs, merged into one
    graph, built and run once, each output and gradient held to torch's float64 value."""
    ops = by_name()
    runs = []
    for name in names:
        mine: list = []
        check_opinfo(ops[name], runs=mine)
        runs += [(f"{name} sample {k}", r) for k, r in enumerate(mine) if _runnable(r.graph)]
    assert len(runs) >= min_runs, f"only {len(runs)} samples the CPU executor can run"
    merged = merge("opinfo_executor", {f"s{k}/": r.graph for k, (_, r) in enumerate(runs)})
    executor = build_module(merged, tmp_path / "opinfo_executor").Executor()
    executor.load_params({f"s{k}/{n}": v for k, (_, r) in enumerate(runs)
                          for n, v in r.params.items()})
    # a cotangent no gradient reads (slogdet's sign) is no input of the built graph
    read = {t.name for t in merged.by_role("input")}
    out = executor.forward({f"s{k}/{n}": v for k, (_, r) in enumerate(runs)
                            for n, v in r.feeds.items() if f"s{k}/{n}" in read})
    bad = [compare(f"{label}: {tensor}", np.asarray(out[f"s{k}/{tensor}"]), t32, t64,
                   ulps=EXECUTOR_ULPS)
           for k, (label, r) in enumerate(runs) for tensor, (t32, t64) in r.torch.items()]
    assert [b for b in bad if b] == []
