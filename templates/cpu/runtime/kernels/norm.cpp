// Normalisations with oneDNN: BatchNorm (forward training with batch statistics, or inference
// with the running ones), BatchNormGrad, LRN and LRNGrad (plain loops for an even size). Inputs (N, C, ...) are seen as
// (N, C, rest, 1), the same bytes. The running-statistics update (PyTorch's: unbiased variance,
// new = (1 - momentum) old + momentum batch) and saved_invstd are small loops after the
// primitive; BatchNormGrad gives oneDNN the variance back from saved_invstd.
// bfloat16 / float16 x, y, dy and dx (mixed precision) with float32 parameters and statistics
// are oneDNN's own mixed batch norm (float32 math inside; on widened copies where the ISA has
// no bf16 batch norm); the inference form's gradient loop runs on widened copies.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "../dnnl_kernel.h"
#include "norm.h"

namespace planner {
namespace {

using alg = dnnl::algorithm;
using prop = dnnl::prop_kind;
using flags = dnnl::normalization_flags;

Shape as4d(const Shape& x) {
  int64_t rest = 1;
  for (size_t k = 2; k < x.size(); ++k) rest *= x[k];
  return {x[0], x[1], rest, 1};
}

class BatchNormTraining : public DnnlKernel {
 public:
  BatchNormTraining(const Node& n, const BatchNormAttrs& a)
      : channels_(n.in[0].shape[1]), per_channel_(n.in[0].size() / n.in[0].shape[1]),
        eps_(static_cast<float>(a.epsilon)), momentum_(static_cast<float>(a.momentum)),
        rm_(n.in[3].id), rv_(n.in[4].id),
        rm_out_(n.out[1].id), rv_out_(n.out[2].id), mean_(n.out[3].id), invstd_(n.out[4].id) {
    auto md = view_md(as4d(n.in[0].shape), n.in[0].dtype);
    dnnl::batch_normalization_forward::primitive_desc pd(
        n.engine, prop::forward_training, md, md, eps_, flags::use_scale | flags::use_shift,
        user_scratchpad());
    var_ = temp(channels_ * sizeof(float));
    add(dnnl::batch_normalization_forward(pd), pd,
        {{DNNL_ARG_SRC, n.in[0].id}, {DNNL_ARG_SCALE, n.in[1].id}, {DNNL_ARG_SHIFT, n.in[2].id},
         {DNNL_ARG_DST, n.out[0].id}, {DNNL_ARG_MEAN, mean_}, {DNNL_ARG_VARIANCE, -1, var_}});
  }
  void run(const Run& r) override {
    run_all(r);
    const float* var = reinterpret_cast<const float*>(r.scratch + var_);
    const float* mean = r.at<float>(mean_);
    const float* rm = r.at<float>(rm_);
    const float* rv = r.at<float>(rv_);
    float* rm_out = r.at<float>(rm_out_);
    float* rv_out = r.at<float>(rv_out_);
    float* invstd = r.at<float>(invstd_);
    const float m = momentum_, keep = 1.f - momentum_, eps = eps_;
    const float unbias = static_cast<float>(static_cast<double>(per_channel_) /
                                            static_cast<double>(per_channel_ - 1));
    for (int64_t c = 0; c < channels_; ++c) {
      invstd[c] = 1.f / std::sqrt(var[c] + eps);
      rm_out[c] = keep * rm[c] + m * mean[c];
      rv_out[c] = keep * rv[c] + m * (var[c] * unbias);
    }
  }

