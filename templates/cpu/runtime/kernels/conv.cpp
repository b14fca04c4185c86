// Convolutions with oneDNN: Conv2D (forward), Conv2DBackpropInput (backward data),
// Conv2DBackpropFilter (backward weights), ConvTranspose2D (deconvolution forward). Tensors are
// plain NCHW and OIHW (IOHW for transposed weights); grouped weights are the same bytes seen as
// [G, O/G, I/G, kh, kw]. Attrs: strides, pads [top, left, bottom, right], dilations, groups.
#include "../dnnl_kernel.h"

namespace planner {
namespace {

using alg = dnnl::algorithm;
using prop = dnnl::prop_kind;

struct Geometry {
  memory::dims strides, dilation, pad_l, pad_r;
  int64_t groups;
};

Geometry geometry(const Node& n) {
  auto s = n.attrs.ints("strides"), p = n.attrs.ints("pads"), d = n.attrs.ints("dilations");
  return Geometry{{s[0], s[1]}, dnnl_dilation(d), {p[0], p[1]}, {p[2], p[3]}, n.attrs.i("groups")};
}

// OIHW weights (or their gradient), grouped when groups > 1.
memory::desc weights_md(const Shape& w, int64_t groups, int dtype) {
  if (groups == 1) return plain_md(w, dtype);
  return view_md({groups, w[0] / groups, w[1], w[2], w[3]}, dtype);
}

dnnl::convolution_forward::primitive_desc forward_pd(const Node& n, const Geometry& g,
                                                     const memory::desc& x, const memory::desc& w,
                                                     const memory::desc& y) {
  return dnnl::convolution_forward::primitive_desc(n.engine, prop::forward_training,
                                                   alg::convolution_direct, x, w, y, g.strides,
                                                   g.dilation, g.pad_l, g.pad_r, user_scratchpad());
}

KernelPtr conv2d(const Node& n) {
  Geometry g = geometry(n);
  const TensorRef &x = n.in[0], &w = n.in[1], &y = n.out[0];
  auto pd = forward_pd(n, g, plain_md(x.shape, x.dtype), weights_md(w.shape, g.groups, w.dtype),
                       plain_md(y.shape, y.dtype));
  auto k = std::make_unique<DnnlKernel>();
  k->add(dnnl::convolution_forward(pd), pd,
         {{DNNL_ARG_SRC, x.id}, {DNNL_ARG_WEIGHTS, w.id}, {DNNL_ARG_DST, y.id}});
  return k;
}

// [dy, w] -> dx of shape input_shape.
KernelPtr conv2d_backprop_input(const Node& n) {
  Geometry g = geometry(n);
  const TensorRef &dy = n.in[0], &w = n.in[1], &dx = n.out[0];
  auto x_md = plain_md(dx.shape, dx.dtype);
  auto w_md = weights_md(w.shape, g.groups, w.dtype);
  auto y_md = plain_md(dy.shape, dy.dtype);
  auto hint = forward_pd(n, g, x_md, w_md, y_md);
  dnnl::convolution_backward_data::primitive_desc pd(n.engine, alg::convolution_direct, x_md, w_md,
                                                     y_md, g.strides, g.dilation, g.pad_l, g.pad_r,
                                                     hint, user_scratchpad());
  auto k = std::make_unique<DnnlKernel>();
  k->add(dnnl::convolution_backward_data(pd), pd,
         {{DNNL_ARG_DIFF_DST, dy.id}, {DNNL_ARG_WEIGHTS, w.id}, {DNNL_ARG_DIFF_SRC, dx.id}});
  return k;
}

// [x, dy] -> dw of shape filter_shape.
KernelPtr conv2d_backprop_filter(const Node& n) {
  Geometry g = geometry(n);
  const TensorRef &x = n.in[0], &dy = n.in[1], &dw = n.out[0];
  auto x_md = plain_md(x.shape, x.dtype);
  auto w_md = weights_md(dw.shape, g.groups, dw.dtype);
  auto y_md = plain_md(dy.shape, dy.dtype);
  auto hint = forward_pd(n, g, x_md, w_md, y_md);
  dnnl::convolution_backward_weights::primitive_desc pd(n.engine, alg::convolution_direct, x_md,
                                                        w_md, y_md, g.strides, g.dilation, g.pad_l,
                                                        g.pad_r, hint, user_scratchpad());
  auto k = std::make_unique<DnnlKernel>();
  k->add(dnnl::convolution_backward_weights(pd), pd,
         {{DNNL_ARG_SRC, x.id}, {DNNL_ARG_DIFF_DST, dy.id}, {DNNL_ARG_DIFF_WEIGHTS, dw.id}});
  return k;
}

// [x (N,C,H,W), w (C, O/G, kh, kw)] -> y. oneDNN's deconvolution weights are [O, C, kh, kw]
// (grouped: [G, O/G, C/G, kh, kw]); ours hold C before O, so the view swaps their strides.
// output_padding extends the bottom/right: it lowers oneDNN's right padding.
KernelPtr conv_transpose2d(const Node& n) {
  Geometry g = geometry(n);
  auto op = n.attrs.ints("output_padding");
  g.pad_r[0] -= op[0];
  g.pad_r[1] -= op[1];
  const TensorRef &x = n.in[0], &w = n.in[1], &y = n.out[0];
  memory::desc w_md;
  const Shape& s = w.shape;  // C, O/G, kh, kw
  if (g.groups == 1) {
    w_md = memory::desc({s[1], s[0], s[2], s[3]}, dnnl_type(w.dtype), tag::iohw);
  } else {
    w_md = memory::desc({g.groups, s[1], s[0] / g.groups, s[2], s[3]}, dnnl_type(w.dtype),
                        tag::giohw);
  }
  dnnl::deconvolution_forward::primitive_desc pd(
      n.engine, prop::forward_training, alg::deconvolution_direct, plain_md(x.shape, x.dtype),
      w_md, plain_md(y.shape, y.dtype), g.strides, g.dilation, g.pad_l, g.pad_r,
      user_scratchpad());
  auto k = std::make_unique<DnnlKernel>();
  k->add(dnnl::deconvolution_forward(pd), pd,
         {{DNNL_ARG_SRC, x.id}, {DNNL_ARG_WEIGHTS, w.id}, {DNNL_ARG_DST, y.id}});
  return k;
}

}  // namespace

void add_conv_kernels(Registry& r) {
  r["Conv2D"] = conv2d;
  r["Conv2DBackpropInput"] = conv2d_backprop_input;
  r["Conv2DBackpropFilter"] = conv2d_backprop_filter;
  r["ConvTranspose2D"] = conv_transpose2d;
}

}  // namespace planner
