// Losses and their gradients as plain OpenMP loops over static shapes. Each loss is a mean
// (a scalar); sums run in double, as accurate as numpy's pairwise float32 sums or better.
//   SoftmaxCrossEntropy [logits (N,C), labels (N,) int64]   mean(logsumexp(z) - z[label])
//   SigmoidBCE [z, t]      mean(max(z,0) - z t + log1p(exp(-|z|)))
//   MSE [p, t]             mean((p - t)^2)
// and *Grad [dloss, ...] -> d(first input).
// SoftmaxCrossEntropyGrad's softmax is oneDNN's (vectorized; a scalar exp loop in double took
// 40% of a small GPT's step), then one pass per row subtracts the one-hot label and scales; a
// row holding NaN or +inf, or only -inf, becomes NaN, as the reference's (as in softmax.cpp).
// The forward's log-sum-exp runs a vectorizable float exp (exp_nonpositive) summed in double.
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>

#include "../dnnl_kernel.h"
#include "../loops.h"

namespace planner {
namespace {

void check_labels(const int64_t* labels, int64_t n, int64_t classes) {
  for (int64_t i = 0; i < n; ++i)
    if (labels[i] < 0 || labels[i] >= classes)
      throw StepError("label " + std::to_string(labels[i]) + " out of range [0, " +
                      std::to_string(classes) + ")");
}

// c ? a : b without a branch: g++ -O2 does not if-convert a branch inside a loop, which keeps
// the loop scalar even under omp simd (checked with -fopt-info-vec).
inline float select(bool c, float a, float b) {
  int32_t ab, bb;
  std::memcpy(&ab, &a, sizeof ab);
  std::memcpy(&bb, &b, sizeof bb);
  const int32_t mask = -static_cast<int32_t>(c);
  const int32_t bits = (ab & mask) | (bb & ~mask);
  float out;
  std::memcpy(&out, &bits, sizeof out);
  return out;
}

// exp(x) for a shifted logit x <= 0, in plain float arithmetic a loop vectorizes (libm's expf
// does not): x = n ln2 + r with |r| <= ln2 / 2, exp(r) by Cephes' expf polynomial (about 1 ulp),
// 2^n written into the exponent bits. Below -87 (and -inf) it gives exp(-87) ~ 1.6e-38, not 0:
// next to the row maximum's term 1 that changes a sum by less than float's rounding.
inline float exp_nonpositive(float x) {
  x = select(x < -87.f, -87.f, x);
  const int n = static_cast<int>(x * 1.44269504088896341f - 0.5f);  // round to nearest, x <= 0
  const float fn = static_cast<float>(n);
  const float r = (x - fn * 0.693359375f) + fn * 2.12194440e-4f;  // x - n ln2 in two parts
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float e = p * r * r + r + 1.f;
  const int32_t bits = (n + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return e * scale;
}

// True where a row's softmax is NaN in the reference: it holds NaN or +inf, or only -inf.
inline bool nan_row(const float* z, int64_t cols) {
  const float inf = std::numeric_limits<float>::infinity();
  int bad = 0, finite_or_inf = 0;
#pragma omp simd reduction(| : bad, finite_or_inf)
  for (int64_t c = 0; c < cols; ++c) {
    bad |= (z[c] != z[c]) | (z[c] == inf);
    finite_or_inf |= z[c] != -inf;
  }
  return bad || !finite_or_inf;
}

class SoftmaxCrossEntropy : public DnnlKernel {
 public:
  explicit SoftmaxCrossEntropy(const Node& n)
      : grad_(n.in.size() == 3), off_(grad_ ? 1 : 0), rows_(n.in[off_].shape[0]),
        cols_(n.in[off_].shape[1]), logits_(n.in[off_].id), labels_(n.in[off_ + 1].id),
        dloss_(grad_ ? n.in[0].id : -1), out_(n.out[0].id) {
    require_f32(n);
    if (!grad_) return;
    auto md = plain_md(n.in[off_].shape, n.in[off_].dtype);
    dnnl::softmax_forward::primitive_desc pd(n.engine, dnnl::prop_kind::forward_inference,
                                             dnnl::algorithm::softmax_accurate, md, md, 1,
                                             user_scratchpad());
    add(dnnl::softmax_forward(pd), pd, {{DNNL_ARG_SRC, logits_}, {DNNL_ARG_DST, out_}});
  }
  void run(const Run& r) override {
    const float* x = r.at<float>(logits_);
    const int64_t* lab = r.at<int64_t>(labels_);
    check_labels(lab, rows_, cols_);
    const int64_t rows = rows_, cols = cols_;
    const float nan = std::numeric_limits<float>::quiet_NaN();
    if (!grad_) {
      double total = 0;
#pragma omp parallel for reduction(+ : total)
      for (int64_t i = 0; i < rows; ++i) {
        const float* z = x + i * cols;
        if (nan_row(z, cols)) {
          total += nan;
          continue;
        }
        float m = z[0];
#pragma omp simd reduction(max : m)
        for (int64_t c = 1; c < cols; ++c) m = select(z[c] > m, z[c], m);
        double s = 0;
#pragma omp simd reduction(+ : s)
        for (int64_t c = 0; c < cols; ++c) s += exp_nonpositive(z[c] - m);
        total += std::log(s) - static_cast<double>(z[lab[i]] - m);
      }
      *r.at<float>(out_) = static_cast<float>(total / static_cast<double>(rows));
      return;
    }
    const float scale = *r.at<float>(dloss_) / static_cast<float>(rows);
    run_all(r);  // dx = softmax(logits)
    float* dx = r.at<float>(out_);
#pragma omp parallel for
    for (int64_t i = 0; i < rows; ++i) {
      float* d = dx + i * cols;
      if (nan_row(x + i * cols, cols)) {
        for (int64_t c = 0; c < cols; ++c) d[c] = nan;
        continue;
      }
      d[lab[i]] -= 1.f;
#pragma omp simd
      for (int64_t c = 0; c < cols; ++c) d[c] *= scale;
    }
  }

 private:
  bool grad_;
  int off_;
  int64_t rows_, cols_;
  int logits_, labels_, dloss_, out_;
};

// Element-pair losses: kind 'b' (SigmoidBCE) or 'm' (MSE); gradient when there is a dloss.
class PairLoss : public Kernel {
 public:
  PairLoss(const Node& n, char kind)
      : kind_(kind), grad_(n.in.size() == 3), size_(n.in[grad_ ? 1 : 0].size()),
        x_(n.in[grad_ ? 1 : 0].id), t_(n.in[grad_ ? 2 : 1].id), dloss_(grad_ ? n.in[0].id : -1),
        out_(n.out[0].id) {
    require_f32(n);
  }
  void run(const Run& r) override {
    const float* x = r.at<float>(x_);
    const float* t = r.at<float>(t_);
    const int64_t size = size_;
    if (!grad_) {
      double total = 0;
#pragma omp parallel for reduction(+ : total)
      for (int64_t i = 0; i < size; ++i) {
        double z = x[i], y = t[i];
        total += kind_ == 'b' ? std::max(z, 0.0) - z * y + std::log1p(std::exp(-std::fabs(z)))
                              : (z - y) * (z - y);
      }
      *r.at<float>(out_) = static_cast<float>(total / static_cast<double>(std::max<int64_t>(size, 1)));
      return;
    }
    const float w = *r.at<float>(dloss_) / static_cast<float>(std::max<int64_t>(size, 1));
    float* dx = r.at<float>(out_);
    if (kind_ == 'b') {
#pragma omp parallel for
      for (int64_t i = 0; i < size; ++i) {
        float e = std::exp(-std::fabs(x[i]));
        float s = x[i] >= 0 ? 1.f / (1.f + e) : e / (1.f + e);
        dx[i] = (s - t[i]) * w;
      }
    } else {
      const float w2 = 2.f * w;
#pragma omp parallel for
      for (int64_t i = 0; i < size; ++i) dx[i] = (x[i] - t[i]) * w2;
    }
  }

 private:
  char kind_;
  bool grad_;
  int64_t size_;
  int x_, t_, dloss_, out_;
};

KernelPtr sce(const Node& n) { return std::make_unique<SoftmaxCrossEntropy>(n); }
KernelPtr bce(const Node& n) { return std::make_unique<PairLoss>(n, 'b'); }
KernelPtr mse(const Node& n) { return std::make_unique<PairLoss>(n, 'm'); }

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
