// The scans (planner/ops/cumsum.py): running sums (CumSum) or products (CumProd) along one axis,
// seen as (outer, n, inner). Each output element combines its line's elements before it (or
// after it, reversed), one after the other in float32 as the reference does; lines of one outer
// index are walked together, inner contiguous, so the loop vectorizes over inner.
// CumProdGrad walks each line alone (forward for the products before each element, backward
// for the sums of dy weighted by the products after it), lines split among the threads.
#include <omp.h>

#include "../loops.h"
#include "cumsum.h"
#include "integer.h"

namespace planner {
namespace {

class CumSum : public Kernel {
 public:
  explicit CumSum(const Node& n)
      : x_(n.in[0].id), y_(n.out[0].id), s_(cumsum_scan(n)) {}  // common/cumsum.h
  void run(const Run& r) override {
    if (s_.product) scan(r, [](float a, float b) { return a * b; }, 1.0f);
    else scan(r, [](float a, float b) { return a + b; }, 0.0f);
  }

 private:
  template <class Op>
  void scan(const Run& r, Op op, float identity) {
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
        const int64_t prev = reverse ? k + 1 : k - 1;  // the element combined just before
        float* yk = yo + k * inner;
        if (step == 0) {
#pragma omp simd
          for (int64_t i = 0; i < inner; ++i) yk[i] = exclusive ? identity : xo[k * inner + i];
        } else {
          const float* yp = yo + prev * inner;
          const float* add = xo + (exclusive ? prev : k) * inner;
#pragma omp simd
          for (int64_t i = 0; i < inner; ++i) yk[i] = op(yp[i], add[i]);
        }
      }
    }
  }

  int x_, y_;
  CumSumScan s_;
};

class CumProdGrad : public Kernel {
 public:
  explicit CumProdGrad(const Node& n)
      : dy_(n.in[0].id), x_(n.in[1].id), dx_(n.out[0].id), s_(cumsum_scan(n)) {}
  void run(const Run& r) override {
    const float *dy = r.at<float>(dy_), *x = r.at<float>(x_);
    float* dx = r.at<float>(dx_);
    const int64_t n = s_.lines.extent, inner = s_.lines.inner;
    const bool exclusive = s_.exclusive, reverse = s_.reverse;
#pragma omp parallel for
    for (int64_t line = 0; line < s_.lines.outer * inner; ++line) {
      const int64_t base = (line / inner) * n * inner + line % inner;
      auto at = [&](int64_t step) { return base + (reverse ? n - 1 - step : step) * inner; };
      float before = 1.0f;  // the product of the line's elements before this one
      for (int64_t step = 0; step < n; ++step) {
        dx[at(step)] = before;
        before *= x[at(step)];
      }
      float acc = 0.0f;  // sum over later outputs i of dy[i] times the x's between
      for (int64_t step = n - 1; step >= 0; --step) {
        const float next = step + 1 < n ? x[at(step + 1)] * acc : acc;
        acc = exclusive ? (step + 1 < n ? dy[at(step + 1)] + next : 0.0f) : dy[at(step)] + next;
        dx[at(step)] *= acc;
      }
    }
  }

 private:
  int dy_, x_, dx_;
  CumSumScan s_;
};

KernelPtr cumsum(const Node& n) {
  if (is_integer(n.in[0].dtype) && std::strcmp(n.spec->op, "CumSum") == 0)
    return int_running_sum(n);  // kernels/integer.cpp: exact, wrapping
  return std::make_unique<CumSum>(n);
}
KernelPtr cumprod_grad(const Node& n) { return std::make_unique<CumProdGrad>(n); }

}  // namespace

PLANNER_REGISTER_KERNELS(cumsum) {
  r["CumSum"] = {cumsum, "float32|int64|int32|int16|int8|uint8"};
  r["CumProd"] = cumsum;
  r["CumProdGrad"] = cumprod_grad;
}

}  // namespace planner
