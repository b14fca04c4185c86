"""The TVM-generated CUDA kernels, checked without a GPU: the checked-in file is what the
generator writes; each op's pointwise formula, built by TVM for "llvm", matches its numpy
reference (NaN and infinities where the float32 reference has them, finite values within a
few float32 roundings of the float64 reference); the CUDA sources compile with nvcc. A kernel
in a low float type (bfloat16, float16) is bit-identical to the reference computed in float32
on its exactly widened inputs and rounded once (the interpreter's emulation), its paired form
(two elements per thread) likewise."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

tvm = pytest.importorskip("tvm")

from codegen import tvm_kernels as tk  # noqa: E402
from planner.dtypes import LOW_FLOATS  # noqa: E402
from planner.ops import get_op  # noqa: E402
from planner.ops.special_table import OPS as SPECIAL_OPS  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
RUNTIME = ROOT / "templates" / "cuda" / "runtime"
EPS32 = float(np.finfo(np.float32).eps)

# attrs per op (the rest take their defaults); inputs per op where random normals do not fit
ATTRS = {
    "Scale": {"factor": 0.7},
    "Clip": {"min": -1.0, "max": 1.5},
    "ClipGrad": {"min": -1.0, "max": 1.5},
    "LeakyRelu": {"alpha": 0.2},
    "LeakyReluGrad": {"alpha": -0.3},
    "Elu": {"alpha": 0.8},
    "EluGrad": {"alpha": 0.8},
    "ApplyMomentum": {"momentum": 0.9, "nesterov": True},
    "ApplyAdam": {"decoupled": True},
    "Increment": {"by": 3.0},
    "Fill": {"shape": [7], "value": 2.5},
    "Dropout": {"rate": 0.3, "seed": 12345},
    "DropoutGrad": {"rate": 0.6, "seed": 99},
    "CausalMask": {"value": None},
}
SHAPE = (3, 4, 5)


def _specials(x: np.ndarray, rng) -> np.ndarray:
    flat = x.reshape(-1)
    picks = rng.choice(flat.size, size=min(12, flat.size), replace=False)
    values = [np.nan, np.inf, -np.inf, 0.0, -0.0, 40.0, -40.0, 100.0, -100.0, 1e-20, 0.5, -0.75]
    flat[picks] = values[:len(picks)]
    return x


def _inputs(spec: tk.Spec, shapes, rng) -> list[np.ndarray]:
    xs = []
    for k, dtype in enumerate(spec.ins):
        shape = shapes[k]
        if k in spec.pointwise.scalar_inputs:
            xs.append(np.array(5 if dtype == "int64" else 3.0, dtype=dtype))
        elif dtype == "float32" or dtype in LOW_FLOATS:
            x = (rng.standard_normal(shape) * 2).astype(np.float32)
            xs.append((_specials(x, rng) if x.size >= 12 else x).astype(dtype))
        elif dtype in ("int64", "int32"):
            xs.append(rng.integers(-1000, 1000, size=shape).astype(dtype))
        else:
            xs.append(rng.random(shape) < 0.5)
    op = spec.ops[0]
    if op == "ApplyAdam":  # v >= 0, as Adam keeps it
        xs[3] = np.abs(xs[3])
    if op in POSITIVE:
        xs[-1] = np.abs(xs[-1]) + 0.5
    return xs


# Ops checked where they are well conditioned in float32: digamma's reflection for x < 0 reads
# tan(pi x), whose float32 argument's rounding (|pi x| ulps) dominates near the poles, in
# PyTorch's float32 kernel as in these; the tests against torch float64 sample x > 0.
POSITIVE = {"Digamma", "DigammaGrad", "Lgamma", "LgammaGrad"}


def _params(spec: tk.Spec, attrs) -> list:
    out = []
    for name, dtype, default in spec.pointwise.params:
        v = attrs.get(name)
        v = default if v is None else v
        out.append(float(v) if dtype != "uint64" else int(v))
    return out


def _run_llvm(spec: tk.Spec, xs, shapes, out_shape, scalars):
    func = tk.cpu_func(spec)
    lib = tvm.build(func.with_attr("global_symbol", "f"), target="llvm")
    n = int(np.prod(out_shape))
    flat = (-1, spec.vec) if spec.vec > 1 else (-1,)  # a paired kernel's buffers: (n / 2, 2)
    args = []
    for k, x in enumerate(xs):
        a = x.reshape(1) if k in spec.pointwise.scalar_inputs else x.reshape(flat)
        args.append(tvm.runtime.tensor(np.ascontiguousarray(a)))
    outs = [tvm.runtime.tensor(np.zeros(n, dtype=d).reshape(flat)) for d in spec.outs]
    lib["f"](*args, *outs, *scalars(n // spec.vec))
    return [o.numpy().reshape(out_shape) for o in outs]


def _broadcast_scalars(spec: tk.Spec, shapes, out_shape):
    """n, dims and per-input strides (0 where broadcast) at the spec's rank = len(out_shape)."""
    rank = len(out_shape)
    strides = []
    for s in shapes:
        padded = (1,) * (rank - len(s)) + tuple(s)
        st, m = [0] * rank, 1
        for j in reversed(range(rank)):
            st[j] = 0 if padded[j] == 1 else m
            m *= padded[j]
        strides.append(st)
    dims = list(out_shape) if rank > 1 else []
    # build_compute skips dims it does not read (d0), as the CUDA kernels do
    return lambda n: [n, *dims, *[v for st in strides for v in st]]


