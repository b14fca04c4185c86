// LayerNorm, BatchNorm (training statistics, running statistics, inference) and their
// gradients, Softmax, LogSoftmax and SoftmaxGrad in float64: a float64 model with a
// normalisation or a softmax through either torch door. oneDNN 3.2's normalizations and
// softmax have no f64, so each is a loop in double with PyTorch's float64 formula (its CPU
// kernels: aten/src/ATen/native/cpu/layer_norm_kernel.cpp, batch_norm_kernel.cpp,
// SoftMaxKernel.cpp), each sum in index order by one thread: one row (LayerNorm, softmax) or
// one channel (BatchNorm, the scale and bias gradients) per iteration, so every thread count
// gives the same bits. GroupNorm's float64 is group_norm.cpp's loop on doubles.
//
// Each loop runs on the calling thread alone over fewer than kGrain elements (loops.h).
//
// No folded activation or residual (planner/step/fold_norm_relu.py and fold_norm_sum.py fold
// float32 normalisations only): refused at load.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "../loops.h"
#include "fused_activation.h"
#include "norm.h"
#include "norms_f64.h"

namespace planner {
namespace {

void require_f64(const Node& n, const char* op) {
  if (!all_f64(n))
    throw std::runtime_error(std::string(op) + ": float64 operands and results");
}

std::vector<int> ids_of(const Node& n) {
  std::vector<int> ids;
  for (const auto* side : {&n.in, &n.out})
    for (const TensorRef& t : *side) ids.push_back(t.id);
  return ids;
}

// LayerNorm [x, scale, bias?] -> [y, mean, var] over rows of n elements (the axes from `axis`
// on): mean, biased variance, y = (x * rstd - mean * rstd) * scale + bias.
class LayerNormF64 : public Kernel {
 public:
  explicit LayerNormF64(const Node& n) : ids_(ids_of(n)), shift_(n.in.size() == 3) {
    require_f64(n, "LayerNorm");
    const AxisSplit a = axis_split(n.attrs, n.in[0].shape);
    rows_ = a.outer;
    cols_ = a.extent * a.inner;
    eps_ = n.attrs.f("epsilon");
  }
  std::string impl() const override { return "rows in double"; }
  void run(const Run& r) override {
    const double* x = r.at<double>(ids_[0]);
    const double* scale = r.at<double>(ids_[1]);
    const double* bias = shift_ ? r.at<double>(ids_[2]) : nullptr;
    const int k = shift_ ? 3 : 2;
    double* y = r.at<double>(ids_[k]);
    double* mean = r.at<double>(ids_[k + 1]);
    double* var = r.at<double>(ids_[k + 2]);
    const int64_t rows = rows_, n = cols_, size = rows_ * cols_;
    const double eps = eps_;
#pragma omp parallel for schedule(static) if(size >= kGrain)
    for (int64_t row = 0; row < rows; ++row) {
      const double* xr = x + row * n;
      double sum = 0, sq = 0;
      for (int64_t j = 0; j < n; ++j) sum += xr[j];
      const double mu = sum / static_cast<double>(n);
      for (int64_t j = 0; j < n; ++j) sq += (xr[j] - mu) * (xr[j] - mu);
      const double v = sq / static_cast<double>(n);
      const double rstd = 1.0 / std::sqrt(v + eps), shift = -rstd * mu;
      mean[row] = mu;
      var[row] = v;
      double* yr = y + row * n;
      for (int64_t j = 0; j < n; ++j)
        yr[j] = (xr[j] * rstd + shift) * scale[j] + (bias ? bias[j] : 0.0);
    }
  }

 private:
  std::vector<int> ids_;
  bool shift_;
  int64_t rows_ = 1, cols_ = 1;
  double eps_ = 0;
};

// LayerNormGrad [dy, x, scale, mean, var] -> [dx, dscale, dbias]: with g = dy scale and
// xhat = (x - mean) rstd, dx = rstd (g - mean(g) - xhat mean(g xhat)) (torch's backward,
// rstd dy scale + b x + c, is the same sum regrouped; this grouping gives a NaN or an infinity
// of dy, x or a statistic the places the op's reference gives it); dscale = sum(dy xhat) and
// dbias = sum(dy) per column, over the rows in order.
class LayerNormGradF64 : public Kernel {
  static constexpr int64_t kBlock = 64;

