"""The CUDA FFT kernel (templates/cuda/runtime/kernels/fft.cu: cuFFT's C2C in the passes of
fft_layout.h). Without a GPU: the passes themselves, compiled on the host with a naive
float64 DFT standing in for each cuFFT exec (the advanced layout's addressing, as cuFFT's
documentation gives it), against the op's numpy reference, so every axis grouping, batch
stride and exec offset is checked here. With a GPU (marked `gpu`; not yet run on one): the
kernel against numpy within an FFT's float32 error bound, its cuFFT work area inside the
planned scratch, a training step of a graph whose FFTs run forward and in the gradient
against the float64 reference, and a PyTorch module with torch.fft trained on the GPU
against PyTorch's run."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from planner.ops import get_op
from tests.cuda.fft_cases import LARGE_CASES, LAYOUT_CASES, complex_planes, fft_bound, points

RUNTIME = Path(__file__).resolve().parents[2] / "templates" / "cuda" / "runtime"

# Reads: rank, the complex shape, the axis count, the axes, inverse; then the complex points
# (re im). Runs fft_passes with each exec a naive DFT of the plan's geometry; writes the points.
HARNESS = r"""
#include <cmath>
#include <complex>
#include <cstdio>
#include <iostream>
#include <vector>
#include "fft_layout.h"
using C = std::complex<double>;
using planner::FftGeometry;

// Transform b of exec `at`: its points read from `in`, the DFT written to `out` (cuFFT's
// out-of-place exec; `in` == `out` in place: the transform's points are read first).
void naive(const FftGeometry& g, const C* in, C* out, long long b, int sign) {
  long long count = 1;
  for (int r = 0; r < g.rank; ++r) count *= g.n[r];
  auto place = [&](long long flat) {  // row-major index over n -> element
    long long off = 0, rest = flat, scale = count;
    for (int r = 0; r < g.rank; ++r) {
      scale /= g.n[r];
      off = off * g.n[r] + rest / scale;
      rest %= scale;
    }
    return b * g.dist + off * g.stride;
  };
  std::vector<C> src(count), dst(count);
  for (long long j = 0; j < count; ++j) src[j] = in[place(j)];
  for (long long k = 0; k < count; ++k) {
    C acc = 0;
    for (long long j = 0; j < count; ++j) {
      double phase = 0;
      long long jr = j, kr = k, scale = count;
      for (int r = 0; r < g.rank; ++r) {
        scale /= g.n[r];
        phase += double(jr / scale) * double(kr / scale) / double(g.n[r]);
        jr %= scale;
        kr %= scale;
      }
      acc += src[j] * std::polar(1.0, sign * 2 * M_PI * phase);
    }
    dst[k] = acc;
  }
  for (long long k = 0; k < count; ++k) out[place(k)] = dst[k];
}

