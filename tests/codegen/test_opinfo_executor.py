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

from tests.helpers.opinfo_executor import check_on_cpu  # noqa: E402
from tests.importers.opinfo_cases import (  # noqa: E402
    fast_subset,
    load_expectations,
)

MIN_RUNS = 40  # the fast subset's passing samples the CPU runtime has ops for, at least


# The tier's sample in CI: an OpInfo of each of the three modules' lists (the fast subset's
# hypot, issue 86's argmax, the pools' avg_pool2d), their samples in one small merged build.
SAMPLE = ("hypot", "argmax", "nn.functional.avg_pool2d")


@pytest.mark.ci_sample("tests/codegen/test_opinfo_executor_issue86.py",
                       "tests/codegen/test_opinfo_executor_sortpool.py")
def test_a_sample_of_opinfos_on_the_cpu_executor(tmp_path):
    check_on_cpu(SAMPLE, tmp_path, 8)


@pytest.mark.slow  # three minutes of compiling one merged graph
def test_fast_subset_passing_samples_on_the_cpu_executor(tmp_path):
    expected = load_expectations()
    check_on_cpu([n for n in fast_subset(expected) if expected[n].outcome == "pass"],
                 tmp_path, MIN_RUNS)


# The small-matrix ops and the diagonals, matrix-vector products and distances made of others
# (planner/ops/linalg.py, planner/importers/torch/rules_linalg.py, rules_products.py): not all in
# the
# fast subset.
LINALG = ("linalg.inv", "linalg.solve", "linalg.det", "linalg.slogdet", "logdet", "cholesky",
          "linalg.cholesky", "cholesky_solve", "cholesky_inverse", "linalg.solve_triangular",
          "triangular_solve", "linalg.tensorinv", "linalg.tensorsolve", "linalg.matrix_power",
          "diagonal", "diagonal_scatter", "trace", "addmv", "addbmm", "nn.functional.bilinear",
          "nn.functional.linear", "cdist", "dist", "nn.functional.pdist", "lu_unpack",
          "lu_solve", "linalg.lu_solve", "linalg.inv_ex", "linalg.solve_ex", "linalg.cholesky_ex",
          "linalg.svdvals", "norm.nuc", "linalg.cond", "linalg.pinv", "linalg.pinv.singular",
          "linalg.qr", "qr", "linalg.eigh", "linalg.eigvalsh", "linalg.matrix_rank.hermitian",
          "linalg.lu", "linalg.lu_factor", "linalg.lu_factor_ex", "lu",
          "linalg.householder_product", "geqrf", "ormqr", "matrix_exp", "linalg.ldl_factor",
          "linalg.ldl_factor_ex", "linalg.ldl_solve")


@pytest.mark.slow  # a minute of compiling one merged graph
def test_linalg_passing_samples_on_the_cpu_executor(tmp_path):
    check_on_cpu(LINALG, tmp_path, 3 * len(LINALG) // 2)

