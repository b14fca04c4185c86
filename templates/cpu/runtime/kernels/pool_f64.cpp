// MaxPool, MaxPoolGrad, AvgPool and AvgPoolGrad (the 2-D pools; torch's 1-D ones import as
// them) in float64, which max_pool.cpp's and pool.cpp's factories return for a float64 node:
// oneDNN 3.2's pooling has no f64. Each is a loop in double over common/pool_nd.h's windows
// (axis_taps along H and W with the 2-D op's uneven pads, each output row's and column's found
// at load), in PyTorch's CPU order (aten/src/ATen/native/cpu/MaxPoolKernel.cpp,
// AvgPoolKernel.cpp):
//   MaxPool       an output row per iteration, each window's taps in row-major order: the
//                 first maximum (a strict >), NaN winning (the first NaN: the op's reference,
//                 as float32's);
//   MaxPoolGrad   a plane per iteration: dx zeroed, then each output's dy added at its
//                 window's maximum, the outputs in order;
//   AvgPool       the window's sum in row-major order, divided once by its divisor (the
//                 input elements in it, or with count_include_pad the window clipped to the
//                 padded input): torch's bits;
//   AvgPoolGrad   a plane per iteration: dy / divisor added over each window, the outputs in
//                 order: torch's bits.
// Every thread count computes the same bits: nothing is summed across threads. Loops under
// kGrain outputs (inputs for the gradients) run on the calling thread alone (loops.h).
// Layout: plain NCHW (float64 tensors are never channel-blocked: planner/step/blocked.py).
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "../loops.h"
#include "pool.h"
#include "pool_f64.h"
#include "pool_nd.h"

namespace planner {
namespace {

void require_plain_f64(const Node& n) {
  for (const auto* side : {&n.in, &n.out})
    for (const TensorRef& t : *side)
      if (t.dtype != F64 || t.block)
        throw std::runtime_error(std::string(n.spec->op) + " in float64: plain float64 tensors");
}

// The 2-D pool's windows (common/pool.h checks them against x and y) as pool_nd.h reads them,
// each output row's and column's found once at load (the walk then has no divisions).
struct PlanarWindows {
  int64_t planes, ih, iw, oh, ow;
  std::vector<AxisTaps> rows, cols;  // per output row, per output column
  int64_t in_plane() const { return ih * iw; }
  int64_t out_plane() const { return oh * ow; }
};

PlanarWindows planar_windows(const Node& n, const Shape& x, const Shape& y) {
  const PoolWindow w = pool_window(n.attrs, x, y);
  PlanarWindows p{x[0] * x[1], x[2], x[3], y[2], y[3], {}, {}};
  for (int a = 0; a < 2; ++a) {
    PoolAxis ax;
    ax.in = x[2 + a], ax.out = y[2 + a];
    ax.k = w.kernel[a], ax.s = w.stride[a], ax.d = w.dilation[a];
    ax.p = w.pad_begin[a], ax.pe = w.pad_end[a];
    ax.adaptive = false;
    ax.include_pad = w.count_include_pad;
    for (int64_t o = 0; o < ax.out; ++o) (a ? p.cols : p.rows).push_back(axis_taps(ax, o));
  }
  return p;
}

// Calls f(flat index in the plane) for each tap of output (r, c) in row-major order; returns
// the window's divisor (pool_nd.h's pool_taps over these two axes).
template <class F>
int64_t planar_taps(const PlanarWindows& p, int64_t r, int64_t c, F f) {
  const AxisTaps &h = p.rows[r], &w = p.cols[c];
  for (int64_t i = 0; i < h.count; ++i) {
    const int64_t row = (h.first + i * h.step) * p.iw + w.first;
    for (int64_t j = 0; j < w.count; ++j) f(row + j * w.step);
  }
  return h.divisor * w.divisor;
}

// Where output (r, c)'s maximum is in its plane: the first tap inside the input whatever it
// holds, then a strictly larger value, or a NaN over a number (the first NaN stays).
// Selects, not branches: a ReLU's output makes `v > best` a coin toss (the branches took 2.5
// times the average's loop).
int64_t planar_argmax(const PlanarWindows& p, const double* plane, int64_t r, int64_t c) {
  int64_t at = -1;
  double best = -INFINITY;
  planar_taps(p, r, c, [&](int64_t i) {
    const double v = plane[i];
    const bool take = (at < 0) | (v > best) | ((v != v) & (best == best));
    best = take ? v : best;
    at = take ? i : at;
  });
  return at;
}

// The window's maximum, NaN if it holds one: the value planar_argmax's tap holds.
double planar_max(const PlanarWindows& p, const double* plane, int64_t r, int64_t c) {
  double best = -INFINITY;
  planar_taps(p, r, c, [&](int64_t i) {
    const double v = plane[i];
    best = (v > best) | (v != v) ? v : best;
  });
  return best;
}

// MaxPool [x] -> y and AvgPool [x] -> y: an output row of a plane per iteration.
class PlanarPoolF64 : public Kernel {
 public:
  PlanarPoolF64(const Node& n, bool average)
      : x_(n.in[0].id), y_(n.out[0].id), average_(average),
        p_(planar_windows(n, n.in[0].shape, n.out[0].shape)) {
    require_plain_f64(n);
  }
  std::string impl() const override { return "windows in double"; }
  void run(const Run& r) override {
    const double* x = r.at<double>(x_);
    double* y = r.at<double>(y_);
    const PlanarWindows& p = p_;
    const bool average = average_;
#pragma omp parallel for schedule(static) if(p.planes * p.out_plane() >= kGrain)
    for (int64_t k = 0; k < p.planes * p.oh; ++k) {
      const double* plane = x + k / p.oh * p.in_plane();
      double* out = y + k * p.ow;
      const int64_t row = k % p.oh;
      for (int64_t c = 0; c < p.ow; ++c) {
        if (!average) {
          out[c] = planar_max(p, plane, row, c);
          continue;
        }
        double sum = 0;
        const int64_t divisor = planar_taps(p, row, c, [&](int64_t i) { sum += plane[i]; });
        out[c] = sum / static_cast<double>(divisor);
      }
    }
  }

