// CumSum (planner/ops/cumsum.py): running sums along one axis, seen as (outer, n, inner). Each
// output element is the sum of its line's elements before it (or after it, reversed), added
// one after the other in float32 as the reference does; lines of one outer index are walked
// together, inner contiguous, so the loop vectorizes over inner.
#include <omp.h>

#include "../loops.h"

namespace planner {
namespace {

class CumSum : public Kernel {
 public:
  explicit CumSum(const Node& n)
      : x_(n.in[0].id), y_(n.out[0].id), exclusive_(n.attrs.b("exclusive")),
        reverse_(n.attrs.b("reverse")) {
    require_f32(n);
    const AxisSplit a = axis_split(n.attrs, n.in[0].shape);
    outer_ = a.outer;
    extent_ = a.extent;
    inner_ = a.inner;
  }
  void run(const Run& r) override {
    const float* x = r.at<float>(x_);
    float* y = r.at<float>(y_);
    const int64_t outer = outer_, n = extent_, inner = inner_;
    const bool exclusive = exclusive_, reverse = reverse_;
#pragma omp parallel for
    for (int64_t o = 0; o < outer; ++o) {
      const float* xo = x + o * n * inner;
      float* yo = y + o * n * inner;
      for (int64_t step = 0; step < n; ++step) {
        const int64_t k = reverse ? n - 1 - step : step;
        const int64_t prev = reverse ? k + 1 : k - 1;  // the element summed just before
        float* yk = yo + k * inner;
        if (step == 0) {
#pragma omp simd
          for (int64_t i = 0; i < inner; ++i) yk[i] = exclusive ? 0.0f : xo[k * inner + i];
        } else {
          const float* yp = yo + prev * inner;
          const float* add = xo + (exclusive ? prev : k) * inner;
#pragma omp simd
          for (int64_t i = 0; i < inner; ++i) yk[i] = yp[i] + add[i];
        }
      }
    }
  }

 private:
  int x_, y_;
  bool exclusive_, reverse_;
  int64_t outer_ = 1, inner_ = 1, extent_ = 1;
};

KernelPtr cumsum(const Node& n) { return std::make_unique<CumSum>(n); }

}  // namespace

PLANNER_REGISTER_KERNELS(cumsum) { r["CumSum"] = cumsum; }

}  // namespace planner