 public:
  explicit LayerNormGradF64(const Node& n) : ids_(ids_of(n)) {
    require_f64(n, "LayerNormGrad");
    const AxisSplit a = axis_split(n.attrs, n.in[1].shape);
    rows_ = a.outer;
    cols_ = a.extent * a.inner;
    eps_ = n.attrs.f("epsilon");
  }
  std::string impl() const override { return "rows and columns in double"; }
  void run(const Run& r) override {
    const double *dy = r.at<double>(ids_[0]), *x = r.at<double>(ids_[1]),
                 *scale = r.at<double>(ids_[2]), *mean = r.at<double>(ids_[3]),
                 *var = r.at<double>(ids_[4]);
    double *dx = r.at<double>(ids_[5]), *dscale = r.at<double>(ids_[6]),
           *dbias = r.at<double>(ids_[7]);
    const int64_t rows = rows_, n = cols_, size = rows_ * cols_;
    const double eps = eps_, per = 1.0 / static_cast<double>(n);
#pragma omp parallel for schedule(static) if(size >= kGrain)
    for (int64_t row = 0; row < rows; ++row) {
      const double *dyr = dy + row * n, *xr = x + row * n;
      const double rstd = 1.0 / std::sqrt(var[row] + eps), mu = mean[row];
      double sg = 0, sgx = 0;
      for (int64_t j = 0; j < n; ++j) {
        sg += dyr[j] * scale[j];
        sgx += dyr[j] * scale[j] * ((xr[j] - mu) * rstd);
      }
      const double mg = sg * per, mgx = sgx * per;
      for (int64_t j = 0; j < n; ++j)
        dx[row * n + j] = rstd * (dyr[j] * scale[j] - mg - (xr[j] - mu) * rstd * mgx);
    }
    // dscale, dbias: blocks of kBlock columns, each block's rows read along them in order (one
    // sqrt a row, not an element); every column still sums its rows in index order.
    const int64_t blocks = (n + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if(size >= kGrain)
    for (int64_t k = 0; k < blocks; ++k) {
      const int64_t j0 = k * kBlock, width = std::min(kBlock, n - j0);
      double ds[kBlock] = {}, db[kBlock] = {};
      for (int64_t row = 0; row < rows; ++row) {
        const double rstd = 1.0 / std::sqrt(var[row] + eps), mu = mean[row];
        const double *dyr = dy + row * n + j0, *xr = x + row * n + j0;
        for (int64_t j = 0; j < width; ++j) {
          ds[j] += dyr[j] * (xr[j] - mu) * rstd;
          db[j] += dyr[j];
        }
      }
      for (int64_t j = 0; j < width; ++j) {
        dscale[j0 + j] = ds[j];
        dbias[j0 + j] = db[j];
      }
    }
  }

 private:
  std::vector<int> ids_;
  int64_t rows_ = 1, cols_ = 1;
  double eps_ = 0;
};

// x (N, C, ...) as channel c's runs: N runs of `space` elements, `channels * space` apart.
struct Channels {
  int64_t batch, channels, space;
  explicit Channels(const Shape& s) : batch(s[0]), channels(s.size() > 1 ? s[1] : 1), space(1) {
    for (size_t k = 2; k < s.size(); ++k) space *= s[k];
  }
  int64_t size() const { return batch * channels * space; }
  int64_t at(int64_t b, int64_t c) const { return (b * channels + c) * space; }
};

void require_plain_norm(const Node& n, const char* op, size_t inputs) {
  require_f64(n, op);
  if (n.in.size() != inputs || fused_activation(n.attrs, op) != kActNone)
    throw std::runtime_error(std::string(op) +
                             " in float64: no folded activation or residual (float32's alone)");
  if (n.in[0].shape.size() < 2) throw std::runtime_error(std::string(op) + ": x is (N, C, ...)");
}

// BatchNorm [x, scale, bias, running_mean, running_var] -> training: [y, running_mean_new,
// running_var_new, saved_mean, saved_invstd]; inference: [y]. torch's float64 formulas:
// invstd = 1 / sqrt(var_sum / m + eps), y = (x - mean) alpha + bias with alpha = invstd scale
// (torch's kernel adds (bias - mean alpha) to x alpha: the same up to rounding, but an infinite
// scale there gives inf - inf where the op's reference gives the infinity); running =
// momentum * stat + (1 - momentum) * running, the variance unbiased (var_sum / (m - 1)). The running outputs may be the running inputs' bytes (an
// in-place update): each channel reads its old value before writing the new one.
class BatchNormF64 : public Kernel {
 public:
  explicit BatchNormF64(const Node& n)
      : ids_(ids_of(n)), a_(batch_norm_attrs(n.attrs)), c_(n.in[0].shape) {
    require_plain_norm(n, "BatchNorm", 5);
  }
  std::string impl() const override { return "channels in double"; }
  void run(const Run& r) override {
    const double *x = r.at<double>(ids_[0]), *scale = r.at<double>(ids_[1]),
                 *bias = r.at<double>(ids_[2]), *rm = r.at<double>(ids_[3]),
                 *rv = r.at<double>(ids_[4]);
    double* y = r.at<double>(ids_[5]);
    const Channels c = c_;
    const int64_t size = c.size();
    const double m = static_cast<double>(c.batch * c.space);
#pragma omp parallel for schedule(static) if(size >= kGrain)
    for (int64_t ch = 0; ch < c.channels; ++ch) {
      double mean = rm[ch], invstd = 0;
      if (a_.training) {
        double sum = 0, sq = 0;
        for (int64_t b = 0; b < c.batch; ++b)
          for (int64_t s = 0; s < c.space; ++s) sum += x[c.at(b, ch) + s];
        mean = sum / m;
        for (int64_t b = 0; b < c.batch; ++b)
          for (int64_t s = 0; s < c.space; ++s) {
            const double d = x[c.at(b, ch) + s] - mean;
            sq += d * d;
          }
        invstd = 1.0 / std::sqrt(sq / m + a_.epsilon);
        update(r, ch, mean, sq / (m - 1), invstd);
      }
      const double alpha = a_.training ? invstd * scale[ch]
                                       : scale[ch] / std::sqrt(rv[ch] + a_.epsilon);
      for (int64_t b = 0; b < c.batch; ++b)
        for (int64_t s = 0; s < c.space; ++s) {
          const int64_t i = c.at(b, ch) + s;
          y[i] = (x[i] - mean) * alpha + bias[ch];
        }
    }
  }