def _check(op: str, got: list[np.ndarray], xs: list[np.ndarray], attrs,
           sum_mag: np.ndarray | None = None) -> None:
    if any(x.dtype.name in LOW_FLOATS for x in xs):
        # float32 on the widened inputs, each output rounded once to the kernel's type
        want = get_op(op).reference([x.astype(np.float32) for x in xs], attrs)
        for g, w in zip(got, want, strict=True):
            assert g.dtype == np.dtype(xs[0].dtype), op
            rounded = np.broadcast_to(w, g.shape).astype(g.dtype)
            # compared widened (exact), so that NaN matches NaN as numpy's float32 does
            np.testing.assert_array_equal(g.astype(np.float32), rounded.astype(np.float32),
                                          err_msg=op)
        return
    ref32 = get_op(op).reference([x for x in xs], attrs)
    xs64 = [x.astype(np.float64) if x.dtype == np.float32 else x for x in xs]
    ref64 = get_op(op).reference(xs64, attrs)
    # a few roundings relative to the result and to the operands' magnitudes (cancellation)
    mag = np.ones(got[0].shape)
    for x in xs64:
        if x.dtype == np.float64:
            mag = mag * (1 + np.minimum(np.abs(np.broadcast_to(x, got[0].shape)), 1e30))
    mags = [mag if g.shape == got[0].shape else sum_mag for g in got]
    for g, r32, r64, mag in zip(got, ref32, ref64, mags, strict=True):
        r32 = np.broadcast_to(r32, g.shape)
        r64 = np.broadcast_to(r64, g.shape)
        if g.dtype != np.float32 or op in FORMAT_EXACT:
            np.testing.assert_array_equal(g, r32, err_msg=op)
            continue
        special = ~np.isfinite(r32)
        np.testing.assert_array_equal(np.isnan(g), np.isnan(r32), err_msg=f"{op}: NaN")
        np.testing.assert_array_equal(g[special & ~np.isnan(r32)], r32[special & ~np.isnan(r32)],
                                      err_msg=f"{op}: inf")
        ok = ~special & np.isfinite(mag)
        err = np.abs(g[ok].astype(np.float64) - r64[ok])
        tol = 16 * EPS32 * (np.abs(r64[ok]) + mag[ok]) + 1e-38
        bad = err > tol
        assert not bad.any(), (f"{op}: {bad.sum()} elements off, worst {err[bad].max()} "
                               f"at got {g[ok][bad][:3]} ref {r64[ok][bad][:3]}")


