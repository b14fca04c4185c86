"""The CUDA executor's tests. Building needs nvcc and the `cuda` extra (cuDNN and cuBLAS
wheels): without them the tests marked `nvcc` or `gpu` are skipped. Running needs an NVIDIA
GPU: the tests marked `gpu` are skipped without one (CI has none: it generates, and compiles the
kernel sources to PTX; the `nvcc` builds are in `make test-all`).
Tests with neither mark (planning, rendering, coverage of the ops) always run."""

from __future__ import annotations

import shutil
import subprocess
from functools import cache

import pytest

from codegen.build import cuda_toolchain
from codegen.errors import BuildError


@cache
def toolchain_problem() -> str:
    try:
        cuda_toolchain()
    except BuildError as e:
        return str(e)
    return ""


@cache
def has_gpu() -> bool:
    smi = shutil.which("nvidia-smi")
    if not smi:
        return False
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0 and "GPU" in out.stdout


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "tests/cuda/" not in str(item.fspath).replace("\\", "/"):
            continue
        needs_build = "nvcc" in item.keywords or "gpu" in item.keywords
        if needs_build and toolchain_problem():
            item.add_marker(pytest.mark.skip(reason=toolchain_problem()))
        elif "gpu" in item.keywords and not has_gpu():
            item.add_marker(pytest.mark.skip(reason="needs an NVIDIA GPU"))
