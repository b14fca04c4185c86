// Losses and their gradients on the GPU, following planner/ops/loss.py (every loss is a mean):
//   SoftmaxCrossEntropy [logits (N,C,...), labels (N,...) int64]   F.cross_entropy: classes on
//       `axis`, labels equal to ignore_index skipped, label_smoothing; mean over the counted
//   SigmoidBCE [z, t]      mean(max(z,0) - z t + log1p(exp(-|z|)))
//   MSE [p, t]             mean((p - t)^2)
// and *Grad [dloss, ...] -> d(first input).
//
// Why it is built this way:
// - The scalar loss is reduced without atomics, in two passes through the op's scratch area
//   (per-row terms or per-block partials in double, then one block sums them in a fixed order):
//   the same inputs give the same loss bit for bit, every step, whatever the stream timing.
// - dloss is a device scalar: the gradients read it in the kernel, never on the host.
// - A label outside [0, C) cannot raise StepError as on the CPU without a host read (a sync),
//   so it poisons instead: that row's loss term, hence the loss, and its gradient row are NaN.
// - The count of labels not ignore_index is computed on the device each step (labels change).
// - logsumexp subtracts the row max first, so large logits never overflow exp.
#include <cmath>

#include "../groups.cuh"
#include "loss.h"

namespace planner {
namespace {

// One position per group (outer * inner of them, classes strided by inner, as the CPU
// kernel): the loss term of the position (term; 0 where its label is ignored) or its gradient
// row (dx), with count (a device scalar) the number of labels not ignored.
template <bool kWarp>
__global__ void sce_rows(const float* __restrict__ x, const int64_t* __restrict__ labels,
                         int64_t positions, int64_t cols, int64_t inner, int64_t ignore,
                         float eps, const float* __restrict__ dloss,
                         const double* __restrict__ count, double* __restrict__ term,
                         float* __restrict__ dx) {
  const RowGroup<kWarp> g;
  for (int64_t row = g.first(); row < positions; row += g.stride()) {
    const int64_t base = (row / inner) * cols * inner + row % inner;
    const float* z = x + base;
    const int64_t label = labels[row];
    if (label == ignore) {
      if (dx == nullptr) {
        if (g.lane() == 0) term[row] = 0.0;
      } else {
        // 0, or NaN when every label is ignored (the mean of nothing, as the reference).
        const float scale = *dloss / static_cast<float>(*count);
        for (int64_t c = g.lane(); c < cols; c += g.size()) dx[base + c * inner] = 0.f * scale;
      }
      continue;
    }
    float m = -INFINITY;
    for (int64_t c = g.lane(); c < cols; c += g.size()) m = fmaxf(m, z[c * inner]);
    m = g.max(m);
    float s = 0.f, sum_z = 0.f;
    for (int64_t c = g.lane(); c < cols; c += g.size()) {
      s += expf(z[c * inner] - m);
      sum_z += z[c * inner] - m;
    }
    s = g.sum(s);
    sum_z = g.sum(sum_z);
    const bool bad = label < 0 || label >= cols;
    if (dx == nullptr) {
      if (g.lane() == 0) {
        const double lse = logf(s);
        const double nll = bad ? NAN : lse - static_cast<double>(z[label * inner] - m);
        term[row] = eps == 0.f ? nll
                               : (1.0 - eps) * nll + eps * (lse - sum_z / static_cast<double>(cols));
      }
      continue;
    }
    // As the reference: (softmax - (1 - eps) onehot - eps / C) * (dloss / count), the scale
    // rounded to float first.
    const float scale = *dloss / static_cast<float>(*count);
    const float spread = eps / static_cast<float>(cols);
    for (int64_t c = g.lane(); c < cols; c += g.size()) {
      const float p = expf(z[c * inner] - m) / s;
      dx[base + c * inner] = bad ? NAN : (p - spread - (c == label ? 1.f - eps : 0.f)) * scale;
    }
  }
}

// One block: the number of labels not equal to ignore, in a fixed order.
__global__ void count_labels(const int64_t* __restrict__ labels, int64_t n, int64_t ignore,
                             double* __restrict__ count) {
  double acc = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) acc += labels[i] != ignore ? 1.0 : 0.0;
  acc = block_reduce(acc, SumOp{}, 0.0);
  if (threadIdx.x == 0) *count = acc;
}

// One block: out = sum(term[0..n)) / *count, summed in a fixed order (NaN when count is 0).
__global__ void finish_ce(const double* __restrict__ term, int64_t n,
                          const double* __restrict__ count, float* __restrict__ out) {
  double acc = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) acc += term[i];
  acc = block_reduce(acc, SumOp{}, 0.0);
  if (threadIdx.x == 0) *out = static_cast<float>(acc / *count);
}

