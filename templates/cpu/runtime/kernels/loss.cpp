// Losses and their gradients as plain OpenMP loops over static shapes. Each loss is a mean
// (a scalar); sums run in double, as accurate as numpy's pairwise float32 sums or better.
//   SoftmaxCrossEntropy [logits (N,C,...), labels (N,...) int64]   F.cross_entropy: classes on
//       `axis`, labels equal to ignore_index skipped, label_smoothing; mean over the counted
//   SigmoidBCE [z, t]      mean(max(z,0) - z t + log1p(exp(-|z|)))
//   MSE [p, t]             mean((p - t)^2)
// and *Grad [dloss, ...] -> d(first input). Each also runs in float64 (SoftmaxCrossEntropyF64,
// BceF64, MseF64: loops in double, each sum in parts fixed by the sizes).
// With the classes last, SoftmaxCrossEntropyGrad's softmax is oneDNN's (vectorized; a scalar
// exp loop in double took 40% of a small GPT's step), then one pass per row subtracts the
// label and the smoothing and scales; a row holding NaN or +inf, or only -inf, becomes NaN, as
// the reference's (as in softmax.cpp). The forward's log-sum-exp runs a vectorizable float exp
// (exp_nonpositive) summed in double. Classes on another axis run strided loops in double.
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>

#include "../dnnl_kernel.h"
#include "../loops.h"
#include "../vmath.h"
#include "loss.h"

namespace planner {
namespace {

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

// The labels not ignored; StepError for one out of [0, classes).
int64_t counted_labels(const CrossEntropy& e, const int64_t* lab) {
  int64_t count = 0;
  for (int64_t i = 0; i < e.classes.outer * e.classes.inner; ++i) {
    if (lab[i] == e.ignore_index) continue;
    if (lab[i] < 0 || lab[i] >= e.classes.extent)
      throw StepError("label " + std::to_string(lab[i]) + " out of range [0, " +
                      std::to_string(e.classes.extent) + ") (ignore_index " +
                      std::to_string(e.ignore_index) + ")");
    ++count;
  }
  return count;
}

// The logits viewed as (outer, C, inner) with the classes on the node's axis: position p
// (outer * inner of them, one label each) reads its class c at base(p) + c * inner. With the
// classes last (inner 1: classifiers, language models) rows are contiguous and take the
// vectorized path; other layouts (segmentation's N, C, H, W) take the strided loops.
class SoftmaxCrossEntropy : public DnnlKernel {
 public:
  explicit SoftmaxCrossEntropy(const Node& n)
      : e_(cross_entropy(n)) {  // common/loss.h
    require_f32(n);
    if (!e_.grad || e_.classes.inner != 1) return;
    const TensorRef& x = n.in[1];
    auto md = plain_md(x.shape, x.dtype);
    dnnl::softmax_forward::primitive_desc pd(n.engine, dnnl::prop_kind::forward_inference,
                                             dnnl::algorithm::softmax_accurate, md, md,
                                             e_.classes.axis, user_scratchpad());
    add(dnnl::softmax_forward(pd), pd, {{DNNL_ARG_SRC, e_.logits}, {DNNL_ARG_DST, e_.out}});
  }
  // Fed labels are checked before any op runs, so a step that raises changes no state.
  void check_feeds(const Run& r, const std::vector<char>& fed) const override {
    if (fed[e_.labels]) counted(r.at<int64_t>(e_.labels));
  }
  void run(const Run& r) override {
    const int64_t count = counted(r.at<int64_t>(e_.labels));
    if (e_.classes.inner == 1)
      contiguous(r, count);
    else
      strided(r, count);
  }

 private:
  int64_t counted(const int64_t* lab) const { return counted_labels(e_, lab); }