 private:
  void update(const Run& r, int64_t ch, double mean, double unbiased, double invstd) const {
    const double old_mean = r.at<double>(ids_[3])[ch], old_var = r.at<double>(ids_[4])[ch];
    const double mo = a_.momentum;
    r.at<double>(ids_[6])[ch] = mo * mean + (1 - mo) * old_mean;
    r.at<double>(ids_[7])[ch] = mo * unbiased + (1 - mo) * old_var;
    r.at<double>(ids_[8])[ch] = mean;
    r.at<double>(ids_[9])[ch] = invstd;
  }

  std::vector<int> ids_;
  BatchNormAttrs a_;
  Channels c_;
};

// BatchNormGrad [dy, x, scale, mean, invstd (training) | running_mean, running_var] ->
// [dx, dscale, dbias], torch's: sum = sum(dy), dotp = sum((x - mean) dy);
// training: dx = (dy - sum / m - (x - mean) dotp invstd^2 / m) invstd scale;
// inference: dx = dy invstd scale (invstd from the running variance); dscale = dotp invstd.
class BatchNormGradF64 : public Kernel {
 public:
  explicit BatchNormGradF64(const Node& n)
      : ids_(ids_of(n)), a_(batch_norm_attrs(n.attrs)), c_(n.in[1].shape) {
    require_plain_norm(n, "BatchNormGrad", 5);
  }
  std::string impl() const override { return "channels in double"; }
  void run(const Run& r) override {
    const double *dy = r.at<double>(ids_[0]), *x = r.at<double>(ids_[1]),
                 *scale = r.at<double>(ids_[2]), *mean = r.at<double>(ids_[3]),
                 *last = r.at<double>(ids_[4]);
    double *dx = r.at<double>(ids_[5]), *dscale = r.at<double>(ids_[6]),
           *dbias = r.at<double>(ids_[7]);
    const Channels c = c_;
    const int64_t size = c.size();
    const double m = static_cast<double>(c.batch * c.space);
#pragma omp parallel for schedule(static) if(size >= kGrain)
    for (int64_t ch = 0; ch < c.channels; ++ch) {
      const double mu = mean[ch];
      const double invstd = a_.training ? last[ch] : 1.0 / std::sqrt(last[ch] + a_.epsilon);
      double sum = 0, dotp = 0;
      for (int64_t b = 0; b < c.batch; ++b)
        for (int64_t s = 0; s < c.space; ++s) {
          const int64_t i = c.at(b, ch) + s;
          sum += dy[i];
          dotp += (x[i] - mu) * dy[i];
        }
      const double w = invstd * scale[ch], k = dotp * invstd * invstd / m, mean_dy = sum / m;
      for (int64_t b = 0; b < c.batch; ++b)
        for (int64_t s = 0; s < c.space; ++s) {
          const int64_t i = c.at(b, ch) + s;
          dx[i] = a_.training ? (dy[i] - mean_dy - (x[i] - mu) * k) * w : dy[i] * w;
        }
      dscale[ch] = dotp * invstd;
      dbias[ch] = sum;
    }
  }

