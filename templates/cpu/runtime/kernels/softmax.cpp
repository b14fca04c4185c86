// Softmax and LogSoftmax along any axis as plain OpenMP loops: x seen as (outer, n, inner), one
// row of n elements (stride inner) per (outer, inner) pair, rows in parallel. The formulas are
// the reference's, with a NaN-propagating max: a row holding NaN or +inf, or only -inf, is all
// NaN, as in numpy and PyTorch (oneDNN's softmax differs there), and -inf entries (masked
// attention scores) get probability 0. Sums are in double. SoftmaxGrad is oneDNN's (eltwise.cpp).
#include <omp.h>

#include <cmath>
#include <limits>

#include "../loops.h"

namespace planner {
namespace {

class Softmax : public Kernel {
 public:
  Softmax(const Node& n, bool log) : x_(n.in[0].id), y_(n.out[0].id), log_(log) {
    require_f32(n);
    const Shape& s = n.in[0].shape;
    const size_t axis = static_cast<size_t>(norm_axis(n.attrs.i("axis"), s.size()));
    for (size_t k = 0; k < s.size(); ++k) {
      if (k < axis) outer_ *= s[k];
      if (k > axis) inner_ *= s[k];
    }
    len_ = s.empty() ? 1 : s[axis];
  }
  void run(const Run& r) override {
    const float* x = r.at<float>(x_);
    float* y = r.at<float>(y_);
    const int64_t len = len_, inner = inner_, rows = outer_ * inner_;
    const bool log = log_;
#pragma omp parallel for
    for (int64_t row = 0; row < rows; ++row) {
      const int64_t base = (row / inner) * len * inner + row % inner;
      const float* xr = x + base;
      float* yr = y + base;
      float m = -std::numeric_limits<float>::infinity();
      for (int64_t j = 0; j < len; ++j) {
        const float v = xr[j * inner];
        m = v > m || v != v ? v : m;
      }
      double sum = 0.0;
      for (int64_t j = 0; j < len; ++j) {
        const float e = std::exp(xr[j * inner] - m);
        if (!log) yr[j * inner] = e;
        sum += e;
      }
      if (log) {
        const float lse = static_cast<float>(std::log(sum));
        for (int64_t j = 0; j < len; ++j) yr[j * inner] = (xr[j * inner] - m) - lse;
      } else {
        const float inv = static_cast<float>(1.0 / sum);
        for (int64_t j = 0; j < len; ++j) yr[j * inner] *= inv;
      }
    }
  }

 private:
  int x_, y_;
  bool log_;
  int64_t outer_ = 1, inner_ = 1, len_ = 1;
};

KernelPtr softmax(const Node& n) { return std::make_unique<Softmax>(n, false); }
KernelPtr log_softmax(const Node& n) { return std::make_unique<Softmax>(n, true); }

}  // namespace

void add_softmax_kernels(Registry& r) {
  r["Softmax"] = softmax;
  r["LogSoftmax"] = log_softmax;
}

}  // namespace planner
