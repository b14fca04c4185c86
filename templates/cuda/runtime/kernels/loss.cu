// Losses and their gradients on the GPU, following planner/ops/loss.py (every loss is a mean):
//   SoftmaxCrossEntropy [logits (N,C), labels (N,) int64]   mean(logsumexp(z) - z[label])
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
// - logsumexp subtracts the row max first, so large logits never overflow exp.
#include <cmath>

#include "../groups.cuh"

namespace planner {
namespace {

// One row of logits per group: the loss term of the row (term) or its gradient row (dx).
template <bool kWarp>
__global__ void sce_rows(const float* __restrict__ x, const int64_t* __restrict__ labels,
                         int64_t rows, int64_t cols, const float* __restrict__ dloss,
                         double* __restrict__ term, float* __restrict__ dx) {
  const RowGroup<kWarp> g;
  for (int64_t row = g.first(); row < rows; row += g.stride()) {
    const float* z = x + row * cols;
    float m = -INFINITY;
    for (int64_t c = g.lane(); c < cols; c += g.size()) m = fmaxf(m, z[c]);
    m = g.max(m);
    float s = 0.f;
    for (int64_t c = g.lane(); c < cols; c += g.size()) s += expf(z[c] - m);
    s = g.sum(s);
    const int64_t label = labels[row];
    const bool bad = label < 0 || label >= cols;
    if (dx == nullptr) {
      if (g.lane() == 0)
        term[row] = bad ? NAN : static_cast<double>(logf(s)) - static_cast<double>(z[label] - m);
      continue;
    }
    // As the reference: (softmax - onehot) * (dloss / N), the scale rounded to float first.
    const float scale = *dloss / static_cast<float>(rows);
    float* d = dx + row * cols;
    for (int64_t c = g.lane(); c < cols; c += g.size()) {
      const float p = expf(z[c] - m) / s;
      d[c] = bad ? NAN : (p - (c == label ? 1.f : 0.f)) * scale;
    }
  }
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
      : grad_(n.in.size() == 3), threads_(block_threads(n)) {
    require_loss_types(n, true);
    const int off = grad_ ? 1 : 0;
    const TensorRef& x = n.in[off];
    if (x.shape.size() != 2) throw std::runtime_error("SoftmaxCrossEntropy: logits must be (N, C)");
    rows_ = x.shape[0];
    cols_ = x.shape[1];
    if (cols_ == 0 && rows_ > 0)
      throw std::runtime_error("SoftmaxCrossEntropy: logits with no classes");
    logits_ = x.id;
    labels_ = n.in[off + 1].id;
    dloss_ = grad_ ? n.in[0].id : -1;
    out_ = n.out[0].id;
    warp_ = cols_ <= kWarpRowMax;
    blocks_ = row_blocks(rows_, warp_, threads_);
  }
  size_t scratch_bytes() const override { return grad_ ? 0 : sizeof(double) * rows_; }
  void run(const Run& r) override {
    const float* x = r.at<float>(logits_);
    const int64_t* lab = r.at<int64_t>(labels_);
    const float* dloss = grad_ ? r.at<float>(dloss_) : nullptr;
    double* term = grad_ ? nullptr : reinterpret_cast<double*>(r.scratch);
    float* dx = grad_ ? r.at<float>(out_) : nullptr;
    if (rows_ > 0) {
      if (warp_)
        sce_rows<true><<<blocks_, threads_, 0, r.stream>>>(x, lab, rows_, cols_, dloss, term, dx);
      else
        sce_rows<false><<<blocks_, threads_, 0, r.stream>>>(x, lab, rows_, cols_, dloss, term, dx);
      PLANNER_LAUNCHED("SoftmaxCrossEntropy rows");
    }
    if (!grad_) {
      finish_mean<<<1, threads_, 0, r.stream>>>(term, rows_, static_cast<double>(rows_),
                                                r.at<float>(out_));
      PLANNER_LAUNCHED("SoftmaxCrossEntropy mean");
    }
  }

 private:
  bool grad_;
  int threads_;
  int64_t rows_ = 0, cols_ = 0;
  int logits_ = -1, labels_ = -1, dloss_ = -1, out_ = -1;
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