 private:
  int64_t channels_, per_channel_;
  float eps_, momentum_;
  int rm_, rv_, rm_out_, rv_out_, mean_, invstd_;
  int64_t var_;
};

KernelPtr batch_norm_inference(const Node& n, const BatchNormAttrs& a) {
  auto md = view_md(as4d(n.in[0].shape), n.in[0].dtype);
  dnnl::batch_normalization_forward::primitive_desc pd(
      n.engine, prop::forward_inference, md, md, static_cast<float>(a.epsilon),
      flags::use_global_stats | flags::use_scale | flags::use_shift, user_scratchpad());
  auto k = std::make_unique<DnnlKernel>();
  k->add(dnnl::batch_normalization_forward(pd), pd,
         {{DNNL_ARG_SRC, n.in[0].id}, {DNNL_ARG_SCALE, n.in[1].id}, {DNNL_ARG_SHIFT, n.in[2].id},
          {DNNL_ARG_MEAN, n.in[3].id}, {DNNL_ARG_VARIANCE, n.in[4].id}, {DNNL_ARG_DST, n.out[0].id}});
  return k;
}

KernelPtr batch_norm_any(const Node& n) {
  const BatchNormAttrs a = batch_norm_attrs(n.attrs);  // common/norm.h
  if (a.training) return std::make_unique<BatchNormTraining>(n, a);
  return batch_norm_inference(n, a);
}

KernelPtr batch_norm(const Node& n) { return native_or_widened(n, batch_norm_any); }

// [dy, x, scale, saved_mean, saved_invstd] -> [dx, dscale, dbias].
class BatchNormGradTraining : public DnnlKernel {
 public:
  explicit BatchNormGradTraining(const Node& n)
      : channels_(n.in[1].shape[1]), eps_(static_cast<float>(batch_norm_attrs(n.attrs).epsilon)),
        invstd_(n.in[4].id) {
    auto md = view_md(as4d(n.in[1].shape), n.in[1].dtype);
    auto f = flags::use_scale | flags::use_shift;
    dnnl::batch_normalization_forward::primitive_desc hint(n.engine, prop::forward_training, md,
                                                           md, eps_, f, user_scratchpad());
    dnnl::batch_normalization_backward::primitive_desc pd(n.engine, prop::backward, md, md, md,
                                                          eps_, f, hint, user_scratchpad());
    var_ = temp(channels_ * sizeof(float));
    add(dnnl::batch_normalization_backward(pd), pd,
        {{DNNL_ARG_DIFF_DST, n.in[0].id}, {DNNL_ARG_SRC, n.in[1].id}, {DNNL_ARG_SCALE, n.in[2].id},
         {DNNL_ARG_MEAN, n.in[3].id}, {DNNL_ARG_VARIANCE, -1, var_},
         {DNNL_ARG_DIFF_SRC, n.out[0].id}, {DNNL_ARG_DIFF_SCALE, n.out[1].id},
         {DNNL_ARG_DIFF_SHIFT, n.out[2].id}});
  }
  void run(const Run& r) override {
    float* var = reinterpret_cast<float*>(r.scratch + var_);
    const float* invstd = r.at<float>(invstd_);
    for (int64_t c = 0; c < channels_; ++c)
      var[c] = static_cast<float>(1.0 / (static_cast<double>(invstd[c]) * invstd[c]) - eps_);
    run_all(r);
  }

 private:
  int64_t channels_;
  float eps_;
  int invstd_;
  int64_t var_;
};

// training=False: the statistics are constants, dx = dy * scale * invstd (a loop).
class BatchNormGradInference : public Kernel {
 public:
  explicit BatchNormGradInference(const Node& n)
      : n_(n.in[1].shape[0]), c_(n.in[1].shape[1]), rest_(n.in[1].size() / (n_ * c_)),
        eps_(static_cast<float>(batch_norm_attrs(n.attrs).epsilon)), dy_(n.in[0].id),
        x_(n.in[1].id),
        scale_(n.in[2].id), mean_(n.in[3].id), var_(n.in[4].id), dx_(n.out[0].id),
        dscale_(n.out[1].id), dbias_(n.out[2].id) {}
  void run(const Run& r) override {
    const float *dy = r.at<float>(dy_), *x = r.at<float>(x_), *scale = r.at<float>(scale_);
    const float *mean = r.at<float>(mean_), *var = r.at<float>(var_);
    float *dx = r.at<float>(dx_), *dscale = r.at<float>(dscale_), *dbias = r.at<float>(dbias_);
    const int64_t N = n_, C = c_, R = rest_;
#pragma omp parallel for
    for (int64_t c = 0; c < C; ++c) {
      float inv = 1.f / std::sqrt(var[c] + eps_);
      double ds = 0, db = 0;
      for (int64_t i = 0; i < N; ++i)
        for (int64_t k = 0; k < R; ++k) {
          int64_t e = (i * C + c) * R + k;
          db += dy[e];
          ds += dy[e] * (x[e] - mean[c]) * inv;
          dx[e] = dy[e] * scale[c] * inv;
        }
      dscale[c] = static_cast<float>(ds);
      dbias[c] = static_cast<float>(db);
    }
  }