int main() {
  int rank, naxes, inverse;
  std::cin >> rank;
  std::vector<long long> shape(rank);
  long long total = 1;
  for (auto& d : shape) { std::cin >> d; total *= d; }
  std::cin >> naxes;
  std::vector<long long> axes(naxes);
  for (auto& a : axes) std::cin >> a;
  std::cin >> inverse;
  std::vector<C> x(total), y(total);
  for (auto& v : x) { double re, im; std::cin >> re >> im; v = C(re, im); }
  if (!std::cin) return 1;
  std::vector<int64_t> planes(shape.begin(), shape.end()), ax(axes.begin(), axes.end());
  const auto passes = planner::fft_passes(planes, ax);
  for (size_t k = 0; k < passes.size(); ++k)
    for (long long e = 0; e < passes[k].execs; ++e)
      for (long long b = 0; b < passes[k].geometry.batch; ++b)
        naive(passes[k].geometry, (k == 0 ? x.data() : y.data()) + e * passes[k].exec_step,
              y.data() + e * passes[k].exec_step, b, inverse ? 1 : -1);
  std::printf("%zu\n", passes.size());
  for (const C& v : y) std::printf("%.17g %.17g\n", v.real(), v.imag());
}
"""


@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        pytest.skip("no C++ compiler")
    folder = tmp_path_factory.mktemp("fft_layout")
    (folder / "harness.cpp").write_text(HARNESS)
    exe = folder / "harness"
    done = subprocess.run([cxx, "-std=c++17", "-O2", "-Wall", "-Werror", f"-I{RUNTIME}",
                           str(folder / "harness.cpp"), "-o", str(exe)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-4000:]
    return exe


def _run_passes(exe, x: np.ndarray, attrs) -> tuple[int, np.ndarray]:
    shape = x.shape[:-1]
    rank = len(shape)
    axes = [a % rank for a in attrs["axes"]]
    text = " ".join(map(str, [rank, *shape, len(axes), *axes, int(attrs.get("inverse", False))]))
    data = "\n".join(f"{float(re)!r} {float(im)!r}" for re, im in x.reshape(-1, 2))
    out = subprocess.run([str(exe)], input=f"{text}\n{data}\n", capture_output=True, text=True,
                         check=True).stdout.split("\n")
    values = np.array([line.split() for line in out[1:] if line], np.float64)
    return int(out[0]), values.reshape(x.shape)


@pytest.mark.parametrize("shape,attrs", LAYOUT_CASES, ids=[str(c[0]) for c in LAYOUT_CASES])
def test_the_passes_transform_every_axis_once(shape, attrs, harness):
    """Each case's passes, a float64 DFT per transform, equal numpy's float64 transform (the
    scale is the kernel's last multiply, outside the passes) to float64 rounding; the axes
    come in runs of adjacent ones, at most three each."""
    x = complex_planes(shape, seed=len(shape)).astype(np.float64)
    unscaled = {**get_op("FFT").normalize_attrs(attrs), "scale": 1.0}
    passes, got = _run_passes(harness, x, unscaled)
    want = get_op("FFT").reference([x], unscaled)[0]
    axes = sorted(a % len(shape) for a in attrs["axes"])
    runs = [1]  # the lengths of the runs of adjacent axes
    for a, b in zip(axes, axes[1:], strict=False):
        runs[-1:] = [runs[-1] + 1] if b == a + 1 else [runs[-1], 1]
    assert passes == sum(-(-r // 3) for r in runs)
    assert np.abs(got - want).max() <= 1e-12 * np.abs(want).max()


# ---- on a GPU -------------------------------------------------------------------------------


@pytest.mark.gpu
def test_fft_kernel_within_the_fft_error_bound(tmp_path):
    """Every case, forward and inverse, one node each in one executor: numpy's float64
    transform within the normwise bound of a float32 FFT, and no kernel asking for more work
    area than its `gpu_scratch` rule planned."""
    from tests.codegen.helpers import build_module
    from tests.codegen.op_cases import nodes_graph

    cases = LAYOUT_CASES + LARGE_CASES
    variants = [(f"fft{k}", "FFT", attrs, [complex_planes(shape, seed=k)])
                for k, (shape, attrs) in enumerate(cases)]
    graph, feeds, outs = nodes_graph("fft_cases", variants)
    module = build_module(graph, tmp_path / "fft_cases", "cuda")
    ex = module.Executor()
    got = ex.forward(feeds)
    assert ex.stats()["unplanned_scratch_bytes"] == 0
    op = get_op("FFT")
    eps = float(np.finfo(np.float32).eps)
    for (label, _, attrs, xs), (shape, _) in zip(variants, cases, strict=True):
        want = op.reference([xs[0].astype(np.float64)], op.normalize_attrs(attrs))[0]
        err = np.linalg.norm(got[outs[label][0]] - want) / np.linalg.norm(want)
        assert err <= fft_bound(points(shape, attrs), eps), (label, shape, attrs, err)


@pytest.mark.gpu
@pytest.mark.parametrize("options", [{}, {"cuda_graph": True}], ids=["eager", "cuda-graph"])
def test_a_training_step_through_ffts_matches_the_float64_reference(options, tmp_path):
    """The spectral graph's training step (FFTs forward and, as their adjoints, in the
    gradient) on the planned layout, eagerly and replayed as a CUDA graph (cuFFT's execs
    captured with their work areas): the loss and the updated params against the float64
    interpreter, within 1e-4 or ten times numpy's own float32 error (tests/codegen/zoo_cases.py;
    the CPU executor's pocketfft lands 4e-8 from it on this graph)."""
    from codegen.build import build
    from codegen.load import load
    from codegen.render import render
    from planner.frontend.autodiff import make_training_graph
    from planner.graph.interpret import random_feeds, train_step, widened
    from planner.graph.optimizer import Optimizer
    from tests.codegen.helpers import gpu_plan, rel_error, start_state
    from tests.codegen.zoo_cases import allowed
    from tests.cuda.fft_cases import spectral_graph

    graph = make_training_graph(spectral_graph(), Optimizer(kind="sgd", lr=0.1))
    assert sum(n.op == "FFT" for n in graph.nodes) == 4
    plan = gpu_plan(graph)
    module = load(build(render(plan, tmp_path / "spectral", layout="plan")).dir)
    state, feeds = start_state(plan.graph), random_feeds(plan.graph, seed=2)
    ex = module.Executor(**options)
    for _ in range(2):  # a CUDA graph is captured at the second step
        ex.load_params(state)
        loss = ex.step(feeds)["loss"]
    assert ex.stats()["unplanned_scratch_bytes"] == 0
    outputs, new_state = train_step(plan.graph, feeds, state)
    exact_out, exact_state = train_step(widened(plan.graph), feeds, state)
    assert rel_error(loss, exact_out["loss"]) < allowed(outputs["loss"], exact_out["loss"])
    got = ex.params()
    for name in ("w", "head"):
        assert rel_error(got[name], exact_state[name]) < allowed(new_state[name],
                                                                 exact_state[name]), name