def _cases():
    seen = set()
    for spec in tk.specs():
        key = (spec.ops, spec.ins, spec.form, spec.rank, spec.vec)
        if spec.rank in (2, 4, 8) or key in seen:
            continue  # ranks 1 and 3 stand for the broadcast index math
        if SPECIAL_OPS.intersection(spec.ops):
            # their formulas call special_math.h, which an "llvm" build cannot link: their CUDA
            # source runs on the host in tests/ops/test_special_functions.py
            continue
        seen.add(key)
        vec = f"-v{spec.vec}" if spec.vec > 1 else ""
        yield pytest.param(spec, id=f"{spec.ops[0]}-{spec.sig}-{spec.form_text}-r{spec.rank}{vec}")


# the next float32 after a: defined by the format, held to the float32 reference bit for bit
FORMAT_EXACT = {"NextAfter"}

# TVM 0.27's LLVM lowering folds the splitmix64 hash to a constant across indices (its CUDA
# source is the plain C expression): Dropout is checked on the CUDA source itself below.
LLVM_WRONG = {"Dropout"}


@pytest.mark.parametrize("spec", list(_cases()))
def test_formula_matches_reference(spec: tk.Spec):
    if spec.ops[0] in LLVM_WRONG:
        pytest.skip("checked by test_dropout_cuda_source_on_the_host")
    rng = np.random.default_rng(0)
    for op in spec.ops:
        attrs = get_op(op).normalize_attrs({**ATTRS.get(op, {}), **dict(spec.form)})
        n_in = len(spec.ins)
        if op == "Fill":
            shapes, out_shape = [], (7,)
        elif spec.rank == 3:  # numpy broadcasting over (3, 4, 5)
            shapes = [(3, 1, 5), (4, 1), (5,), SHAPE][:n_in]
            if op in ("PRelu", "PReluGrad"):
                shapes = [SHAPE, (4, 1)] if n_in == 2 else [SHAPE, SHAPE, (4, 1)]
            if op in ("MaxGrad", "MinGrad"):
                shapes = [SHAPE, (3, 1, 5), (4, 1)]
            out_shape = SHAPE
        else:
            shapes = [SHAPE] * n_in
            if op in ("PRelu", "PReluGrad"):  # rank 1: slope of one value
                shapes[-1] = (1,)
            out_shape = SHAPE
        xs = _inputs(spec, shapes, rng)
        if op == "Where" and spec.ins[0] == "float32":
            xs[0][0, 0] = np.nan  # a NaN condition is true
        params = _params(spec, attrs)
        extents = [out_shape[a] for _, a in spec.pointwise.extents]
        if spec.rank == 0:
            def scalars(n, params=params, extents=extents):
                return [*params, *extents, n]
        else:
            shape_scalars = _broadcast_scalars(spec, shapes, out_shape if spec.rank > 1
                                               else (int(np.prod(out_shape)),))
            if spec.rank == 1:
                shapes_flat = [(int(np.prod(s)),) for s in shapes]
                shape_scalars = _broadcast_scalars(spec, shapes_flat,
                                                   (int(np.prod(out_shape)),))
                if any(int(np.prod(s)) not in (1, int(np.prod(out_shape))) for s in shapes):
                    continue

            def scalars(n, f=shape_scalars, params=params):
                return [*params, *f(n)]
        got = _run_llvm(spec, xs, shapes, out_shape, scalars)
        if op == "PReluGrad":  # the kernel's second output is dslope's per-element terms
            slope = xs[2]
            axes = tuple(range(len(out_shape) - slope.ndim)) + tuple(
                len(out_shape) - slope.ndim + k for k, d in enumerate(slope.shape)
                if d == 1 and out_shape[len(out_shape) - slope.ndim + k] != 1)
            terms = np.where(xs[1] < 0, xs[0].astype(np.float64) * xs[1], 0.0)
            sum_mag = np.nansum(np.abs(terms), axis=axes, keepdims=True).reshape(slope.shape)
            got[1] = got[1].sum(axis=axes, keepdims=True, dtype=np.float64).reshape(
                slope.shape).astype(np.float32)
        ref_xs = [x.reshape(()) if k in spec.pointwise.scalar_inputs else x
                  for k, x in enumerate(xs)]
        _check(op, got, ref_xs, attrs, sum_mag if op == "PReluGrad" else None)