 private:
  int64_t n_, c_, rest_;
  float eps_;
  int dy_, x_, scale_, mean_, var_, dx_, dscale_, dbias_;
};

KernelPtr batch_norm_grad_inference(const Node& n) {
  return std::make_unique<BatchNormGradInference>(n);
}

KernelPtr batch_norm_grad_training(const Node& n) {
  return std::make_unique<BatchNormGradTraining>(n);
}

KernelPtr batch_norm_grad(const Node& n) {
  if (batch_norm_attrs(n.attrs).training) return native_or_widened(n, batch_norm_grad_training);
  return widened(n, batch_norm_grad_inference);
}

// LRN and LRNGrad of an even size, which oneDNN's symmetric window cannot express: ONNX's
// window for channel c is [c - (size-1)/2, c + size/2]. Plain loops over (N, C, rest), as the
// CUDA kernel; sums of squares in double.
//   y_j  = x_j D_j^-beta,  D_c = bias + alpha / size * sum over c's window of x^2
//   dx_j = dy_j D_j^-beta - 2 alpha beta / size * x_j * sum over [j - size/2, j + (size-1)/2]
//          (the window mirrored) of dy_c y_c / D_c
class LrnEven : public Kernel {
 public:
  LrnEven(const Node& n, bool grad) : grad_(grad), p_(lrn_params(n.attrs)) {
    require_f32(n);
    const Shape& s = n.in[grad ? 1 : 0].shape;
    n_ = s[0];
    c_ = s[1];
    for (size_t a = 2; a < s.size(); ++a) inner_ *= s[a];
    for (const TensorRef& t : n.in) ids_.push_back(t.id);
    ids_.push_back(n.out[0].id);
  }
  void run(const Run& r) override {
    const int64_t total = n_ * c_ * inner_, C = c_, inner = inner_;
    const LrnParams p = p_;
    // D of channel c at the position whose channel 0 is xs.
    auto den = [&p, C, inner](const float* xs, int64_t c) {
      const int64_t lo = std::max<int64_t>(c - (p.size - 1) / 2, 0);
      const int64_t hi = std::min<int64_t>(c + p.size / 2, C - 1);
      double s = 0;
      for (int64_t k = lo; k <= hi; ++k) s += static_cast<double>(xs[k * inner]) * xs[k * inner];
      return p.bias + static_cast<double>(p.alpha) / p.size * s;
    };
    if (!grad_) {
      const float* x = r.at<float>(ids_[0]);
      float* y = r.at<float>(ids_[1]);
#pragma omp parallel for
      for (int64_t i = 0; i < total; ++i) {
        const float* xs = x + (i / (inner * C)) * C * inner + i % inner;
        y[i] = static_cast<float>(x[i] * std::pow(den(xs, i / inner % C), -p.beta));
      }
      return;
    }
    const float* dy = r.at<float>(ids_[0]);
    const float* x = r.at<float>(ids_[1]);
    const float* y = r.at<float>(ids_[2]);
    float* dx = r.at<float>(ids_[3]);
#pragma omp parallel for
    for (int64_t i = 0; i < total; ++i) {
      const int64_t j = i / inner % C, base = (i / (inner * C)) * C * inner + i % inner;
      const int64_t lo = std::max<int64_t>(j - p.size / 2, 0);
      const int64_t hi = std::min<int64_t>(j + (p.size - 1) / 2, C - 1);
      double back = 0;
      for (int64_t c = lo; c <= hi; ++c)
        back += static_cast<double>(dy[base + c * inner]) * y[base + c * inner] /
                den(x + base, c);
      dx[i] = static_cast<float>(dy[i] * std::pow(den(x + base, j), -p.beta) -
                                 2.0 * p.alpha * p.beta / p.size * x[i] * back);
    }
  }