// Per-block partial sums (double) of a pair loss's element terms, grid-stride.
template <char kKind>
__global__ void pair_partials(const float* __restrict__ x, const float* __restrict__ t, int64_t n,
                              double* __restrict__ part) {
  double acc = 0;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float z = x[i], y = t[i];
    float e;
    if (kKind == 'b') {
      e = fmaxf(z, 0.f) - z * y + log1pf(expf(-fabsf(z)));
    } else {
      const float d = z - y;
      e = d * d;
    }
    acc += static_cast<double>(e);
  }
  acc = block_reduce(acc, SumOp{}, 0.0);
  if (threadIdx.x == 0) part[blockIdx.x] = acc;
}

// One block: out = sum(part[0..n)) / count, summed in a fixed order. count 0 gives NaN (the
// mean of nothing, as numpy).
__global__ void finish_mean(const double* __restrict__ part, int64_t n, double count,
                            float* __restrict__ out) {
  double acc = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) acc += part[i];
  acc = block_reduce(acc, SumOp{}, 0.0);
  if (threadIdx.x == 0) *out = static_cast<float>(acc / count);
}

template <char kKind>
__global__ void pair_grad(const float* __restrict__ x, const float* __restrict__ t, int64_t n,
                          const float* __restrict__ dloss, float* __restrict__ dx) {
  // The weight of one element in the mean, in float as the reference: dloss / max(size, 1).
  const float w = *dloss / static_cast<float>(n > 1 ? n : 1);
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float z = x[i];
    if (kKind == 'b') {
      const float e = expf(-fabsf(z));
      const float s = z >= 0.f ? 1.f / (1.f + e) : e / (1.f + e);
      dx[i] = (s - t[i]) * w;
    } else {
      dx[i] = (z - t[i]) * (2.f * w);
    }
  }
}

void require_loss_types(const Node& n, bool labels) {
  for (size_t k = 0; k < n.in.size(); ++k) {
    const bool want_i64 = labels && k + 1 == n.in.size();
    if (n.in[k].dtype != (want_i64 ? I64 : F32))
      throw std::runtime_error(want_i64 ? "labels must be int64" : "losses take float32 tensors");
  }
  if (n.out[0].dtype != F32) throw std::runtime_error("losses write float32 tensors");
}

class SoftmaxCrossEntropy : public Kernel {
 public:
  explicit SoftmaxCrossEntropy(const Node& n)
      : e_(cross_entropy(n)), threads_(block_threads(n)) {  // common/loss.h
    require_loss_types(n, true);
    rows_ = e_.classes.outer * e_.classes.inner;
    if (e_.classes.extent == 0 && rows_ > 0)
      throw std::runtime_error("SoftmaxCrossEntropy: logits with no classes");
    warp_ = e_.classes.extent <= kWarpRowMax;
    blocks_ = row_blocks(rows_, warp_, threads_);
  }
  // The count of labels not ignored (a double), then the forward's per-position terms.
  size_t scratch_bytes() const override {
    return sizeof(double) * (e_.grad ? 1 : 1 + rows_);
  }
  void run(const Run& r) override {
    const float* x = r.at<float>(e_.logits);
    const int64_t* lab = r.at<int64_t>(e_.labels);
    const float* dloss = e_.grad ? r.at<float>(e_.dloss) : nullptr;
    double* count = reinterpret_cast<double*>(r.scratch);
    double* term = e_.grad ? nullptr : count + 1;
    float* dx = e_.grad ? r.at<float>(e_.out) : nullptr;
    count_labels<<<1, threads_, 0, r.stream>>>(lab, rows_, e_.ignore_index, count);
    PLANNER_LAUNCHED("SoftmaxCrossEntropy count");
    if (rows_ > 0) {
      const int64_t cols = e_.classes.extent, inner = e_.classes.inner;
      const float eps = static_cast<float>(e_.label_smoothing);
      if (warp_)
        sce_rows<true><<<blocks_, threads_, 0, r.stream>>>(x, lab, rows_, cols, inner,
                                                           e_.ignore_index, eps, dloss, count,
                                                           term, dx);
      else
        sce_rows<false><<<blocks_, threads_, 0, r.stream>>>(x, lab, rows_, cols, inner,
                                                            e_.ignore_index, eps, dloss, count,
                                                            term, dx);
      PLANNER_LAUNCHED("SoftmaxCrossEntropy rows");
    }
    if (!e_.grad) {
      finish_ce<<<1, threads_, 0, r.stream>>>(term, rows_, count, r.at<float>(e_.out));
      PLANNER_LAUNCHED("SoftmaxCrossEntropy mean");
    }
  }