def _sample(all_specs: list[tk.Spec]) -> list[tk.Spec]:
    """A spec of each kind the generator writes: the first flat float32 one, a broadcasting
    one, a multi-output one and a low-type (paired) one."""
    kinds = (lambda s: s.rank == 0 and not s.low and len(s.outs) == 1,
             lambda s: s.rank > 0 and not s.low, lambda s: len(s.outs) > 1, lambda s: s.low)
    return [next(s for s in all_specs if kind(s)) for kind in kinds]


@pytest.mark.ci_sample  # the freshness check's share in CI: seconds of TVM, no GPU, no nvcc
def test_a_sample_of_the_generated_kernels_is_up_to_date():
    """Every spec's kernel-table rows are in the checked-in files (no spec missing, no row
    left over), and a spec of each kind lowered again gives its checked-in kernels and rows
    byte for byte (the whole files: the slow test below)."""
    texts = {path: path.read_text(encoding="utf-8") for path in (tk.OUT, tk.OUT_LOW)}
    all_specs = tk.specs()
    for low, path in ((False, tk.OUT), (True, tk.OUT_LOW)):
        want = [r for s in all_specs if s.low == low for r in tk.table_rows(s, None)]
        have = [line for line in texts[path].splitlines() if "(const void*)" in line]
        stale = f"{path.name} stale: run python -m codegen.tvm_kernels --write"
        assert len(have) == len(want), stale
        assert [line[:len(w)] for line, w in zip(have, want, strict=True)] == want, stale
    sample = _sample(all_specs)
    chunks, signatures = tk.lower(sample)
    for spec in sample:
        text = texts[tk.OUT_LOW if spec.low else tk.OUT]
        for block in spec.blocks:
            assert "\n".join(chunks[spec.symbol(block)]).strip() in text, spec.symbol(block)
        for row in tk.table_rows(spec, signatures):
            assert row in text.splitlines(), row


@pytest.mark.slow  # two minutes of TVM lowering; make test-all
def test_generated_files_are_up_to_date():
    for path, text in tk.generate_files().items():
        assert path.read_text(encoding="utf-8") == text, \
            f"{path.name} stale: run python -m codegen.tvm_kernels --write"


def _nvcc() -> str | None:
    found = os.environ.get("NVCC") or shutil.which("nvcc")
    if found:
        return found
    default = Path("/usr/local/cuda/bin/nvcc")
    return str(default) if default.exists() else None


def test_cuda_sources_compile(tmp_path):
    nvcc = _nvcc()
    cudnn = pytest.importorskip("nvidia.cudnn")
    if nvcc is None:
        pytest.skip("no nvcc")
    nv = Path(cudnn.__path__[0]).parent
    includes = [RUNTIME, ROOT / "templates" / "common", nv / "cudnn" / "include",
                nv / "cu13" / "include"]
    # and the pointwise table's registrations and the casts of masks and ids beside them; the
    # GEMM's and the convolution's folded bias-and-Relu pass (bias_activation.cuh)
    for src in ("pointwise.cu", "reduce.cu", "pointwise_table.cu", "cast.cu", "matmul.cu",
                "conv.cu"):
        # PTX only (no ptxas): the C++ and the generated kernels are checked in a few seconds
        cmd = [nvcc, "-std=c++17", "-arch=sm_90", "-ptx", "-Xcompiler", "-Wall",
               *[f"-I{p}" for p in includes], str(RUNTIME / "kernels" / src),
               "-o", str(tmp_path / (src + ".ptx"))]
        done = subprocess.run(cmd, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-4000:]
        assert "warning" not in done.stderr, done.stderr[-4000:]


@pytest.mark.parametrize("src,header,symbol", [("fft.cu", "cufft.h", "fft_scale"),
                                               ("eigh.cu", "cusolverDn.h", "eigh_vectors")])
