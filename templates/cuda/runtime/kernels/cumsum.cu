// CumSum on the GPU, following planner/ops/cumsum.py and the CPU kernel: x seen as (outer, n,
// inner), one thread per line of n elements (an (outer, inner) pair, adjacent threads on
// adjacent inner positions, so loads coalesce), summing along the line one element after the
// other in float32 as the reference does.
#include <cstdint>

#include "../groups.cuh"
#include "cumsum.h"

namespace planner {
namespace {

__global__ void running_sums(const float* __restrict__ x, float* __restrict__ y, int64_t outer,
                             int64_t n, int64_t inner, bool exclusive, bool reverse) {
  const int64_t lines = outer * inner;
  for (int64_t line = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; line < lines;
       line += int64_t{gridDim.x} * blockDim.x) {
    const int64_t base = (line / inner) * n * inner + line % inner;
    float sum = 0.0f;
    for (int64_t step = 0; step < n; ++step) {
      const int64_t at = base + (reverse ? n - 1 - step : step) * inner;
      if (exclusive) {
        y[at] = sum;
        sum += x[at];
      } else {
        sum += x[at];
        y[at] = sum;
      }
    }
  }
}

class CumSum : public Kernel {
 public:
  explicit CumSum(const Node& n)
      : threads_(block_threads(n)), x_(n.in[0].id), y_(n.out[0].id),
        s_(cumsum_scan(n)) {  // common/cumsum.h
    blocks_ = blocks_for(s_.lines.outer * s_.lines.inner, threads_);
  }
  void run(const Run& r) override {
    const AxisSplit& a = s_.lines;
    if (a.outer * a.inner * a.extent == 0) return;
    running_sums<<<blocks_, threads_, 0, r.stream>>>(r.at<float>(x_), r.at<float>(y_), a.outer,
                                                     a.extent, a.inner, s_.exclusive,
                                                     s_.reverse);
    PLANNER_LAUNCHED("CumSum");
  }

 private:
  int threads_;
  int x_, y_;
  CumSumScan s_;
  unsigned blocks_ = 1;
};

KernelPtr cumsum(const Node& n) { return std::make_unique<CumSum>(n); }

}  // namespace

PLANNER_REGISTER_KERNELS(cumsum) { r["CumSum"] = cumsum; }

}  // namespace planner