 private:
  CrossEntropy e_;
  int threads_;
  int64_t rows_ = 0;  // positions, one label each
  bool warp_ = true;
  unsigned blocks_ = 1;
};

// Element-pair losses: kind 'b' (SigmoidBCE) or 'm' (MSE); the gradient when there is a dloss.
template <char kKind>
class PairLoss : public Kernel {
 public:
  explicit PairLoss(const Node& n)
      : grad_(n.in.size() == 3), threads_(block_threads(n)),
        size_(n.in[grad_ ? 1 : 0].size()), x_(n.in[grad_ ? 1 : 0].id),
        t_(n.in[grad_ ? 2 : 1].id), dloss_(grad_ ? n.in[0].id : -1), out_(n.out[0].id) {
    require_loss_types(n, false);
    blocks_ = blocks_for(size_, threads_);
    // The partials: fixed at load (so the summation order is), at most 1024 of them.
    if (!grad_ && blocks_ > 1024) blocks_ = 1024;
  }
  size_t scratch_bytes() const override { return grad_ ? 0 : sizeof(double) * blocks_; }
  void run(const Run& r) override {
    const float* x = r.at<float>(x_);
    const float* t = r.at<float>(t_);
    if (grad_) {
      if (size_ == 0) return;
      pair_grad<kKind><<<blocks_, threads_, 0, r.stream>>>(x, t, size_, r.at<float>(dloss_),
                                                           r.at<float>(out_));
      PLANNER_LAUNCHED(kKind == 'b' ? "SigmoidBCEGrad" : "MSEGrad");
      return;
    }
    double* part = reinterpret_cast<double*>(r.scratch);
    pair_partials<kKind><<<blocks_, threads_, 0, r.stream>>>(x, t, size_, part);
    PLANNER_LAUNCHED(kKind == 'b' ? "SigmoidBCE partials" : "MSE partials");
    finish_mean<<<1, threads_, 0, r.stream>>>(part, blocks_,
                                              static_cast<double>(size_ > 1 ? size_ : 1),
                                              r.at<float>(out_));
    PLANNER_LAUNCHED(kKind == 'b' ? "SigmoidBCE mean" : "MSE mean");
  }

 private:
  bool grad_;
  int threads_;
  int64_t size_;
  int x_, t_, dloss_, out_;
  unsigned blocks_ = 1;
};

KernelPtr sce(const Node& n) { return std::make_unique<SoftmaxCrossEntropy>(n); }
KernelPtr bce(const Node& n) { return std::make_unique<PairLoss<'b'>>(n); }
KernelPtr mse(const Node& n) { return std::make_unique<PairLoss<'m'>>(n); }

}  // namespace

PLANNER_REGISTER_KERNELS(loss) {
  r["SoftmaxCrossEntropy"] = sce;
  r["SoftmaxCrossEntropyGrad"] = sce;
  r["SigmoidBCE"] = bce;
  r["SigmoidBCEGrad"] = bce;
  r["MSE"] = mse;
  r["MSEGrad"] = mse;
}

}  // namespace planner