def test_the_cuda_library_sources_compile(src, header, symbol, tmp_path):
    """kernels/fft.cu (cuFFT) and kernels/eigh.cu (cuSOLVER) to PTX, their headers from the
    `cuda` extra's wheels (the nvidia/cu13 folder they share with cuBLAS's, or folders of their
    own on PYTHONPATH)."""
    nvcc = _nvcc()
    cudnn = pytest.importorskip("nvidia.cudnn")
    cu13 = pytest.importorskip("nvidia.cu13")
    if nvcc is None:
        pytest.skip("no nvcc")
    found = [Path(p) / "include" for p in cu13.__path__ if (Path(p) / "include" / header).exists()]
    if not found:
        pytest.skip(f"no {header}: install the cuda extra (pip install -e '.[cuda]')")
    nv = Path(cudnn.__path__[0]).parent
    includes = [RUNTIME, ROOT / "templates" / "common", nv / "cudnn" / "include",
                nv / "cu13" / "include", found[0]]
    cmd = [nvcc, "-std=c++17", "-arch=sm_90", "-ptx", "-Xcompiler", "-Wall",
           *[f"-I{p}" for p in includes], str(RUNTIME / "kernels" / src),
           "-o", str(tmp_path / (src + ".ptx"))]
    done = subprocess.run(cmd, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "warning" not in done.stderr, done.stderr[-4000:]
    assert symbol in (tmp_path / (src + ".ptx")).read_text()


HARNESS = r"""
#include <cmath>
#include <cstdio>
#include <cstdint>
struct Index { unsigned x; };
static Index blockIdx, threadIdx;
#define __global__
#define __launch_bounds__(n)
#include "tvm_pointwise.cuh"
int main() {
  const int64_t n = 1000;
  static float x[n], y[n], z[n], w[n];
  int64_t step = 5, late = (int64_t{1} << 32) + 5;  // late: past the low half of the step
  for (int64_t i = 0; i < n; ++i) x[i] = 1.0f;
  for (unsigned b = 0; b < (n + 255) / 256; ++b)
    for (unsigned t = 0; t < 256; ++t) {
      blockIdx.x = b;
      threadIdx.x = t;
      tvm_Dropout_f_f_r0_b256_kernel(x, y, n, 0.3, 12345ull);
      tvm_Dropout_fl_f_r0_b256_kernel(x, &step, z, n, 0.6, 99ull);
      tvm_Dropout_fl_f_r0_b256_kernel(x, &late, w, n, 0.6, 99ull);
    }
  for (int64_t i = 0; i < n; ++i) std::printf("%.9g %.9g %.9g\n", y[i], z[i], w[i]);
}
"""


def test_dropout_cuda_source_on_the_host(tmp_path):
    """The generated CUDA kernels are plain C: with the launch qualifiers defined away, the
    host compiler runs Dropout's over every (block, thread) and the mask is the reference's."""
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        pytest.skip("no host C++ compiler")
    (tmp_path / "main.cpp").write_text(HARNESS)
    exe = tmp_path / "main"
    done = subprocess.run([cxx, "-std=c++17", "-O1", "-w", f"-I{tk.OUT.parent}",
                           f"-I{ROOT / 'templates' / 'common'}",
                           str(tmp_path / "main.cpp"), "-o", str(exe)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-4000:]
    out = np.loadtxt(subprocess.run([str(exe)], capture_output=True, text=True,
                                    check=True).stdout.splitlines(), dtype=np.float64)
    ones = np.ones(1000, np.float32)
    y = get_op("Dropout").reference([ones], {"rate": 0.3, "seed": 12345})[0]
    z = get_op("DropoutGrad").reference([ones, np.array(5, np.int64)],
                                        {"rate": 0.6, "seed": 99})[0]
    w = get_op("DropoutGrad").reference([ones, np.array(2**32 + 5, np.int64)],
                                        {"rate": 0.6, "seed": 99})[0]
    np.testing.assert_array_equal(out[:, 0].astype(np.float32), y)
    np.testing.assert_array_equal(out[:, 1].astype(np.float32), z)
    # step 2^32 + 5 draws its own mask (the step's high half keys the seed), as the reference
    np.testing.assert_array_equal(out[:, 2].astype(np.float32), w)
    assert not np.array_equal(w, z)
