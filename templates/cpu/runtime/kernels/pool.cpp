// Average pooling with oneDNN: AvgPool (forward), AvgPoolGrad (backward). MaxPool and
// MaxPoolGrad are loops in max_pool.cpp.
// Right/bottom padding is taken from the declared output size, which covers ceil_mode.
// bfloat16 / float16 tensors: oneDNN's low-type pooling, or float32 on widened copies where the
// ISA has none (native_or_widened).
#include "../dnnl_kernel.h"

namespace planner {
namespace {

using alg = dnnl::algorithm;
using prop = dnnl::prop_kind;

struct Window {
  memory::dims kernel, strides, dilation, pad_l, pad_r;
};

// x: input NCHW shape, y: output NCHW shape.
Window window(const Node& n, const Shape& x, const Shape& y) {
  auto k = n.attrs.ints("kernel"), s = n.attrs.ints("strides"), p = n.attrs.ints("pads");
  std::vector<int64_t> d = n.attrs.has("dilations") ? n.attrs.ints("dilations")
                                                    : std::vector<int64_t>{1, 1};
  Window w{{k[0], k[1]}, {s[0], s[1]}, dnnl_dilation(d), {p[0], p[1]}, {p[2], p[3]}};
  for (int a = 0; a < 2; ++a) {
    int64_t span = (k[a] - 1) * d[a] + 1;
    w.pad_r[a] = std::max<int64_t>(p[2 + a], (y[2 + a] - 1) * s[a] + span - x[2 + a] - p[a]);
  }
  return w;
}

alg avg_alg(const Node& n) {
  return n.attrs.b("count_include_pad") ? alg::pooling_avg_include_padding
                                        : alg::pooling_avg_exclude_padding;
}

dnnl::pooling_forward::primitive_desc forward_pd(const Node& n, alg a, prop p, const Window& w,
                                                 const memory::desc& x, const memory::desc& y) {
  return dnnl::pooling_forward::primitive_desc(n.engine, p, a, x, y, w.strides, w.kernel,
                                               w.dilation, w.pad_l, w.pad_r, user_scratchpad());
}

KernelPtr pool_forward(const Node& n, alg a) {
  const TensorRef &x = n.in[0], &y = n.out[0];
  Window w = window(n, x.shape, y.shape);
  auto pd = forward_pd(n, a, prop::forward_inference, w, plain_md(x.shape, x.dtype),
                       plain_md(y.shape, y.dtype));
  auto k = std::make_unique<DnnlKernel>();
  k->add(dnnl::pooling_forward(pd), pd, {{DNNL_ARG_SRC, x.id}, {DNNL_ARG_DST, y.id}});
  return k;
}

KernelPtr avg_pool_any(const Node& n) { return pool_forward(n, avg_alg(n)); }
KernelPtr avg_pool(const Node& n) { return native_or_widened(n, avg_pool_any); }

// [dy] -> dx of shape input_shape.
KernelPtr avg_pool_grad_any(const Node& n) {
  const TensorRef &dy = n.in[0], &dx = n.out[0];
  Window w = window(n, dx.shape, dy.shape);
  auto x_md = plain_md(dx.shape, dx.dtype);
  auto y_md = plain_md(dy.shape, dy.dtype);
  alg a = avg_alg(n);
  auto fwd = forward_pd(n, a, prop::forward_training, w, x_md, y_md);
  dnnl::pooling_backward::primitive_desc bwd(n.engine, a, x_md, y_md, w.strides, w.kernel,
                                             w.dilation, w.pad_l, w.pad_r, fwd, user_scratchpad());
  auto k = std::make_unique<DnnlKernel>();
  k->add(dnnl::pooling_backward(bwd), bwd, {{DNNL_ARG_DIFF_DST, dy.id}, {DNNL_ARG_DIFF_SRC, dx.id}});
  return k;
}

KernelPtr avg_pool_grad(const Node& n) { return native_or_widened(n, avg_pool_grad_any); }

}  // namespace

PLANNER_REGISTER_KERNELS(pool) {
  r["AvgPool"] = avg_pool;
  r["AvgPoolGrad"] = avg_pool_grad;
}

}  // namespace planner
