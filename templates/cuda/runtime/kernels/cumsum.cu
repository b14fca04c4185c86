// The scans on the GPU, following planner/ops/cumsum.py and the CPU kernels: x seen as
// (outer, n, inner), one thread per line of n elements (an (outer, inner) pair, adjacent threads
// on adjacent inner positions, so loads coalesce), combining along the line one element after
// the other in float32 as the reference does: sums (CumSum), products (CumProd), and CumProd's
// gradient (a forward walk for the products before each element, a backward one for dy).
#include <cstdint>

#include "../groups.cuh"
#include "cumsum.h"

namespace planner {
namespace {

__global__ void running_scans(const float* __restrict__ x, float* __restrict__ y, int64_t outer,
                              int64_t n, int64_t inner, bool exclusive, bool reverse,
                              bool product) {
  const int64_t lines = outer * inner;
  for (int64_t line = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; line < lines;
       line += int64_t{gridDim.x} * blockDim.x) {
    const int64_t base = (line / inner) * n * inner + line % inner;
    float acc = product ? 1.0f : 0.0f;
    for (int64_t step = 0; step < n; ++step) {
      const int64_t at = base + (reverse ? n - 1 - step : step) * inner;
      if (exclusive) y[at] = acc;
      acc = product ? acc * x[at] : acc + x[at];
      if (!exclusive) y[at] = acc;
    }
  }
}

__global__ void cumprod_slopes(const float* __restrict__ dy, const float* __restrict__ x,
                               float* __restrict__ dx, int64_t outer, int64_t n, int64_t inner,
                               bool exclusive, bool reverse) {
  const int64_t lines = outer * inner;
  for (int64_t line = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; line < lines;
       line += int64_t{gridDim.x} * blockDim.x) {
    const int64_t base = (line / inner) * n * inner + line % inner;
    auto at = [&](int64_t step) { return base + (reverse ? n - 1 - step : step) * inner; };
    float before = 1.0f;
    for (int64_t step = 0; step < n; ++step) {
      dx[at(step)] = before;
      before *= x[at(step)];
    }
    float acc = 0.0f;
    for (int64_t step = n - 1; step >= 0; --step) {
      const float next = step + 1 < n ? x[at(step + 1)] * acc : acc;
      acc = exclusive ? (step + 1 < n ? dy[at(step + 1)] + next : 0.0f) : dy[at(step)] + next;
      dx[at(step)] *= acc;
    }
  }
}

class CumSum : public Kernel {
 public:
  explicit CumSum(const Node& n)
      : threads_(block_threads(n)), in_(n.in.size() == 2 ? n.in[1].id : n.in[0].id),
        dy_(n.in[0].id), y_(n.out[0].id), grad_(n.in.size() == 2),
        s_(cumsum_scan(n)) {  // common/cumsum.h
    blocks_ = blocks_for(s_.lines.outer * s_.lines.inner, threads_);
  }
  void run(const Run& r) override {
    const AxisSplit& a = s_.lines;
    if (a.outer * a.inner * a.extent == 0) return;
    if (grad_)
      cumprod_slopes<<<blocks_, threads_, 0, r.stream>>>(r.at<float>(dy_), r.at<float>(in_),
                                                         r.at<float>(y_), a.outer, a.extent,
                                                         a.inner, s_.exclusive, s_.reverse);
    else
      running_scans<<<blocks_, threads_, 0, r.stream>>>(r.at<float>(in_), r.at<float>(y_),
                                                        a.outer, a.extent, a.inner,
                                                        s_.exclusive, s_.reverse, s_.product);
    PLANNER_LAUNCHED("CumSum");
  }

 private:
  int threads_;
  int in_, dy_, y_;  // in_: x (CumProdGrad's second input)
  bool grad_;
  CumSumScan s_;
  unsigned blocks_ = 1;
};

KernelPtr cumsum(const Node& n) { return std::make_unique<CumSum>(n); }

}  // namespace

PLANNER_REGISTER_KERNELS(cumsum) {
  r["CumSum"] = cumsum;
  r["CumProd"] = cumsum;
  r["CumProdGrad"] = cumsum;
}

}  // namespace planner
