// MaxPool, MaxPoolGrad, AvgPool and AvgPoolGrad (the 2-D pools; torch's 1-D ones import as
// them) in float64, which max_pool.cpp's and pool.cpp's factories return for a float64 node:
// oneDNN 3.2's pooling has no f64. Each is a loop in double over the windows of
// common/pool_nd.h (one spatial axis of one element in front, then H and W with the 2-D op's
// uneven pads), in PyTorch's CPU order (aten/src/ATen/native/cpu/MaxPoolKernel.cpp,
// AvgPoolKernel.cpp):
//   MaxPool       each output one thread's, its taps in row-major order: the first maximum
//                 (a strict >), NaN winning (the first NaN: the op's reference, as float32's);
//   MaxPoolGrad   a plane per iteration: dx zeroed, then each output's dy added at its
//                 window's maximum, the outputs in order;
//   AvgPool       the window's sum in row-major order, divided once by its divisor (the
//                 input elements in it, or with count_include_pad the window clipped to the
//                 padded input): torch's bits;
//   AvgPoolGrad   a plane per iteration: dy / divisor added over each window, the outputs in
//                 order (pool_plane_slopes): torch's bits.
// Every thread count computes the same bits: nothing is summed across threads. Loops under
// kGrain outputs run on the calling thread alone (loops.h). Layout: plain NCHW (float64
// tensors are never channel-blocked: planner/step/blocked.py).
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

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

// The 2-D pool's windows (common/pool.h checks them against x and y) as pool_nd.h walks them.
PoolGeometry planar_geometry(const Node& n, const Shape& x, const Shape& y) {
  const PoolWindow w = pool_window(n.attrs, x, y);
  PoolGeometry g;  // axis 0: one element, one window
  g.planes = x[0] * x[1];
  for (int a = 0; a < 2; ++a) {
    PoolAxis& ax = g.axis[1 + a];
    ax.in = x[2 + a], ax.out = y[2 + a];
    ax.k = w.kernel[a], ax.s = w.stride[a], ax.d = w.dilation[a];
    ax.p = w.pad_begin[a], ax.pe = w.pad_end[a];
    ax.adaptive = false;
    ax.include_pad = w.count_include_pad;
    g.in_plane *= ax.in;
    g.out_plane *= ax.out;
  }
  return g;
}

// Where output o's maximum is in its plane: the first tap inside the input whatever it holds,
// then a strictly larger value, or a NaN over a number (the first NaN stays).
int64_t planar_argmax(const PoolGeometry& g, const double* plane, int64_t o) {
  int64_t at = -1;
  double best = -INFINITY;
  pool_taps(g, o, [&](int64_t i) {
    const double v = plane[i];
    if (at < 0 || v > best || (v != v && best == best)) at = i, best = v;
  });
  return at;
}

class MaxPoolF64 : public Kernel {
 public:
  explicit MaxPoolF64(const Node& n)
      : x_(n.in[0].id), y_(n.out[0].id), g_(planar_geometry(n, n.in[0].shape, n.out[0].shape)) {
    require_plain_f64(n);
  }
  std::string impl() const override { return "windows in double"; }
  void run(const Run& r) override {
    const double* x = r.at<double>(x_);
    double* y = r.at<double>(y_);
    const PoolGeometry& g = g_;
    const int64_t size = g.planes * g.out_plane;
#pragma omp parallel for schedule(static) if(size >= kGrain)
    for (int64_t k = 0; k < size; ++k) {
      const double* plane = x + k / g.out_plane * g.in_plane;
      y[k] = plane[planar_argmax(g, plane, k % g.out_plane)];
    }
  }

 private:
  int x_, y_;
  PoolGeometry g_;
};

// [dy, x] -> dx.
class MaxPoolGradF64 : public Kernel {
 public:
  explicit MaxPoolGradF64(const Node& n)
      : dy_(n.in[0].id), x_(n.in[1].id), dx_(n.out[0].id),
        g_(planar_geometry(n, n.in[1].shape, n.in[0].shape)) {
    require_plain_f64(n);
  }
  std::string impl() const override { return "windows in double, a plane per thread"; }
  void run(const Run& r) override {
    const double* dy = r.at<double>(dy_);
    const double* x = r.at<double>(x_);
    double* dx = r.at<double>(dx_);
    const PoolGeometry& g = g_;
#pragma omp parallel for schedule(static) if(g.planes * g.in_plane >= kGrain)
    for (int64_t p = 0; p < g.planes; ++p) {
      const double* plane = x + p * g.in_plane;
      double* dplane = dx + p * g.in_plane;
      std::fill(dplane, dplane + g.in_plane, 0.0);
      for (int64_t o = 0; o < g.out_plane; ++o)
        dplane[planar_argmax(g, plane, o)] += dy[p * g.out_plane + o];
    }
  }

 private:
  int dy_, x_, dx_;
  PoolGeometry g_;
};

class AvgPoolF64 : public Kernel {
 public:
  explicit AvgPoolF64(const Node& n)
      : x_(n.in[0].id), y_(n.out[0].id), g_(planar_geometry(n, n.in[0].shape, n.out[0].shape)) {
    require_plain_f64(n);
  }
  std::string impl() const override { return "windows in double"; }
  void run(const Run& r) override {
    const double* x = r.at<double>(x_);
    double* y = r.at<double>(y_);
    const PoolGeometry& g = g_;
    const int64_t size = g.planes * g.out_plane;
#pragma omp parallel for schedule(static) if(size >= kGrain)
    for (int64_t k = 0; k < size; ++k) pool_output(g, x, y, nullptr, k);  // common/pool_nd.h
  }

 private:
  int x_, y_;
  PoolGeometry g_;
};

// [dy] -> dx of shape input_shape.
class AvgPoolGradF64 : public Kernel {
 public:
  explicit AvgPoolGradF64(const Node& n)
      : dy_(n.in[0].id), dx_(n.out[0].id),
        g_(planar_geometry(n, n.out[0].shape, n.in[0].shape)) {
    require_plain_f64(n);
  }
  std::string impl() const override { return "windows in double, a plane per thread"; }
  void run(const Run& r) override {
    const double* dy = r.at<double>(dy_);
    double* dx = r.at<double>(dx_);
    const PoolGeometry& g = g_;
#pragma omp parallel for schedule(static) if(g.planes * g.in_plane >= kGrain)
    for (int64_t p = 0; p < g.planes; ++p) pool_plane_slopes(g, dy, dx, p);
  }

 private:
  int dy_, dx_;
  PoolGeometry g_;
};

}  // namespace

KernelPtr max_pool_f64(const Node& n) { return std::make_unique<MaxPoolF64>(n); }
KernelPtr max_pool_grad_f64(const Node& n) { return std::make_unique<MaxPoolGradF64>(n); }
KernelPtr avg_pool_f64(const Node& n) { return std::make_unique<AvgPoolF64>(n); }
KernelPtr avg_pool_grad_f64(const Node& n) { return std::make_unique<AvgPoolGradF64>(n); }

}  // namespace planner
