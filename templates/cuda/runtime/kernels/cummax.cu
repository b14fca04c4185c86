// CumMax on the GPU, following planner/ops/cummax.py and the CPU kernel: x seen as (outer, n,
// inner), one thread per line (adjacent threads on adjacent inner positions, so loads
// coalesce), walking the line in order.
#include <cmath>
#include <cstdint>

#include "../groups.cuh"

namespace planner {
namespace {

__global__ void running_extremes(const float* __restrict__ x, float* __restrict__ v,
                                 int64_t* __restrict__ idx, int64_t outer, int64_t n,
                                 int64_t inner, bool minimum) {
  const int64_t lines = outer * inner;
  for (int64_t line = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; line < lines;
       line += int64_t{gridDim.x} * blockDim.x) {
    const int64_t base = (line / inner) * n * inner + line % inner;
    float held = 0.0f;
    int64_t at = 0;
    for (int64_t k = 0; k < n; ++k) {
      const float e = x[base + k * inner];
      const bool better = minimum ? e <= held : e >= held;
      if (k == 0 || isnan(e) || (!isnan(held) && better)) {
        held = e;
        at = k;
      }
      v[base + k * inner] = held;
      idx[base + k * inner] = at;
    }
  }
}

class CumMax : public Kernel {
 public:
  explicit CumMax(const Node& n)
      : threads_(block_threads(n)), x_(n.in[0].id), v_(n.out[0].id), i_(n.out[1].id),
        minimum_(n.attrs.b("minimum")), a_(axis_split(n.attrs, n.in[0].shape)) {
    blocks_ = blocks_for(a_.outer * a_.inner, threads_);
  }
  void run(const Run& r) override {
    if (a_.outer * a_.inner * a_.extent == 0) return;
    running_extremes<<<blocks_, threads_, 0, r.stream>>>(
        r.at<float>(x_), r.at<float>(v_), r.at<int64_t>(i_), a_.outer, a_.extent, a_.inner,
        minimum_);
    PLANNER_LAUNCHED("CumMax");
  }

 private:
  int threads_;
  int x_, v_, i_;
  bool minimum_;
  AxisSplit a_;
  unsigned blocks_ = 1;
};

KernelPtr cummax(const Node& n) { return std::make_unique<CumMax>(n); }

}  // namespace

PLANNER_REGISTER_KERNELS(cummax) { r["CumMax"] = cummax; }

}  // namespace planner