@pytest.mark.gpu
def test_a_torch_fft_module_trained_on_the_gpu_equals_pytorchs_run(tmp_path):
    """A PyTorch module filtering its input in frequency (torch.fft.fft2 with norm="ortho", a
    real filter, torch.fft.ifft, the real part) trained for three SGD steps through
    planner.torch.trainer on the GPU: every parameter and the last loss within 10x PyTorch's
    own float32 error against float64 plus 16 ulps (tests/importers/torch_step.py)."""
    torch = pytest.importorskip("torch")
    import copy

    from planner.torch import trainer
    from tests.importers.torch_step import Step, mismatches

    F = torch.nn.functional

    class Spectral(torch.nn.Module):
        def __init__(self, rows=6, cols=16, classes=3):
            super().__init__()
            self.filter = torch.nn.Parameter(torch.randn(rows, cols) * 0.5 + 1)
            self.head = torch.nn.Linear(rows * cols, classes)

        def forward(self, x):
            z = torch.fft.fft2(x, norm="ortho") * self.filter
            return self.head(torch.fft.ifft(z, dim=-1).real.flatten(1))

    torch.manual_seed(0)
    model = Spectral()
    g = torch.Generator().manual_seed(3)
    batches = [(torch.randn(4, 6, 16, generator=g), torch.randint(0, 3, (4,), generator=g))
               for _ in range(3)]

    def eager(dtype):
        m = copy.deepcopy(model).to(dtype)
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        for x, y in batches:
            opt.zero_grad()
            value = F.cross_entropy(m(x.to(dtype)), y)
            value.backward()
            opt.step()
        return Step(float(value.detach()), {k: v.detach().numpy().copy()
                                            for k, v in m.named_parameters()})

    t = trainer(copy.deepcopy(model), (batches[0][0],), loss=F.cross_entropy,
                labels=batches[0][1], optimizer="sgd", lr=0.1, out_dir=tmp_path, target="gpu")
    for x, y in batches:
        value = t.step(x, y)
    ours = Step(float(value), {k: np.asarray(v) for k, v in t.params().items()})
    f32, f64 = eager(torch.float32), eager(torch.float64)
    assert not mismatches(ours, f32, f64, set(f64.state))
