// Softmax and LogSoftmax along any axis: oneDNN's softmax (softmax_accurate), then a pass that
// gives non-finite rows the reference's answer; LogSoftmax its own loop (below). x is seen as (outer, n, inner): one row
// of n elements (stride inner) per (outer, inner) pair.
//
// oneDNN handles -inf entries (masked attention scores get probability 0, log-probability -inf)
// but puts NaN only where the input is NaN or +inf and 0 elsewhere in that row; numpy and
// PyTorch make the whole row NaN (x - max is NaN there), as they do for a row of only -inf. The
// pass scans each row (vectorized) and fills such rows with NaN. SoftmaxGrad is in eltwise.cpp.
#include <omp.h>

#include <cmath>
#include <limits>

#include "../dnnl_kernel.h"
#include "../loops.h"
#include "norms_f64.h"

namespace planner {
namespace {

class Softmax : public DnnlKernel {
 public:
  Softmax(const Node& n, bool log) : x_(n.in[0].id), y_(n.out[0].id) {
    require_f32(n);
    const Shape& s = n.in[0].shape;
    const AxisSplit a = axis_split(n.attrs, s);
    const int axis = a.axis;
    outer_ = a.outer;
    len_ = a.extent;
    inner_ = a.inner;
    auto md = plain_md(s, n.in[0].dtype);
    dnnl::softmax_forward::primitive_desc pd(
        n.engine, dnnl::prop_kind::forward_training,
        log ? dnnl::algorithm::softmax_log : dnnl::algorithm::softmax_accurate, md, md,
        s.empty() ? 0 : axis, user_scratchpad());
    add(dnnl::softmax_forward(pd), pd, {{DNNL_ARG_SRC, x_}, {DNNL_ARG_DST, y_}});
  }
  void run(const Run& r) override {
    run_all(r);
    const float* x = r.at<float>(x_);
    float* y = r.at<float>(y_);
    const int64_t len = len_, inner = inner_, rows = outer_ * inner_;
    const float inf = std::numeric_limits<float>::infinity();
    const float nan = std::numeric_limits<float>::quiet_NaN();
#pragma omp parallel for
    for (int64_t row = 0; row < rows; ++row) {
      const int64_t base = (row / inner) * len * inner + row % inner;
      const float* xr = x + base;
      int bad = 0, finite_or_inf = 0;
#pragma omp simd reduction(| : bad, finite_or_inf)
      for (int64_t j = 0; j < len; ++j) {
        const float v = xr[j * inner];
        bad |= (v != v) | (v == inf);
        finite_or_inf |= v != -inf;
      }
      if (bad || !finite_or_inf)
        for (int64_t j = 0; j < len; ++j) y[base + j * inner] = nan;
    }
  }

 private:
  int x_, y_;
  int64_t outer_ = 1, inner_ = 1, len_ = 1;
};

// LogSoftmax as torch's CPU kernel computes it, y = (x - max) - log(sum exp(x - max)), the sum
// in double: oneDNN's softmax_log is up to ~1e-5 off where y is near 0 (the classes that carry
// the probability), which the gradient dy - exp(y) sum(dy) multiplies by sum(dy) (issue 57: 50x
// torch's float32 error). A row holding NaN or +inf, or only -inf, is NaN (x - max is NaN
// somewhere, as the reference's).
class LogSoftmax : public Kernel {
 public:
  explicit LogSoftmax(const Node& n) : x_(n.in[0].id), y_(n.out[0].id) {
    require_f32(n);
    const AxisSplit a = axis_split(n.attrs, n.in[0].shape);
    outer_ = a.outer;
    len_ = a.extent;
    inner_ = a.inner;
  }
  std::string impl() const override { return "max, sum of exp in double, log"; }
  void run(const Run& r) override {
    const float* x = r.at<float>(x_);
    float* y = r.at<float>(y_);
    const int64_t len = len_, inner = inner_, rows = outer_ * inner_;
    const float inf = std::numeric_limits<float>::infinity();
    const float nan = std::numeric_limits<float>::quiet_NaN();
#pragma omp parallel for
    for (int64_t row = 0; row < rows; ++row) {
      const int64_t base = (row / inner) * len * inner + row % inner;
      const float* xr = x + base;
      float* yr = y + base;
      float top = -inf;
      int bad = 0;
#pragma omp simd reduction(max : top) reduction(| : bad)
      for (int64_t j = 0; j < len; ++j) {
        const float v = xr[j * inner];
        bad |= v != v;
        top = v > top ? v : top;
      }
      if (bad || top == inf || top == -inf) {
        for (int64_t j = 0; j < len; ++j) yr[j * inner] = nan;
        continue;
      }
      double sum = 0.0;
#pragma omp simd reduction(+ : sum)
      for (int64_t j = 0; j < len; ++j) sum += static_cast<double>(std::exp(xr[j * inner] - top));
      const float lse = static_cast<float>(std::log(sum));
#pragma omp simd
      for (int64_t j = 0; j < len; ++j) yr[j * inner] = (xr[j * inner] - top) - lse;
    }
  }

 private:
  int x_, y_;
  int64_t outer_ = 1, inner_ = 1, len_ = 1;
};

KernelPtr softmax(const Node& n) {
  if (n.in[0].dtype == F64) return softmax_f64(n);  // norms_f64.cpp
  return std::make_unique<Softmax>(n, false);
}
KernelPtr log_softmax(const Node& n) {
  if (n.in[0].dtype == F64) return log_softmax_f64(n);
  return std::make_unique<LogSoftmax>(n);
}

}  // namespace

PLANNER_REGISTER_KERNELS(softmax) {
  r["Softmax"] = {softmax, "float32|float64"};
  r["LogSoftmax"] = {log_softmax, "float32|float64"};
}

}  // namespace planner
