// Average pooling with oneDNN: AvgPool (forward), AvgPoolGrad (backward). MaxPool and
// MaxPoolGrad are loops in max_pool.cpp.
// Right/bottom padding is taken from the declared output size, which covers ceil_mode.
// bfloat16 / float16 tensors: oneDNN's low-type pooling, or float32 on widened copies where the
// ISA has none (native_or_widened).
#include "../dnnl_kernel.h"
#include "pool.h"
#include "pool_f64.h"

namespace planner {
namespace {

using alg = dnnl::algorithm;
using prop = dnnl::prop_kind;

struct Window {
  memory::dims kernel, strides, dilation, pad_l, pad_r;
  alg average;  // count_include_pad's divisor or the input elements'
};

// x: input NCHW shape, y: output NCHW shape.
Window window(const Node& n, const Shape& x, const Shape& y) {
  const PoolWindow p = pool_window(n.attrs, x, y);  // common/pool.h
  const std::vector<int64_t> d{p.dilation[0], p.dilation[1]};
  Window w{{p.kernel[0], p.kernel[1]}, {p.stride[0], p.stride[1]}, dnnl_dilation(d),
           {p.pad_begin[0], p.pad_begin[1]}, {p.pad_end[0], p.pad_end[1]},
           p.count_include_pad ? alg::pooling_avg_include_padding
                               : alg::pooling_avg_exclude_padding};
  for (int a = 0; a < 2; ++a) {
    const int64_t span = (p.kernel[a] - 1) * p.dilation[a] + 1;
    const int64_t reach = (y[2 + a] - 1) * p.stride[a] + span;  // of the last window
    w.pad_r[a] = std::max<int64_t>(p.pad_end[a], reach - x[2 + a] - p.pad_begin[a]);
  }
  return w;
}

dnnl::pooling_forward::primitive_desc forward_pd(const Node& n, prop p, const Window& w,
                                                 const memory::desc& x, const memory::desc& y) {
  return dnnl::pooling_forward::primitive_desc(n.engine, p, w.average, x, y, w.strides, w.kernel,
                                               w.dilation, w.pad_l, w.pad_r, user_scratchpad());
}

KernelPtr avg_pool_any(const Node& n) {
  const TensorRef &x = n.in[0], &y = n.out[0];
  Window w = window(n, x.shape, y.shape);
  auto pd = forward_pd(n, prop::forward_inference, w, plain_md(x.shape, x.dtype),
                       plain_md(y.shape, y.dtype));
  auto k = std::make_unique<DnnlKernel>();
  k->add(dnnl::pooling_forward(pd), pd, {{DNNL_ARG_SRC, x.id}, {DNNL_ARG_DST, y.id}});
  return k;
}

// float64: pool_f64.cpp's loops in double (oneDNN 3.2's pooling has no f64).
KernelPtr avg_pool(const Node& n) {
  return n.in[0].dtype == F64 ? avg_pool_f64(n) : native_or_widened(n, avg_pool_any);
}

// [dy] -> dx of shape input_shape.
KernelPtr avg_pool_grad_any(const Node& n) {
  const TensorRef &dy = n.in[0], &dx = n.out[0];
  Window w = window(n, dx.shape, dy.shape);
  // GlobalAvgPool's gradient may write a channel-blocked dx (planner/ops/pool.py); its dy, a
  // 1x1 map, holds the same bytes in either layout, so it is described in dx's, which oneDNN's
  // blocked pooling kernels take.
  TensorRef dy_held = dy;
  if (dx.block && dy.shape.size() == 4 && dy.shape[2] * dy.shape[3] == 1 &&
      dy.shape[1] % dx.block == 0)
    dy_held.block = dx.block;
  auto x_md = held_md(dx);
  auto y_md = held_md(dy_held);
  auto fwd = forward_pd(n, prop::forward_training, w, x_md, y_md);
  dnnl::pooling_backward::primitive_desc bwd(n.engine, w.average, x_md, y_md, w.strides, w.kernel,
                                             w.dilation, w.pad_l, w.pad_r, fwd, user_scratchpad());
  auto k = std::make_unique<DnnlKernel>();
  k->add(dnnl::pooling_backward(bwd), bwd, {{DNNL_ARG_DIFF_DST, dy.id}, {DNNL_ARG_DIFF_SRC, dx.id}});
  return k;
}

KernelPtr avg_pool_grad(const Node& n) {
  return n.in[0].dtype == F64 ? avg_pool_grad_f64(n) : native_or_widened(n, avg_pool_grad_any);
}

}  // namespace

PLANNER_REGISTER_KERNELS(pool) {
  r["AvgPool"] = {avg_pool, "float32|float64"};
  r["AvgPoolGrad"] = {avg_pool_grad, "float32|float64"};
}

}  // namespace planner
