// LayerNorm and LayerNormGrad: oneDNN layer normalization forward (training: it writes the mean
// and variance the backward reads) and backward (diff_src, diff_scale, diff_shift). The op
// normalises over the axes from `axis` on; oneDNN normalises over the last axis, so x is viewed
// as (rows, n) with n the product of the normalised axes, scale and bias as (n), stats as (rows).
// float64: norms_f64.cpp's loops (oneDNN 3.2 has no f64 layer normalization).
#include "../dnnl_kernel.h"
#include "../loops.h"
#include "norms_f64.h"

namespace planner {
namespace {

using flags = dnnl::normalization_flags;

struct View {
  memory::desc data, stat, channel;
};

View view(const Node& n, const TensorRef& x) {
  const Shape& s = x.shape;
  const AxisSplit a = axis_split(n.attrs, s);  // rows before the axis, columns from it
  const int64_t rows = a.outer, cols = a.extent * a.inner;
  return {view_md({rows, cols}, x.dtype), view_md({rows}, x.dtype), view_md({cols}, x.dtype)};
}

dnnl::layer_normalization_forward::primitive_desc forward_pd(const Node& n, const View& v,
                                                             flags f) {
  return {n.engine, dnnl::prop_kind::forward_training, v.data, v.data, v.stat,
          static_cast<float>(n.attrs.f("epsilon")), f, user_scratchpad()};
}

// [x, scale, bias?] -> [y, mean, var]
KernelPtr layer_norm(const Node& n) {
  if (n.in[0].dtype == F64) return layer_norm_f64(n);
  require_f32(n);
  const View v = view(n, n.in[0]);
  const bool shift = n.in.size() > 2;
  auto pd = forward_pd(n, v, shift ? flags::use_scale | flags::use_shift : flags::use_scale);
  std::vector<DnnlKernel::Arg> args = {
      {DNNL_ARG_SRC, n.in[0].id}, {DNNL_ARG_SCALE, n.in[1].id}, {DNNL_ARG_DST, n.out[0].id},
      {DNNL_ARG_MEAN, n.out[1].id}, {DNNL_ARG_VARIANCE, n.out[2].id}};
  if (shift) args.push_back({DNNL_ARG_SHIFT, n.in[2].id});
  auto k = std::make_unique<DnnlKernel>();
  k->add(dnnl::layer_normalization_forward(pd), pd, args);
  return k;
}

// [dy, x, scale, mean, var] -> [dx, dscale, dbias]
KernelPtr layer_norm_grad(const Node& n) {
  if (n.in[0].dtype == F64) return layer_norm_grad_f64(n);
  require_f32(n);
  const View v = view(n, n.in[1]);
  const flags f = flags::use_scale | flags::use_shift;
  auto hint = forward_pd(n, v, f);
  dnnl::layer_normalization_backward::primitive_desc pd(
      n.engine, dnnl::prop_kind::backward, v.data, v.data, v.data, v.stat,
      static_cast<float>(n.attrs.f("epsilon")), f, hint, user_scratchpad());
  auto k = std::make_unique<DnnlKernel>();
  // oneDNN 3.2's backward asks for a shift argument with use_shift, though without
  // fuse_norm_relu no gradient depends on it: a scratch temporary stands in for it.
  const int64_t shift = k->temp(v.channel.get_size());
  k->add(dnnl::layer_normalization_backward(pd), pd,
         {{DNNL_ARG_DIFF_DST, n.in[0].id}, {DNNL_ARG_SRC, n.in[1].id},
          {DNNL_ARG_SCALE, n.in[2].id}, {DNNL_ARG_SHIFT, -1, shift}, {DNNL_ARG_MEAN, n.in[3].id},
          {DNNL_ARG_VARIANCE, n.in[4].id}, {DNNL_ARG_DIFF_SRC, n.out[0].id},
          {DNNL_ARG_DIFF_SCALE, n.out[1].id}, {DNNL_ARG_DIFF_SHIFT, n.out[2].id}});
  return k;
}

}  // namespace

PLANNER_REGISTER_KERNELS(layer_norm) {
  r["LayerNorm"] = {layer_norm, "float32|float64"};
  r["LayerNormGrad"] = {layer_norm_grad, "float32|float64"};
}

}  // namespace planner
