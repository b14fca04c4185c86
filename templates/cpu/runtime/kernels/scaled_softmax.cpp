// ScaledSoftmax and ScaledSoftmaxGrad (planner/ops/scaled_softmax.py): attention's Scale ->
// CausalMask -> Softmax along the last axis in one pass over the scores, and its gradient.
//
// Why hand-written: oneDNN's softmax takes neither the scale nor the mask, and gives a
// non-finite row another answer than numpy's (softmax.cpp fixes that in a second pass). Here
// each row is read twice from L1 (max, then exp and sum) and written twice (exp, normalise):
//   - the scale is applied as each score is read (the same float product as Scale's);
//   - a causal row i reads only its first min(i + 1, n) scores and writes 0 after them, what
//     exp(-inf - max) / sum gives;
//   - a row whose read scores hold a NaN or +inf, or are all -inf, is NaN throughout, as the
//     composition's (x - max is NaN there): an infinite max or a NaN sum says so (a NaN
//     score's term is NaN: vmath.h's functions pass NaN through; a NaN flag reduced in the max
//     pass instead made the op 10-20% slower in bench_transformer.py --ops);
//   - exp is vmath.h's exp_nonpositive: relative error under 1.5 x 2^-24 (at most 1.01 ulp)
//     on [-87, 0], measured against double exp on every 7th float there; below -87 (a term
//     under 1.7e-38 next to the maximum's 1) it gives 0, as -inf gives; the terms are then
//     multiplied by 1 / sum (one rounding more than a division, a third of the time).
// The gradient reads the whole row for sum(dy * y), masked positions too, so that a non-finite
// dy or y anywhere makes the row's gradient NaN as SoftmaxGrad's does; it writes
// scale * y * (dy - sum) where unmasked and 0 where masked.
#include <algorithm>
#include <cmath>
#include <limits>

#include "../dnnl_kernel.h"
#include "../vmath.h"
#include "scaled_softmax.h"

// GCC 12's -O2 vectorizer cost model ("very cheap") leaves these loops of run-time length with
// scalar prologues and remainders; the dynamic model, with the masked lanes and 1 / sum, took
// the forward from 215 to 86-92 us on gpt's scores (bench/RESULTS.md, the fused softmax).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("vect-cost-model=dynamic")
#endif

namespace planner {
namespace {

// The rows both ops share (common/scaled_softmax.h) and this backend's loop extent.
struct Rows : ScaledSoftmaxRows {
  explicit Rows(const Node& node) : ScaledSoftmaxRows(scaled_softmax_geometry(node)) {}
  // The loops' extent: w rounded up to 16 lanes (within the row), the lanes past w masked, so
  // that a causal row's loops run whole vectors, without scalar remainders of exp.
  int64_t padded(int64_t w) const { return std::min<int64_t>(n, (w + 15) & ~int64_t{15}); }
};

class ScaledSoftmax : public Kernel {
 public:
  explicit ScaledSoftmax(const Node& n) : v_(n), x_(n.in[0].id), y_(n.out[0].id) {}
  void run(const Run& r) override {
    const float* x = r.at<float>(x_);
    float* y = r.at<float>(y_);
    const Rows v = v_;
    const float s = v.scale, inf = std::numeric_limits<float>::infinity();
    const float nan = std::numeric_limits<float>::quiet_NaN();
#pragma omp parallel for
    for (int64_t row = 0; row < v.rows; ++row) {
      const float* xr = x + row * v.n;
      float* yr = y + row * v.n;
      const int64_t w = v.width(row), wp = v.padded(w);
      float m = -inf;
#pragma omp simd reduction(max : m)
      for (int64_t j = 0; j < wp; ++j) m = std::max(m, select(j < w, s * xr[j], -inf));
      float sum = 0.f;
      if (m > -inf && m < inf) {
#pragma omp simd reduction(+ : sum)
        for (int64_t j = 0; j < wp; ++j) {
          const float d = s * xr[j] - m;  // NaN for a NaN score: the sum is NaN then
          const float e = select((j < w) & !(d < -87.f), exp_nonpositive(d), 0.f);
          yr[j] = e;
          sum += e;
        }
      }
      if (!(m > -inf && m < inf) || sum != sum) {
        for (int64_t j = 0; j < v.n; ++j) yr[j] = nan;
        continue;
      }
      const float inv = 1.f / sum;
#pragma omp simd
      for (int64_t j = 0; j < wp; ++j) yr[j] *= inv;
      for (int64_t j = wp; j < v.n; ++j) yr[j] = 0.f;
    }
  }

 private:
  Rows v_;
  int x_, y_;
};

class ScaledSoftmaxGrad : public Kernel {
 public:
  explicit ScaledSoftmaxGrad(const Node& n)
      : v_(n), dy_(n.in[0].id), y_(n.in[1].id), dx_(n.out[0].id) {}
  void run(const Run& r) override {
    const float* dy = r.at<float>(dy_);
    const float* y = r.at<float>(y_);
    float* dx = r.at<float>(dx_);
    const Rows v = v_;
    const float s = v.scale;
#pragma omp parallel for
    for (int64_t row = 0; row < v.rows; ++row) {
      const float* dyr = dy + row * v.n;
      const float* yr = y + row * v.n;
      float* dxr = dx + row * v.n;
      const int64_t w = v.width(row), wp = v.padded(w);
      float dot = 0.f;
#pragma omp simd reduction(+ : dot)
      for (int64_t j = 0; j < v.n; ++j) dot += dyr[j] * yr[j];
#pragma omp simd
      for (int64_t j = 0; j < wp; ++j) dxr[j] = select(j < w, yr[j] * (dyr[j] - dot) * s, 0.f);
      for (int64_t j = wp; j < v.n; ++j) dxr[j] = 0.f;
    }
  }

 private:
  Rows v_;
  int dy_, y_, dx_;
};

KernelPtr scaled_softmax(const Node& n) { return std::make_unique<ScaledSoftmax>(n); }
KernelPtr scaled_softmax_grad(const Node& n) { return std::make_unique<ScaledSoftmaxGrad>(n); }

}  // namespace

PLANNER_REGISTER_KERNELS(scaled_softmax) {
  r["ScaledSoftmax"] = scaled_softmax;
  r["ScaledSoftmaxGrad"] = scaled_softmax_grad;
}

}  // namespace planner
