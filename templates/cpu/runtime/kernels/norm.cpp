// LRN and LRNGrad with oneDNN (plain loops for an even size, which oneDNN's symmetric window
// cannot express). Inputs (N, C, ...) are seen as (N, C, rest, 1), the same bytes.
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
  r["LRN"] = lrn;
  r["LRNGrad"] = lrn_grad;
}

}  // namespace planner
