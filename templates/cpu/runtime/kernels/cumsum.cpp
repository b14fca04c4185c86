// CumSum (planner/ops/cumsum.py): running sums along one axis, seen as (outer, n, inner). Each
// output element is the sum of its line's elements before it (or after it, reversed), added
// one after the other in float32 as the reference does; lines of one outer index are walked
// together, inner contiguous, so the loop vectorizes over inner.
#include <omp.h>

#include "../loops.h"
#include "cumsum.h"

namespace planner {
namespace {

class CumSum : public Kernel {
 public:
  explicit CumSum(const Node& n)
      : x_(n.in[0].id), y_(n.out[0].id), s_(cumsum_scan(n)) {}  // common/cumsum.h
  void run(const Run& r) override {
    const float* x = r.at<float>(x_);
    float* y = r.at<float>(y_);
    const int64_t outer = s_.lines.outer, n = s_.lines.extent, inner = s_.lines.inner;
    const bool exclusive = s_.exclusive, reverse = s_.reverse;
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
  CumSumScan s_;
};

KernelPtr cumsum(const Node& n) { return std::make_unique<CumSum>(n); }

}  // namespace

PLANNER_REGISTER_KERNELS(cumsum) { r["CumSum"] = cumsum; }

}  // namespace planner
