// CumMax (planner/ops/cummax.py) on x seen as (outer, n, inner): one line of n elements per
// (outer, inner) pair, walked in order; lines split between threads.
#include <omp.h>

#include <cmath>

#include "../loops.h"

namespace planner {
namespace {

class CumMax : public Kernel {
 public:
  explicit CumMax(const Node& n)
      : x_(n.in[0].id), v_(n.out[0].id), i_(n.out[1].id), minimum_(n.attrs.b("minimum")),
        a_(axis_split(n.attrs, n.in[0].shape)) {
    if (n.in[0].dtype != F32 || n.out[0].dtype != F32 || n.out[1].dtype != I64)
      throw std::runtime_error("CumMax: float32 values, int64 indices");
  }
  void run(const Run& r) override {
    const float* x = r.at<float>(x_);
    float* v = r.at<float>(v_);
    int64_t* idx = r.at<int64_t>(i_);
    const int64_t n = a_.extent, inner = a_.inner, lines = a_.outer * inner;
    const bool minimum = minimum_;
#pragma omp parallel for if(lines * n >= kGrain)
    for (int64_t line = 0; line < lines; ++line) {
      const int64_t base = (line / inner) * n * inner + line % inner;
      float held = 0.0f;
      int64_t at = 0;
      for (int64_t k = 0; k < n; ++k) {
        const float e = x[base + k * inner];
        const bool better = minimum ? e <= held : e >= held;
        if (k == 0 || std::isnan(e) || (!std::isnan(held) && better)) {
          held = e;
          at = k;
        }
        v[base + k * inner] = held;
        idx[base + k * inner] = at;
      }
    }
  }

 private:
  int x_, v_, i_;
  bool minimum_;
  AxisSplit a_;
};

KernelPtr cummax(const Node& n) { return std::make_unique<CumMax>(n); }

}  // namespace

PLANNER_REGISTER_KERNELS(cummax) { r["CumMax"] = cummax; }

}  // namespace planner