  // Rows of C contiguous logits: a vectorizable float exp summed in double (forward); oneDNN's
  // softmax, then one pass per row for the label and the smoothing (gradient).
  void contiguous(const Run& r, int64_t count) {
    const float* x = r.at<float>(e_.logits);
    const int64_t* lab = r.at<int64_t>(e_.labels);
    const int64_t rows = e_.classes.outer, cols = e_.classes.extent;
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const double eps = e_.label_smoothing, keep = 1.0 - eps;
    if (!e_.grad) {
      const double total = sum_in_parts(rows, [&](int64_t i) -> double {
        if (lab[i] == e_.ignore_index) return 0.0;
        const float* z = x + i * cols;
        if (nan_row(z, cols)) return nan;
        float m = z[0];
#pragma omp simd reduction(max : m)
        for (int64_t c = 1; c < cols; ++c) m = select(z[c] > m, z[c], m);
        double s = 0, sum_z = 0;
#pragma omp simd reduction(+ : s, sum_z)
        for (int64_t c = 0; c < cols; ++c) {
          s += exp_nonpositive(z[c] - m);
          sum_z += z[c] - m;
        }
        const double lse = std::log(s);
        const double nll = lse - static_cast<double>(z[lab[i]] - m);
        return eps == 0 ? nll : keep * nll + eps * (lse - sum_z / static_cast<double>(cols));
      });
      // The mean of no labels (all ignored) is NaN, as in PyTorch.
      *r.at<float>(e_.out) = static_cast<float>(total / static_cast<double>(count));
      return;
    }
    // As the reference: the weight dloss / count rounded to float first.
    const float scale = *r.at<float>(e_.dloss) / static_cast<float>(count);
    const float spread = static_cast<float>(eps / static_cast<double>(cols));
    const float hit = static_cast<float>(keep) * scale;
    run_all(r);  // dx = softmax(logits)
    float* dx = r.at<float>(e_.out);
#pragma omp parallel for
    for (int64_t i = 0; i < rows; ++i) {
      float* d = dx + i * cols;
      if (lab[i] == e_.ignore_index) {
        for (int64_t c = 0; c < cols; ++c) d[c] = 0.f * scale;  // NaN if count is 0
        continue;
      }
      if (nan_row(x + i * cols, cols)) {
        for (int64_t c = 0; c < cols; ++c) d[c] = nan;
        continue;
      }
#pragma omp simd
      for (int64_t c = 0; c < cols; ++c) d[c] = (d[c] - spread) * scale;
      d[lab[i]] -= hit;
    }
  }

  // Classes strided by `inner` (scalar loops in double).
  void strided(const Run& r, int64_t count) {
    const float* x = r.at<float>(e_.logits);
    const int64_t* lab = r.at<int64_t>(e_.labels);
    const int64_t classes = e_.classes.extent, inner = e_.classes.inner;
    const int64_t positions = e_.classes.outer * inner;
    const double eps = e_.label_smoothing, keep = 1.0 - eps;
    auto base = [&](int64_t p) { return (p / inner) * classes * inner + p % inner; };
    if (!e_.grad) {
      const double total = sum_in_parts(positions, [&](int64_t p) -> double {
        if (lab[p] == e_.ignore_index) return 0.0;
        const float* z = x + base(p);
        float m = z[0];
        for (int64_t c = 1; c < classes; ++c) m = std::max(m, z[c * inner]);
        double s = 0, sum_z = 0;
        for (int64_t c = 0; c < classes; ++c) {
          const double zc = static_cast<double>(z[c * inner] - m);
          s += std::exp(zc);
          sum_z += zc;
        }
        const double lse = std::log(s);
        const double nll = lse - static_cast<double>(z[lab[p] * inner] - m);
        return eps == 0 ? nll : keep * nll + eps * (lse - sum_z / static_cast<double>(classes));
      });
      *r.at<float>(e_.out) = static_cast<float>(total / static_cast<double>(count));
      return;
    }
    const float scale = *r.at<float>(e_.dloss) / static_cast<float>(count);
    const double spread = eps / static_cast<double>(classes);
    float* dx = r.at<float>(e_.out);
#pragma omp parallel for
    for (int64_t p = 0; p < positions; ++p) {
      const float* z = x + base(p);
      float* d = dx + base(p);
      if (lab[p] == e_.ignore_index) {
        for (int64_t c = 0; c < classes; ++c) d[c * inner] = 0.f * scale;  // NaN if count is 0
        continue;
      }
      float m = z[0];
      for (int64_t c = 1; c < classes; ++c) m = std::max(m, z[c * inner]);
      double s = 0;
      for (int64_t c = 0; c < classes; ++c) s += std::exp(static_cast<double>(z[c * inner] - m));
      for (int64_t c = 0; c < classes; ++c) {
        const double prob = std::exp(static_cast<double>(z[c * inner] - m)) / s;
        d[c * inner] =
            static_cast<float>((prob - spread - (c == lab[p] ? keep : 0.0)) * scale);
      }
    }
  }

