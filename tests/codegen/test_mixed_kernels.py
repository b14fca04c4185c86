"""The CPU kernels mixed precision runs between convolutions on bfloat16 tensors, against the
reference interpreter's emulated bfloat16, within the bounds tests/codegen/mixed_kernel_cases.py
derives."""

from __future__ import annotations

import pytest

from tests.codegen.mixed_kernel_cases import OPS, check_kernel, kernel_results


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return kernel_results(tmp_path_factory.mktemp("bf16k") / "k")


@pytest.mark.parametrize("op", OPS)
def test_bf16_kernel_matches_emulated_reference(op, results):
    check_kernel(op, results)