 private:
  bool grad_;
  LrnParams p_;
  int64_t n_ = 0, c_ = 0, inner_ = 1;
  std::vector<int> ids_;
};

dnnl::lrn_forward::primitive_desc lrn_forward_pd(const Node& n, const LrnParams& p, prop pk,
                                                  const memory::desc& md) {
  return dnnl::lrn_forward::primitive_desc(n.engine, pk, alg::lrn_across_channels, md, md, p.size,
                                           p.alpha, p.beta, p.bias, user_scratchpad());
}

KernelPtr lrn(const Node& n) {
  const LrnParams p = lrn_params(n.attrs);  // common/norm.h
  if (p.size % 2 == 0) return std::make_unique<LrnEven>(n, false);
  auto md = view_md(as4d(n.in[0].shape), n.in[0].dtype);
  auto pd = lrn_forward_pd(n, p, prop::forward_inference, md);
  auto k = std::make_unique<DnnlKernel>();
  k->add(dnnl::lrn_forward(pd), pd, {{DNNL_ARG_SRC, n.in[0].id}, {DNNL_ARG_DST, n.out[0].id}});
  return k;
}

// [dy, x, y] -> dx: the forward runs again (training) for the workspace oneDNN's backward reads.
KernelPtr lrn_grad(const Node& n) {
  const LrnParams p = lrn_params(n.attrs);
  if (p.size % 2 == 0) return std::make_unique<LrnEven>(n, true);
  auto md = view_md(as4d(n.in[1].shape), n.in[1].dtype);
  auto fwd = lrn_forward_pd(n, p, prop::forward_training, md);
  dnnl::lrn_backward::primitive_desc bwd(n.engine, alg::lrn_across_channels, md, md, md, p.size,
                                         p.alpha, p.beta, p.bias, fwd, user_scratchpad());
  auto k = std::make_unique<DnnlKernel>();
  int64_t y_tmp = k->temp(fwd.dst_desc().get_size());
  size_t ws_bytes = fwd.workspace_desc().get_size();
  if (ws_bytes == 0) {
    k->add(dnnl::lrn_backward(bwd), bwd, {{DNNL_ARG_DIFF_DST, n.in[0].id}, {DNNL_ARG_SRC, n.in[1].id},
                                          {DNNL_ARG_DIFF_SRC, n.out[0].id}});
    return k;
  }
  int64_t ws = k->temp(ws_bytes);
  k->add(dnnl::lrn_forward(fwd), fwd,
         {{DNNL_ARG_SRC, n.in[1].id}, {DNNL_ARG_DST, -1, y_tmp}, {DNNL_ARG_WORKSPACE, -1, ws}});
  k->add(dnnl::lrn_backward(bwd), bwd,
         {{DNNL_ARG_DIFF_DST, n.in[0].id}, {DNNL_ARG_SRC, n.in[1].id}, {DNNL_ARG_WORKSPACE, -1, ws},
          {DNNL_ARG_DIFF_SRC, n.out[0].id}});
  return k;
}

}  // namespace

PLANNER_REGISTER_KERNELS(norm) {
  r["BatchNorm"] = batch_norm;
  r["BatchNormGrad"] = batch_norm_grad;
  r["LRN"] = lrn;
  r["LRNGrad"] = lrn_grad;
}

}  // namespace planner
