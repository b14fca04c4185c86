// How the CUDA FFT kernel (kernels/fft.cu) cuts an FFT node into cuFFT transforms. Plain C++:
// tests/cuda/test_cuda_fft.py runs these passes on the host, a naive DFT in place of cuFFT's
// exec, against the op's numpy reference.
//
// The complex tensor (the planes' shape without the trailing 2) is transformed along its sorted
// axes, a run of adjacent axes (at most three: cuFFT's largest rank) at a time. A run [a, b] of
// lengths n_a..n_b sees the tensor as (outer, n_a..n_b, inner): one transform per (outer,
// inner) pair, its points `inner` elements apart. cuFFT's advanced layout has one batch stride,
// so a pass batches one of the two and issues one exec per index of the other, the smaller:
//
//   outer 4, n 8, inner 3  ->  batch 3 (dist 1), 4 execs 8 * 3 elements apart
//   outer 4, n 8, inner 1  ->  batch 4 (dist 8), 1 exec
//
// The first pass reads x and writes y; the others transform y in place.
#pragma once
#include <algorithm>
#include <array>
#include <cstdint>
#include <stdexcept>
#include <vector>

namespace planner {

// A batch of complex-to-complex transforms of rank 1 to 3 (cuFFT's advanced layout): point
// (x0, x1, x2) of transform b at complex element b * dist + ((x0 * n1 + x1) * n2 + x2) * stride.
struct FftGeometry {
  int rank = 1;
  std::array<long long, 3> n{1, 1, 1};
  long long stride = 1, dist = 1, batch = 1;

  std::array<long long, 7> key() const { return {rank, n[0], n[1], n[2], stride, dist, batch}; }
};

// One pass: `execs` transforms of `geometry`, exec e starting e * exec_step complex elements in.
struct FftPass {
  FftGeometry geometry;
  int64_t execs = 1, exec_step = 0;
};

// The passes over a complex tensor of shape `planes` along `axes` (each in [0, rank), distinct);
// none when the tensor has no element.
inline std::vector<FftPass> fft_passes(const std::vector<int64_t>& planes,
                                       std::vector<int64_t> axes) {
  std::sort(axes.begin(), axes.end());
  int64_t points = 1;
  for (int64_t d : planes) points *= d;
  std::vector<FftPass> passes;
  if (points == 0) return passes;
  for (size_t k = 0; k < axes.size();) {
    size_t end = k + 1;  // the run axes[k..end): adjacent axes, at most three
    while (end < axes.size() && end - k < 3 && axes[end] == axes[end - 1] + 1) ++end;
    const int64_t first = axes[k], last = axes[end - 1];
    FftPass p;
    FftGeometry& g = p.geometry;
    g.rank = static_cast<int>(end - k);
    int64_t outer = 1, inner = 1, length = 1;
    for (int64_t d = 0; d < static_cast<int64_t>(planes.size()); ++d) {
      if (d < first) outer *= planes[d];
      if (d > last) inner *= planes[d];
    }
    for (int r = 0; r < g.rank; ++r) {
      g.n[r] = planes[first + r];
      length *= planes[first + r];
    }
    g.stride = inner;
    if (outer <= inner) {  // batch the inner lines; an exec per outer index
      g.batch = inner;
      g.dist = 1;
      p.execs = outer;
      p.exec_step = length * inner;
    } else {  // batch the outer blocks; an exec per inner index
      g.batch = outer;
      g.dist = length * inner;
      p.execs = inner;
      p.exec_step = 1;
    }
    passes.push_back(p);
    k = end;
  }
  return passes;
}

}  // namespace planner
