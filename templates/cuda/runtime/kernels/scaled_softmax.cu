// ScaledSoftmax and ScaledSoftmaxGrad on the GPU (planner/ops/scaled_softmax.py): attention's
// Scale -> CausalMask -> Softmax along the last axis, and its gradient, one kernel each.
//   ScaledSoftmax      [x] -> y = softmax(scale * x, masked j > i when causal)
//   ScaledSoftmaxGrad  [dy, y] -> dx = scale * y * (dy - sum(dy * y)), 0 where masked
//
// Why it is built this way:
// - One warp per row for rows up to 1024 scores (attention's keys: a block per row would idle
//   most threads), one block per longer row; the max and the sums are fixed trees
//   (groups.cuh), so y is the same bits every step.
// - The scale is applied as each score is read and a causal row i reads only its first
//   min(i + 1, n) scores, writing 0 after them (exp(-inf - max) / sum): one read of the
//   scores for the max, one for exp and the sum, instead of three ops' passes.
// - A row whose read scores hold a NaN or +inf, or are all -inf, is NaN throughout, as the
//   composition's (x - max is NaN there); fmaxf drops NaN, so NaN is counted apart.
// - The gradient's sum(dy * y) runs over the whole row, masked positions too, as SoftmaxGrad's,
//   so a non-finite dy or y anywhere in the row gives its NaN as the composition does.
#include <cmath>

#include "../groups.cuh"
#include "scaled_softmax.h"

namespace planner {
namespace {

template <bool kWarp>
__global__ void scaled_softmax_rows(const float* __restrict__ x, ScaledSoftmaxRows a,
                                    float* __restrict__ y) {
  const RowGroup<kWarp> g;
  for (int64_t row = g.first(); row < a.rows; row += g.stride()) {
    const float* xr = x + row * a.n;
    float* yr = y + row * a.n;
    const int64_t w = a.width(row);
    float m = -INFINITY;
    int bad = 0;
    for (int64_t c = g.lane(); c < w; c += g.size()) {
      const float z = a.scale * xr[c];
      bad |= z != z;
      m = fmaxf(m, z);
    }
    m = g.max(m);
    bad = g.sum(bad);
    if (bad || !isfinite(m)) {  // uniform over the group: its barriers stay matched
      for (int64_t c = g.lane(); c < a.n; c += g.size()) yr[c] = NAN;
      continue;
    }
    float s = 0.f;
    for (int64_t c = g.lane(); c < w; c += g.size()) {
      const float e = expf(a.scale * xr[c] - m);
      yr[c] = e;
      s += e;
    }
    s = g.sum(s);
    for (int64_t c = g.lane(); c < a.n; c += g.size()) yr[c] = c < w ? yr[c] / s : 0.f;
  }
}

template <bool kWarp>
__global__ void scaled_softmax_grad_rows(const float* __restrict__ dy,
                                         const float* __restrict__ y, ScaledSoftmaxRows a,
                                         float* __restrict__ dx) {
  const RowGroup<kWarp> g;
  for (int64_t row = g.first(); row < a.rows; row += g.stride()) {
    const float* dyr = dy + row * a.n;
    const float* yr = y + row * a.n;
    float* dxr = dx + row * a.n;
    const int64_t w = a.width(row);
    float dot = 0.f;
    for (int64_t c = g.lane(); c < a.n; c += g.size()) dot += dyr[c] * yr[c];
    dot = g.sum(dot);
    for (int64_t c = g.lane(); c < a.n; c += g.size())
      dxr[c] = c < w ? yr[c] * (dyr[c] - dot) * a.scale : 0.f;
  }
}

class ScaledSoftmax : public Kernel {
 public:
  ScaledSoftmax(const Node& n, bool grad) : grad_(grad), threads_(block_threads(n)) {
    a_ = scaled_softmax_geometry(n);  // common/scaled_softmax.h
    warp_ = a_.n <= kWarpRowMax;
    blocks_ = row_blocks(a_.rows, warp_, threads_);
    for (const TensorRef& t : n.in) ids_.push_back(t.id);
    ids_.push_back(n.out[0].id);
  }
  void run(const Run& r) override {
    if (a_.rows == 0) return;
    auto p = [&](int k) { return r.at<float>(ids_[k]); };
    if (grad_ && warp_)
      scaled_softmax_grad_rows<true><<<blocks_, threads_, 0, r.stream>>>(p(0), p(1), a_, p(2));
    else if (grad_)
      scaled_softmax_grad_rows<false><<<blocks_, threads_, 0, r.stream>>>(p(0), p(1), a_, p(2));
    else if (warp_)
      scaled_softmax_rows<true><<<blocks_, threads_, 0, r.stream>>>(p(0), a_, p(1));
    else
      scaled_softmax_rows<false><<<blocks_, threads_, 0, r.stream>>>(p(0), a_, p(1));
    PLANNER_LAUNCHED(grad_ ? "ScaledSoftmaxGrad" : "ScaledSoftmax");
  }

 private:
  bool grad_;
  int threads_;
  ScaledSoftmaxRows a_{};
  bool warp_ = true;
  unsigned blocks_ = 1;
  std::vector<int> ids_;
};

KernelPtr scaled_softmax(const Node& n) { return std::make_unique<ScaledSoftmax>(n, false); }
KernelPtr scaled_softmax_grad(const Node& n) { return std::make_unique<ScaledSoftmax>(n, true); }

}  // namespace

PLANNER_REGISTER_KERNELS(scaled_softmax) {
  r["ScaledSoftmax"] = scaled_softmax;
  r["ScaledSoftmaxGrad"] = scaled_softmax_grad;
}

}  // namespace planner
