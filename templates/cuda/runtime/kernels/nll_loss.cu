// NLLLoss and NLLLossGrad on the GPU, following planner/ops/nll_loss.py and the CPU kernel: x
// seen as (outer, classes, inner), one thread per position (outer * inner of them). Per position
//   l = -(1 - eps) w[y] x[y] - (eps / C) sum_c w[c] x[c]   (0 where y == ignore_index)
// Sums are reduced without atomics (per-position terms in double in the op's scratch, then one
// block sums them in a fixed order), so a step's loss is the same bit for bit every run. A label
// outside [0, C) poisons its term (hence a reduced loss) and its gradient row with NaN, as
// SoftmaxCrossEntropy does (a StepError would need a host read).
#include <cmath>

#include "../groups.cuh"
#include "nll_loss.h"

namespace planner {
namespace {

__device__ __forceinline__ bool bad_label(int64_t y, int64_t cols) { return y < 0 || y >= cols; }

// term[p] = l (double), wy[p] = w[y] (0 where ignored); `none` also writes out[p] = l.
__global__ void nll_terms(const float* __restrict__ x, const int64_t* __restrict__ labels,
                          const float* __restrict__ w, int64_t positions, int64_t cols,
                          int64_t inner, int64_t ignore, double eps, double* __restrict__ term,
                          double* __restrict__ wy, float* __restrict__ none_out) {
  for (int64_t p = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; p < positions;
       p += int64_t{gridDim.x} * blockDim.x) {
    const float* xp = x + (p / inner) * cols * inner + p % inner;
    const int64_t y = labels[p];
    double l = 0, weight = 0;
    if (y != ignore) {
      if (bad_label(y, cols)) {
        l = NAN;
      } else {
        weight = w ? w[y] : 1.0;
        l = -(1.0 - eps) * weight * static_cast<double>(xp[y * inner]);
        if (eps != 0) {
          double s = 0;
          for (int64_t c = 0; c < cols; ++c) s += (w ? w[c] : 1.0) * xp[c * inner];
          l -= eps / static_cast<double>(cols) * s;
        }
      }
    }
    term[p] = l;
    wy[p] = weight;
    if (none_out) none_out[p] = static_cast<float>(l);
  }
}

// One block: the sum of the weights of the labels not ignored (the mean's denominator).
__global__ void nll_weight_sum(const int64_t* __restrict__ labels, const float* __restrict__ w,
                               int64_t positions, int64_t cols, int64_t ignore,
                               double* __restrict__ total) {
  double acc = 0;
  for (int64_t p = threadIdx.x; p < positions; p += blockDim.x) {
    const int64_t y = labels[p];
    if (y != ignore) acc += bad_label(y, cols) ? 0.0 : (w ? w[y] : 1.0);
  }
  acc = block_reduce(acc, SumOp{}, 0.0);
  if (threadIdx.x == 0) *total = acc;
}

// One block: out = sum(term) (sum) or sum(term) / sum(wy) (mean), in a fixed order.
__global__ void nll_finish(const double* __restrict__ term, const double* __restrict__ wy,
                           int64_t positions, bool mean, float* __restrict__ out) {
  double acc = 0, weights = 0;
  for (int64_t p = threadIdx.x; p < positions; p += blockDim.x) {
    acc += term[p];
    weights += wy[p];
  }
  acc = block_reduce(acc, SumOp{}, 0.0);
  __syncthreads();
  weights = block_reduce(weights, SumOp{}, 0.0);
  if (threadIdx.x == 0) *out = static_cast<float>(mean ? acc / weights : acc);
}

__global__ void nll_grad(const float* __restrict__ dloss, const int64_t* __restrict__ labels,
                         const float* __restrict__ w, const double* __restrict__ denominator,
                         int64_t positions, int64_t cols, int64_t inner, int64_t ignore,
                         double eps, bool per_position, float* __restrict__ dx) {
  // As the reference: the weight dloss / denominator rounded to float first.
  const float scalar = denominator ? dloss[0] / static_cast<float>(*denominator) : dloss[0];
  const double spread = eps / static_cast<double>(cols);
  for (int64_t p = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; p < positions;
       p += int64_t{gridDim.x} * blockDim.x) {
    float* d = dx + (p / inner) * cols * inner + p % inner;
    const int64_t y = labels[p];
    if (y == ignore) {
      for (int64_t c = 0; c < cols; ++c) d[c * inner] = 0.f;
      continue;
    }
    if (bad_label(y, cols)) {
      for (int64_t c = 0; c < cols; ++c) d[c * inner] = NAN;
      continue;
    }
    const float g = per_position ? dloss[p] : scalar;
    for (int64_t c = 0; c < cols; ++c)
      d[c * inner] = -g * static_cast<float>(spread * (w ? w[c] : 1.0));
    d[y * inner] -= g * static_cast<float>((1.0 - eps) * (w ? w[y] : 1.0));
  }
}

class NLLLoss : public Kernel {
 public:
  explicit NLLLoss(const Node& n) : e_(nll_loss(n)), threads_(block_threads(n)) {
    for (const TensorRef& t : n.in)
      if (t.dtype != F32 && t.dtype != I64)
        throw std::runtime_error("NLLLoss takes float32 tensors and int64 labels");
    if (n.out[0].dtype != F32) throw std::runtime_error("NLLLoss writes float32 tensors");
    blocks_ = blocks_for(e_.positions(), threads_);
  }
  // The forward's per-position terms and weights; the gradient's denominator.
  size_t scratch_bytes() const override {
    return sizeof(double) * (e_.grad ? 1 : 2 * e_.positions());
  }
  void run(const Run& r) override {
    const int64_t* lab = r.at<int64_t>(e_.labels);
    const float* w = e_.weight >= 0 ? r.at<float>(e_.weight) : nullptr;
    const int64_t positions = e_.positions(), cols = e_.classes.extent;
    const bool none = e_.reduction == LossReduction::kNone;
    double* scratch = reinterpret_cast<double*>(r.scratch);
    if (!e_.grad) {
      float* out = r.at<float>(e_.out);
      if (positions > 0) {
        nll_terms<<<blocks_, threads_, 0, r.stream>>>(
            r.at<float>(e_.x), lab, w, positions, cols, e_.classes.inner, e_.ignore_index,
            e_.label_smoothing, scratch, scratch + positions, none ? out : nullptr);
        PLANNER_LAUNCHED("NLLLoss terms");
      }
      if (!none) {
        nll_finish<<<1, threads_, 0, r.stream>>>(scratch, scratch + positions, positions,
                                                 e_.reduction == LossReduction::kMean, out);
        PLANNER_LAUNCHED("NLLLoss reduce");
      }
      return;
    }
    const bool mean = e_.reduction == LossReduction::kMean;
    if (mean) {
      nll_weight_sum<<<1, threads_, 0, r.stream>>>(lab, w, positions, cols, e_.ignore_index,
                                                   scratch);
      PLANNER_LAUNCHED("NLLLossGrad weights");
    }
    if (positions == 0) return;
    nll_grad<<<blocks_, threads_, 0, r.stream>>>(r.at<float>(e_.dloss), lab, w,
                                                 mean ? scratch : nullptr, positions, cols,
                                                 e_.classes.inner, e_.ignore_index,
                                                 e_.label_smoothing, none, r.at<float>(e_.out));
    PLANNER_LAUNCHED("NLLLossGrad");
  }

 private:
  NllLoss e_;
  int threads_;
  unsigned blocks_ = 1;
};

KernelPtr nll_loss_kernel(const Node& n) { return std::make_unique<NLLLoss>(n); }

}  // namespace

PLANNER_REGISTER_KERNELS(nll_loss) {
  r["NLLLoss"] = nll_loss_kernel;
  r["NLLLossGrad"] = nll_loss_kernel;
}

}  // namespace planner