  CrossEntropy e_;
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
      const char kind = kind_;
      const double total = sum_in_parts(size, [&](int64_t i) {
        double z = x[i], y = t[i];
        return kind == 'b' ? std::max(z, 0.0) - z * y + std::log1p(std::exp(-std::fabs(z)))
                           : (z - y) * (z - y);
      });
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

// A float64 loss of elementwise terms over (x, t): the sum of Loss::term in parts (loops.h,
// the same bits on any thread count) over the count; its gradient Loss::grad(x, t) times
// Loss::weight(dloss, count) per element.
template <class Loss>
class PointwiseLossF64 : public Kernel {
 public:
  explicit PointwiseLossF64(const Node& n)
      : grad_(n.in.size() == 3), size_(n.in[grad_ ? 1 : 0].size()),
        x_(n.in[grad_ ? 1 : 0].id), t_(n.in[grad_ ? 2 : 1].id), dloss_(grad_ ? n.in[0].id : -1),
        out_(n.out[0].id) {}
  void run(const Run& r) override {
    const double* x = r.at<double>(x_);
    const double* t = r.at<double>(t_);
    const int64_t size = size_;
    const double count = static_cast<double>(std::max<int64_t>(size, 1));
    if (!grad_) {
      *r.at<double>(out_) =
          sum_in_parts(size, [&](int64_t i) { return Loss::term(x[i], t[i]); }) / count;
      return;
    }
    const double w = Loss::weight(*r.at<double>(dloss_), count);
    double* dx = r.at<double>(out_);
#pragma omp parallel for if(size >= kGrain)
    for (int64_t i = 0; i < size; ++i) dx[i] = Loss::grad(x[i], t[i]) * w;
  }

 private:
  bool grad_;
  int64_t size_;
  int x_, t_, dloss_, out_;
};

// MSE: (p - t)^2; MSEGrad in torch's mse_loss_backward's order, (p - t) ((2 / size) dloss).
struct Mse {
  static double term(double x, double t) { return (x - t) * (x - t); }
  static double grad(double x, double t) { return x - t; }
  static double weight(double dloss, double count) { return (2.0 / count) * dloss; }
};
using MseF64 = PointwiseLossF64<Mse>;

// Whether the node's tensors but the labels are float64.
bool loss_f64(const Node& n) {
  for (const auto* side : {&n.in, &n.out})
    for (const TensorRef& t : *side)
      if (t.dtype != F64 && t.dtype != I64) return false;
  return n.out[0].dtype == F64;
}

// float64 SoftmaxCrossEntropy and its gradient: torch's log_softmax and nll_loss in double,
// position by position (its classes strided by `inner`, 1 when last): m the max, s the sum
// of exp(z - m) in class order, lse = log s; the loss lse - (z_y - m), smoothed as the
// float32 kernel's, summed over the positions in parts (loops.h: the same bits on any
// thread count) and divided by the count; the gradient
// (exp(z - m) / s - eps / C - (1 - eps) [c == y]) dloss / count, one position per iteration.
// A position whose logits hold NaN or +inf, or only -inf, is NaN, as the reference's.
class SoftmaxCrossEntropyF64 : public Kernel {
 public:
  explicit SoftmaxCrossEntropyF64(const Node& n) : e_(cross_entropy(n)) {}  // common/loss.h
  std::string impl() const override { return "positions in double"; }
  void check_feeds(const Run& r, const std::vector<char>& fed) const override {
    if (fed[e_.labels]) counted_labels(e_, r.at<int64_t>(e_.labels));
  }
  void run(const Run& r) override {
    const int64_t count = counted_labels(e_, r.at<int64_t>(e_.labels));
    const double* x = r.at<double>(e_.logits);
    const int64_t* lab = r.at<int64_t>(e_.labels);
    const int64_t classes = e_.classes.extent, inner = e_.classes.inner;
    const int64_t positions = e_.classes.outer * inner;
    const double eps = e_.label_smoothing, keep = 1.0 - eps;
    auto base = [&](int64_t p) { return (p / inner) * classes * inner + p % inner; };
    const bool parallel = positions * classes >= kGrain;
    if (!e_.grad) {
      const double total = sum_in_parts(positions, [&](int64_t p) -> double {
        if (lab[p] == e_.ignore_index) return 0.0;
        const Lse f = lse(x + base(p), classes, inner);
        const double nll = f.lse - (x[base(p) + lab[p] * inner] - f.max);
        return eps == 0 ? nll
                        : keep * nll + eps * (f.lse - f.sum_shifted / static_cast<double>(classes));
      }, parallel);
      *r.at<double>(e_.out) = total / static_cast<double>(count);  // no labels: NaN, as torch
      return;
    }
    const double scale = *r.at<double>(e_.dloss) / static_cast<double>(count);
    const double spread = eps / static_cast<double>(classes);
    double* dx = r.at<double>(e_.out);
#pragma omp parallel for schedule(static) if(parallel)
    for (int64_t p = 0; p < positions; ++p) {
      const double* z = x + base(p);
      double* d = dx + base(p);
      if (lab[p] == e_.ignore_index) {
        for (int64_t c = 0; c < classes; ++c) d[c * inner] = 0.0 * scale;  // NaN if count is 0
        continue;
      }
      const Lse f = lse(z, classes, inner);
      for (int64_t c = 0; c < classes; ++c) {
        const double prob = std::exp(z[c * inner] - f.max) / f.sum;
        d[c * inner] = (prob - spread - (c == lab[p] ? keep : 0.0)) * scale;
      }
    }
  }