 private:
  std::vector<int> ids_;
  BatchNormAttrs a_;
  Channels c_;
};

// Softmax, LogSoftmax [x] -> y and SoftmaxGrad [dy, y] -> dx along `axis`: rows of `len`
// elements `inner` apart, one per (outer, inner) pair.
class RowsF64 : public Kernel {
 public:
  RowsF64(const Node& n, const char* op) : ids_(ids_of(n)) {
    require_f64(n, op);
    const AxisSplit a = axis_split(n.attrs, n.in[0].shape);
    outer_ = a.outer;
    len_ = a.extent;
    inner_ = a.inner;
  }
  std::string impl() const override { return "rows in double"; }
  void run(const Run& r) override {
    const int64_t rows = outer_ * inner_, size = rows * len_;
#pragma omp parallel for schedule(static) if(size >= kGrain)
    for (int64_t row = 0; row < rows; ++row)
      one(r, (row / inner_) * len_ * inner_ + row % inner_);
  }

 protected:
  virtual void one(const Run& r, int64_t base) const = 0;
  // The row's largest element (NaN ignored: x - max is NaN where x is, which spreads over the
  // row's sum, as torch's row of NaN; a row of -inf or holding +inf gives NaN too).
  double top(const double* xr) const {
    double t = -INFINITY;
    for (int64_t j = 0; j < len_; ++j) t = xr[j * inner_] > t ? xr[j * inner_] : t;
    return t;
  }
  double sum_exp(const double* xr, double t) const {
    double s = 0;
    for (int64_t j = 0; j < len_; ++j) s += std::exp(xr[j * inner_] - t);
    return s;
  }

  std::vector<int> ids_;
  int64_t outer_ = 1, len_ = 1, inner_ = 1;
};

// y = exp(x - max) * (1 / sum exp(x - max)), torch's _vec_softmax.
class SoftmaxF64 : public RowsF64 {
 public:
  explicit SoftmaxF64(const Node& n) : RowsF64(n, "Softmax") {}

 protected:
  void one(const Run& r, int64_t base) const override {
    const double* xr = r.at<double>(ids_[0]) + base;
    double* yr = r.at<double>(ids_[1]) + base;
    const double t = top(xr), inv = 1.0 / sum_exp(xr, t);
    for (int64_t j = 0; j < len_; ++j) yr[j * inner_] = std::exp(xr[j * inner_] - t) * inv;
  }
};

// y = (x - max) - log(sum exp(x - max)), torch's _vec_log_softmax.
class LogSoftmaxF64 : public RowsF64 {
 public:
  explicit LogSoftmaxF64(const Node& n) : RowsF64(n, "LogSoftmax") {}

 protected:
  void one(const Run& r, int64_t base) const override {
    const double* xr = r.at<double>(ids_[0]) + base;
    double* yr = r.at<double>(ids_[1]) + base;
    const double t = top(xr), lse = std::log(sum_exp(xr, t));
    for (int64_t j = 0; j < len_; ++j) yr[j * inner_] = (xr[j * inner_] - t) - lse;
  }
};

// dx = y (dy - sum(dy y)), torch's _softmax_backward_data.
class SoftmaxGradF64 : public RowsF64 {
 public:
  explicit SoftmaxGradF64(const Node& n) : RowsF64(n, "SoftmaxGrad") {}

 protected:
  void one(const Run& r, int64_t base) const override {
    const double* dyr = r.at<double>(ids_[0]) + base;
    const double* yr = r.at<double>(ids_[1]) + base;
    double* dxr = r.at<double>(ids_[2]) + base;
    double dot = 0;
    for (int64_t j = 0; j < len_; ++j) dot += dyr[j * inner_] * yr[j * inner_];
    for (int64_t j = 0; j < len_; ++j) dxr[j * inner_] = yr[j * inner_] * (dyr[j * inner_] - dot);
  }
};

}  // namespace

KernelPtr layer_norm_f64(const Node& n) { return std::make_unique<LayerNormF64>(n); }
KernelPtr layer_norm_grad_f64(const Node& n) { return std::make_unique<LayerNormGradF64>(n); }
KernelPtr batch_norm_f64(const Node& n) { return std::make_unique<BatchNormF64>(n); }
KernelPtr batch_norm_grad_f64(const Node& n) { return std::make_unique<BatchNormGradF64>(n); }
KernelPtr softmax_f64(const Node& n) { return std::make_unique<SoftmaxF64>(n); }
KernelPtr log_softmax_f64(const Node& n) { return std::make_unique<LogSoftmaxF64>(n); }
KernelPtr softmax_grad_f64(const Node& n) { return std::make_unique<SoftmaxGradF64>(n); }

}  // namespace planner
