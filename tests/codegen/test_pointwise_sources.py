"""The CUDA sources of the pointwise table's ops and of the casts between integer, bool and
float tensors compile with nvcc (PTX only, as test_tvm_kernels.py's check of pointwise.cu):
the generated registrations (kernels/pointwise_table.cu) and cast.cu. The kernels themselves
are TVM's, compiled with pointwise.cu there."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.codegen.test_tvm_kernels import _nvcc

ROOT = Path(__file__).resolve().parents[2]
RUNTIME = ROOT / "templates" / "cuda" / "runtime"


@pytest.mark.nvcc
@pytest.mark.parametrize("source", ["pointwise_table.cu", "cast.cu"])
def test_cuda_source_compiles(source, tmp_path):
    nvcc = _nvcc()
    cudnn = pytest.importorskip("nvidia.cudnn")
    if nvcc is None:
        pytest.skip("no nvcc")
    nv = Path(cudnn.__path__[0]).parent
    includes = [RUNTIME, ROOT / "templates" / "common", nv / "cudnn" / "include",
                nv / "cu13" / "include"]
    cmd = [nvcc, "-std=c++17", "-arch=sm_80", "-ptx", "-Xcompiler", "-Wall",
           *[f"-I{p}" for p in includes], str(RUNTIME / "kernels" / source),
           "-o", str(tmp_path / (source + ".ptx"))]
    done = subprocess.run(cmd, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "warning" not in done.stderr, done.stderr[-4000:]