 private:
  struct Lse {
    double max, sum, lse, sum_shifted;  // sum_shifted: of z - max over the classes
  };
  static Lse lse(const double* z, int64_t classes, int64_t inner) {
    const double inf = std::numeric_limits<double>::infinity();
    bool bad = false, any = false;
    double m = -inf;
    for (int64_t c = 0; c < classes; ++c) {
      const double v = z[c * inner];
      bad |= v != v || v == inf;
      any |= v != -inf;
      m = v > m ? v : m;
    }
    if (bad || !any) {
      const double nan = std::numeric_limits<double>::quiet_NaN();
      return {nan, nan, nan, nan};
    }
    double s = 0, shifted = 0;
    for (int64_t c = 0; c < classes; ++c) {
      s += std::exp(z[c * inner] - m);
      shifted += z[c * inner] - m;
    }
    return {m, s, std::log(s), shifted};
  }

  CrossEntropy e_;
};

// SigmoidBCE: max(z, 0) - z t + log1p(exp(-|z|)); SigmoidBCEGrad (sigmoid(z) - t) dloss /
// size, sigmoid from exp(-|z|) on either side.
struct Bce {
  static double term(double x, double t) {
    return std::max(x, 0.0) - x * t + std::log1p(std::exp(-std::fabs(x)));
  }
  static double grad(double x, double t) {
    const double e = std::exp(-std::fabs(x));
    return (x >= 0 ? 1.0 / (1.0 + e) : e / (1.0 + e)) - t;
  }
  static double weight(double dloss, double count) { return dloss / count; }
};
using BceF64 = PointwiseLossF64<Bce>;

KernelPtr sce(const Node& n) {
  if (loss_f64(n)) return std::make_unique<SoftmaxCrossEntropyF64>(n);
  return std::make_unique<SoftmaxCrossEntropy>(n);
}
KernelPtr bce(const Node& n) {
  if (all_f64(n)) return std::make_unique<BceF64>(n);
  return std::make_unique<PairLoss>(n, 'b');
}
KernelPtr mse(const Node& n) {
  if (all_f64(n)) return std::make_unique<MseF64>(n);
  return std::make_unique<PairLoss>(n, 'm');
}

}  // namespace

PLANNER_REGISTER_KERNELS(loss) {
  r["SoftmaxCrossEntropy"] = {sce, "float32,int64|float64,int64"};
  r["SoftmaxCrossEntropyGrad"] = {sce, "float32,int64|float64,int64"};
  r["SigmoidBCE"] = {bce, "float32|float64"};
  r["SigmoidBCEGrad"] = {bce, "float32|float64"};
  r["MSE"] = {mse, "float32|float64"};
  r["MSEGrad"] = {mse, "float32|float64"};
}

}  // namespace planner