 private:
  int x_, y_;
  bool average_;
  PlanarWindows p_;
};

// MaxPoolGrad [dy, x] -> dx and AvgPoolGrad [dy] -> dx: a plane per iteration, dx zeroed, then
// each output's dy added at its window's maximum, or dy / divisor over its window, the
// outputs in order.
class PlanarPoolGradF64 : public Kernel {
 public:
  PlanarPoolGradF64(const Node& n, bool average)
      : dy_(n.in[0].id), x_(average ? -1 : n.in[1].id), dx_(n.out[0].id), average_(average),
        p_(planar_windows(n, n.out[0].shape, n.in[0].shape)) {
    require_plain_f64(n);
  }
  std::string impl() const override { return "windows in double, a plane per thread"; }
  void run(const Run& r) override {
    const double* dy = r.at<double>(dy_);
    const double* x = average_ ? nullptr : r.at<double>(x_);
    double* dx = r.at<double>(dx_);
    const PlanarWindows& p = p_;
    const bool average = average_;
#pragma omp parallel for schedule(static) if(p.planes * p.in_plane() >= kGrain)
    for (int64_t k = 0; k < p.planes; ++k) {
      double* d = dx + k * p.in_plane();
      const double* g = dy + k * p.out_plane();
      std::fill(d, d + p.in_plane(), 0.0);
      for (int64_t row = 0; row < p.oh; ++row)
        for (int64_t c = 0; c < p.ow; ++c) {
          const double grad = g[row * p.ow + c];
          if (!average) {
            d[planar_argmax(p, x + k * p.in_plane(), row, c)] += grad;
            continue;
          }
          // a first walk for the divisor, as pool_nd.h's pool_plane_slopes
          const double share = grad / static_cast<double>(planar_taps(p, row, c, [](int64_t) {}));
          planar_taps(p, row, c, [&](int64_t i) { d[i] += share; });
        }
    }
  }

 private:
  int dy_, x_, dx_;
  bool average_;
  PlanarWindows p_;
};

}  // namespace

KernelPtr max_pool_f64(const Node& n) { return std::make_unique<PlanarPoolF64>(n, false); }
KernelPtr max_pool_grad_f64(const Node& n) { return std::make_unique<PlanarPoolGradF64>(n, false); }
KernelPtr avg_pool_f64(const Node& n) { return std::make_unique<PlanarPoolF64>(n, true); }
KernelPtr avg_pool_grad_f64(const Node& n) { return std::make_unique<PlanarPoolGradF64>(n, true); }

}  // namespace planner
