// Convolutions with oneDNN: Conv2D (forward), Conv2DBackpropInput (backward data),
// Conv2DBackpropFilter (backward weights), ConvTranspose2D (deconvolution forward). Tensors are
// plain NCHW and OIHW (IOHW for transposed weights); grouped weights are the same bytes seen as
// [G, O/G, I/G, kh, kw]. Attrs: strides, pads [top, left, bottom, right], dilations, groups
// (common/conv.h reads them for both backends). A float64 node (any of the four) runs
// conv_f64.cpp's im2col and dgemm: oneDNN 3.2 has no f64 convolution.
//
// A Conv2D carrying a folded bias and Relu (planner/frontend/passes/fold_conv_bias.py) gives the bias to
// the primitive as its bias argument (added to each output block as the kernel writes it), and
// applies the Relu in one pass over y after it, as the Relu kernel does (v < 0 ? 0 : v; not
// oneDNN's Relu post-op, which turns NaN into 0: fused_relu.h, shared with MatMul); a folded
// LeakyRelu of positive slope is oneDNN's eltwise post-op (leaky_post_op). The activation is
// float32's alone (planner/ops/fused_activation.py).
//
// Each primitive is created on `any` layouts, so oneDNN picks the blocked layouts its fast
// kernels want (on plain NCHW it falls back to slow GEMM-based paths: ResNet-18's backward
// convolutions ran 2x PyTorch's); where the plan's `layout` attr says nhwc, the image and output
// are channels-last instead, the layout oneDNN's brgemm kernels take (chosen per op from the
// profile, planner/costs/conv_layouts.py: on an AVX2 EPYC a stride-2 4x4 forward ran 2.2x
// faster on it, its weight gradient 1.5x slower); where it says columns, a float32 one-group
// convolution runs as one matmul over the batch's columns (conv_columns.h; oneDNN's kernel
// where that does not apply: another type); where it says image_columns, a data gradient or a
// transposed convolution runs image by image, one matmul and col2im each (an image of a few
// channels, which oneDNN's blocked kernels pad to a whole block). An image or output the step keeps channel-blocked
// (TensorRef::block, planner/step/blocked.py) is given to the primitive in that layout, so
// oneDNN runs its blocked kernel on it as it lies (where oneDNN has none for the block under
// this process's ISA, on `any` as a plain one; the columns kernels read and write either).
// Operands whose chosen layout is not the one the arena holds are reordered into temporaries
// in the scratch area before the primitive, results back after it (as PyTorch's eager oneDNN
// path does). A float32 weight gradient for which oneDNN would run its im2col GEMM fallback
// runs the runtime's own kernel instead (filter_grads.h: a direct loop per channel
// for a depthwise one; conv_columns.h: the whole batch's columns and one matmul otherwise).
// Weights (and their gradient) the executor keeps in the forward primitive's layout
// (weight_layouts.h) are read and written as they lie: each such kernel is made twice, on the
// kept layout and on plain, and runs the one the tensor is held in now (plain once released).
// A transposed convolution's weight is kept in the layout of the Conv2D that is its data
// gradient; the transposed convolution reorders from it.
//
// bfloat16 / float16 operands (mixed precision): the primitive reads and writes the low type and
// accumulates in float32. On a CPU where oneDNN has no implementation for the low type (bf16
// needs AVX512_CORE or AVX2_VNNI_2, f16 AVX512_FP16 or AVX2_VNNI_2), the primitive is created on
// float32 instead: the layout reorders above then also convert, so the low operands are widened
// exactly, the product accumulates in float32 as the native kernel's does, and the result is
// rounded once to the low type. Same numbers up to summation order; slower.
#include <algorithm>
#include <string>

#include "../dnnl_kernel.h"
#include "../fused_relu.h"
#include "../weight_layouts.h"
#include "conv.h"
#include "conv_columns.h"
#include "conv_f64.h"
#include "filter_grads.h"

namespace planner {
namespace {

using alg = dnnl::algorithm;
using prop = dnnl::prop_kind;

// The common geometry (common/conv.h) in oneDNN's terms.
struct DnnlConvGeometry {
  memory::dims strides, dilation, pad_l, pad_r;
  int64_t groups;
  bool channels_last;  // the image and output in nhwc, not `any` (the `layout` attr)
  bool take_blocked = true;  // a blocked image or output given as it lies (header comment)
};

DnnlConvGeometry dnnl_conv_geometry(const Node& n) {
  const ConvGeometry c = conv_geometry(n.attrs);
  const std::string layout = n.attrs.has("layout") ? n.attrs.s("layout") : "any";
  if (layout != "any" && layout != "nhwc" && layout != "columns" && layout != "image_columns")
    throw std::runtime_error("convolution layout must be any, nhwc, columns or image_columns, "
                             "got " + layout);
  return DnnlConvGeometry{{c.strides[0], c.strides[1]},
                          dnnl_dilation({c.dilations[0], c.dilations[1]}),
                          {c.pads[0], c.pads[1]},
                          {c.pads[2], c.pads[3]},
                          c.groups,
                          layout == "nhwc"};
}

// OIHW weights (or their gradient), grouped when groups > 1.
memory::desc weights_md(const Shape& w, int64_t groups, int dtype) {
  if (groups == 1) return plain_md(w, dtype);
  return view_md({groups, w[0] / groups, w[1], w[2], w[3]}, dtype);
}

// The same dims with the layout left to the primitive, in the compute type (`dt::undef`: the
// tensor's own).
memory::desc any_md(const memory::desc& plain, dt compute) {
  return memory::desc(plain.get_dims(), compute == dt::undef ? plain.get_data_type() : compute,
                      tag::any);
}

// An image or output (N, C, H, W) as the arena holds it (`held`: held_md): a channel-blocked
// one as it is where the geometry takes it; else channels-last where the geometry asks, else
// `any_md`.
memory::desc image_md(const memory::desc& held, const TensorRef& t, dt compute,
                      const DnnlConvGeometry& g) {
  if (t.block && g.take_blocked && (compute == dt::undef || compute == held.get_data_type()))
    return held;
  const memory::desc plain = view_md(t.shape, t.dtype);
  if (!g.channels_last) return any_md(plain, compute);
  return memory::desc(plain.get_dims(), compute == dt::undef ? plain.get_data_type() : compute,
                      tag::nhwc);
}

bool low_precision(const Node& n) {
  for (const auto* side : {&n.in, &n.out})
    for (const TensorRef& t : *side)
      if (t.dtype == BF16 || t.dtype == F16) return true;
  return false;
}

// `make(dt::undef)`, the primitive on the tensors' own types; for low-precision operands that
// this CPU's oneDNN cannot compute in, `make(dt::f32)` (the fallback in the header comment).
template <class Make>
auto on_compute_type(const Node& n, Make make) -> decltype(make(dt::undef)) {
  try {
    return make(dt::undef);
  } catch (const dnnl::error& e) {
    if (e.status != dnnl_unimplemented || !low_precision(n)) throw;
    return make(dt::f32);
  }
}

// `make()` on the geometry `g` (which it reads), which gives a blocked image to the primitive as
// it lies; where oneDNN has no kernel of its own on that layout (its kernels under this
// process's ISA block by another width; a depthwise weight gradient on 2x2 maps got its
// reference implementation, ~20x slower), `make()` again on `any`, which reorders it.
template <class Make>
auto blocked_or_any(DnnlConvGeometry& g, Make make) -> decltype(make()) {
  if (!g.take_blocked) return make();
  try {
    auto pd = make();
    if (std::string(pd.impl_info_str()).rfind("ref", 0) != 0) return pd;
  } catch (const dnnl::error& e) {
    if (e.status != dnnl_unimplemented) throw;
  }
  g.take_blocked = false;
  return make();
}

// One operand: its primitive argument, its tensor and the layout the arena holds it in.
struct Operand {
  int arg;
  int tensor;
  memory::desc plain;
};

// A kernel running `prim` (made from `pd` on `any` layouts): inputs reordered from their plain
// tensors into temporaries where the chosen layout differs, outputs reordered back after.
// `zero_scratchpad`: DnnlKernel::add's.
template <class Prim, class PD>
KernelPtr on_chosen_layouts(const Node& n, const PD& pd, const std::vector<Operand>& inputs,
                            const Operand& output, bool zero_scratchpad = false) {
  auto k = std::make_unique<DnnlKernel>();
  std::vector<DnnlKernel::Arg> args;
  auto reorder = [&](const memory::desc& from, DnnlKernel::Arg src, const memory::desc& to,
                     DnnlKernel::Arg dst) {
    dnnl::reorder::primitive_desc r(n.engine, from, n.engine, to, user_scratchpad());
    src.dnnl_arg = DNNL_ARG_FROM;
    dst.dnnl_arg = DNNL_ARG_TO;
    k->add(dnnl::reorder(r), r, {src, dst});
  };
  for (const Operand& in : inputs) {
    memory::desc chosen = pd.query_md(dnnl::query::exec_arg_md, in.arg);
    if (chosen == in.plain) {
      args.push_back({in.arg, in.tensor});
      continue;
    }
    int64_t t = k->temp(chosen.get_size());
    reorder(in.plain, {0, in.tensor}, chosen, {0, -1, t});
    args.push_back({in.arg, -1, t});
  }
  memory::desc chosen = pd.query_md(dnnl::query::exec_arg_md, output.arg);
  if (chosen == output.plain) {
    args.push_back({output.arg, output.tensor});
    k->add(Prim(pd), pd, args, zero_scratchpad);
    return k;
  }
  int64_t t = k->temp(chosen.get_size());
  args.push_back({output.arg, -1, t});
  k->add(Prim(pd), pd, args, zero_scratchpad);
  reorder(chosen, {0, -1, t}, output.plain, {0, output.tensor});
  return k;
}

// A kernel made on a weight (or weight gradient) tensor's kept layout and on plain, running the
// one its family is held in (weight_layouts.h): released to plain between steps, it reorders
// as every plain weight does.
class KeptOrPlain : public Kernel {
 public:
  KeptOrPlain(KernelPtr kept, KernelPtr plain, int tensor, const WeightLayouts* layouts)
      : kept_(std::move(kept)), plain_(std::move(plain)), tensor_(tensor), layouts_(layouts) {}
  size_t scratch_bytes() const override {
    return std::max(kept_->scratch_bytes(), plain_->scratch_bytes());
  }
  std::string impl() const override { return now().impl(); }
  void run(const Run& r) override { now().run(r); }

 private:
  Kernel& now() const { return layouts_->held(tensor_) ? *kept_ : *plain_; }
  KernelPtr kept_, plain_;
  int tensor_;
  const WeightLayouts* layouts_;
};

// make(md): the kernel reading (or writing) tensor `id` as md lays it out: on `plain`, and where
// the executor keeps the tensor in a layout of its own, on that one too (KeptOrPlain).
template <class Make>
KernelPtr kept_or_plain(const Node& n, int id, memory::desc plain, Make make) {
  const memory::desc* kept = n.layouts ? n.layouts->kept(id) : nullptr;
  if (kept == nullptr) return make(plain);
  return std::make_unique<KeptOrPlain>(make(*kept), make(plain), id, n.layouts);
}

// A Conv2D's folded LeakyRelu of positive slope (planner/step/fold_conv_leaky.py): oneDNN's
// eltwise post-op computes it as the LeakyRelu kernel does (s > 0 ? s : s * alpha on the sum
// plus bias, NaN kept), with no pass over y. With slope 0 its JIT form is max(s, 0), which
// turns a NaN into 0: that one, and a Relu, are a pass after the primitive (fused_relu.h).
bool leaky_post_op(const Node& n) {
  const FoldedActivation act(n.attrs, "Conv2D");
  return act.kind == FoldedActivation::kLeaky && act.alpha > 0.f;
}

// The forward primitive's attributes: the user scratchpad, and that post-op where it applies
// (none for the backward ops' hints, whose nodes carry no activation).
dnnl::primitive_attr forward_attr(const Node& n) {
  dnnl::primitive_attr attr = user_scratchpad();
  if (leaky_post_op(n)) {
    dnnl::post_ops ops;
    ops.append_eltwise(alg::eltwise_relu, FoldedActivation(n.attrs, "Conv2D").alpha, 0.f);
    attr.set_post_ops(ops);
  }
  return attr;
}

// The forward primitive; with `bias` (a folded bias's plain descriptor) it adds it. The
// backward ops' hints pass none: oneDNN asks a hint for its geometry and layouts only.
// `x` and `y`: the image's and output's tensors, `x_md` and `y_md` their held layouts.
dnnl::convolution_forward::primitive_desc forward_pd(const Node& n, const DnnlConvGeometry& g,
                                                     const TensorRef& x, const memory::desc& x_md,
                                                     const memory::desc& w,
                                                     const TensorRef& y, const memory::desc& y_md,
                                                     dt c, const memory::desc* bias = nullptr) {
  if (bias)
    return dnnl::convolution_forward::primitive_desc(
        n.engine, prop::forward_training, alg::convolution_direct, image_md(x_md, x, c, g),
        any_md(w, c), any_md(*bias, c), image_md(y_md, y, c, g), g.strides, g.dilation,
        g.pad_l, g.pad_r, forward_attr(n));
  return dnnl::convolution_forward::primitive_desc(
      n.engine, prop::forward_training, alg::convolution_direct, image_md(x_md, x, c, g),
      any_md(w, c), image_md(y_md, y, c, g), g.strides, g.dilation, g.pad_l, g.pad_r,
      forward_attr(n));
}

// A backward primitive's descriptor (`PD`: data or weights) on the image `x` and output `y`
// (their tensors and held layouts) and the weights `w` on `any`, hinted by the forward's.
template <class PD>
PD backward_pd(const Node& n, DnnlConvGeometry& g, const TensorRef& x, const memory::desc& x_md,
               const memory::desc& w_md, const TensorRef& y, const memory::desc& y_md) {
  return blocked_or_any(g, [&] {
    return on_compute_type(n, [&](dt c) {
      auto hint = forward_pd(n, g, x, x_md, w_md, y, y_md, c);
      return PD(n.engine, alg::convolution_direct, image_md(x_md, x, c, g), any_md(w_md, c),
                image_md(y_md, y, c, g), g.strides, g.dilation, g.pad_l, g.pad_r, hint,
                user_scratchpad());
    });
  });
}

bool on_layout(const Node& n, const char* layout) {
  return n.attrs.has("layout") && n.attrs.s("layout") == layout && columns_apply(n);
}
bool on_columns(const Node& n) { return on_layout(n, "columns"); }
bool on_image_columns(const Node& n) { return on_layout(n, "image_columns"); }

// A Conv2D's primitive and operands: [x, w] or [x, w, bias] as the arena holds them.
struct ForwardConv {
  dnnl::convolution_forward::primitive_desc pd;
  std::vector<Operand> inputs;
  Operand output;
};

ForwardConv forward_conv(const Node& n) {
  DnnlConvGeometry g = dnnl_conv_geometry(n);
  const TensorRef &x = n.in[0], &w = n.in[1], &y = n.out[0];
  auto x_md = held_md(x);
  auto w_md = weights_md(w.shape, g.groups, w.dtype);
  auto y_md = held_md(y);
  std::vector<Operand> inputs = {{DNNL_ARG_SRC, x.id, x_md}, {DNNL_ARG_WEIGHTS, w.id, w_md}};
  memory::desc bias_md;
  if (n.in.size() == 3) {
    bias_md = plain_md(n.in[2].shape, n.in[2].dtype);
    inputs.push_back({DNNL_ARG_BIAS, n.in[2].id, bias_md});
  }
  const memory::desc* bias = n.in.size() == 3 ? &bias_md : nullptr;
  auto pd = blocked_or_any(g, [&] {
    return on_compute_type(
        n, [&](dt c) { return forward_pd(n, g, x, x_md, w_md, y, y_md, c, bias); });
  });
  return {pd, inputs, {DNNL_ARG_DST, y.id, y_md}};
}

// [x, w] or [x, w, bias] -> y
KernelPtr conv2d(const Node& n) {
  if (n.out[0].dtype == F64) return conv2d_f64(n);
  if (on_columns(n)) return columns_conv2d(n);
  ForwardConv f = forward_conv(n);
  KernelPtr conv = kept_or_plain(n, n.in[1].id, f.inputs[1].plain, [&](const memory::desc& w) {
    f.inputs[1].plain = w;
    return on_chosen_layouts<dnnl::convolution_forward>(n, f.pd, f.inputs, f.output);
  });
  if (leaky_post_op(n)) return conv;
  return with_fused_activation(std::move(conv), n, "Conv2D");
}

// [dy, w] -> dx of shape input_shape.
KernelPtr conv2d_backprop_input(const Node& n) {
  if (n.out[0].dtype == F64) return conv2d_backprop_input_f64(n);
  if (on_columns(n)) return columns_conv2d_backprop_input(n);
  if (on_image_columns(n)) return image_columns_data_gradient(n);
  DnnlConvGeometry g = dnnl_conv_geometry(n);
  const TensorRef &dy = n.in[0], &w = n.in[1], &dx = n.out[0];
  auto x_md = held_md(dx);
  auto w_md = weights_md(w.shape, g.groups, w.dtype);
  auto y_md = held_md(dy);
  auto pd = backward_pd<dnnl::convolution_backward_data::primitive_desc>(n, g, dx, x_md, w_md,
                                                                         dy, y_md);
  return kept_or_plain(n, w.id, w_md, [&](const memory::desc& held_w) {
    return on_chosen_layouts<dnnl::convolution_backward_data>(
        n, pd, {{DNNL_ARG_DIFF_DST, dy.id, y_md}, {DNNL_ARG_WEIGHTS, w.id, held_w}},
        {DNNL_ARG_DIFF_SRC, dx.id, x_md});
  });
}

// [x, dy] -> dw of shape filter_shape; on the columns layout the whole batch's columns and one
// matmul (conv_columns.h), as where oneDNN would take its GEMM fallback. oneDNN 3.2's bf16
// weight-gradient kernels (jit_bf16 on AVX512_CORE_BF16, brgconv on AMX) accumulate each kernel
// tap in scratchpad buffers they never initialise for a tap that sees only padding (a 3x3
// stride-2 convolution of a 1x1 map: ResNet's last stage at small images); with a user
// scratchpad holding other kernels' bytes those taps came out as garbage (5e28 where the
// gradient is 0). Zeroing the scratchpad first, as a fresh allocation would be, gives the
// zeros; float32 kernels write every tap.
// The weight gradient's primitive on oneDNN's kernel: the plain weights' descriptor, the
// primitive's, and whether the runtime's own kernel runs it instead (its GEMM fallback).
struct FilterGradPd {
  memory::desc w_md;
  dnnl::convolution_backward_weights::primitive_desc pd;
  bool own;
};

FilterGradPd filter_grad_pd(const Node& n) {
  DnnlConvGeometry g = dnnl_conv_geometry(n);
  const TensorRef &x = n.in[0], &dy = n.in[1], &dw = n.out[0];
  auto w_md = weights_md(dw.shape, g.groups, dw.dtype);
  auto pd = backward_pd<dnnl::convolution_backward_weights::primitive_desc>(
      n, g, x, held_md(x), w_md, dy, held_md(dy));
  return {w_md, pd, std::string(pd.impl_info_str()).find("gemm") != std::string::npos};
}

KernelPtr conv2d_backprop_filter(const Node& n) {
  if (n.out[0].dtype == F64) return conv2d_backprop_filter_f64(n);
  if (on_columns(n)) return columns_conv2d_backprop_filter(n, SIZE_MAX);  // the plan's rule
  const TensorRef &x = n.in[0], &dy = n.in[1], &dw = n.out[0];
  FilterGradPd f = filter_grad_pd(n);
  // (The runtime's own kernels read plain and blocked images alike; they write a plain
  // gradient, so a kept one takes oneDNN's kernel: weight_layouts.h keeps none where the
  // plan's team gets the fallback.)
  if (f.own && (n.layouts == nullptr || n.layouts->kept(dw.id) == nullptr)) {
    if (depthwise_float32(n, conv_geometry(n.attrs).groups)) return depthwise_filter_grad(n);
    if (KernelPtr own = columns_conv2d_backprop_filter(n, f.pd.scratchpad_desc().get_size()))
      return own;
  }
  return kept_or_plain(n, dw.id, f.w_md, [&](const memory::desc& held_dw) {
    return on_chosen_layouts<dnnl::convolution_backward_weights>(
        n, f.pd, {{DNNL_ARG_SRC, x.id, held_md(x)}, {DNNL_ARG_DIFF_DST, dy.id, held_md(dy)}},
        {DNNL_ARG_DIFF_WEIGHTS, dw.id, held_dw}, low_precision(n));
  });
}

// [x (N,C,H,W), w (C, O/G, kh, kw)] -> y. oneDNN's deconvolution weights are [O, C, kh, kw]
// (grouped: [G, O/G, C/G, kh, kw]); ours hold C before O, so the view swaps their strides.
// output_padding extends the bottom/right: it lowers oneDNN's right padding. On `any` layouts
// like the convolutions: on the plain ones oneDNN ran it as a GEMM (conv:any+gemm:jit).
KernelPtr conv_transpose2d(const Node& n) {
  if (n.out[0].dtype == F64) return conv_transpose2d_f64(n);
  if (on_image_columns(n)) return image_columns_data_gradient(n);
  DnnlConvGeometry g = dnnl_conv_geometry(n);
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
  auto x_md = held_md(x);
  auto y_md = held_md(y);
  auto pd = blocked_or_any(g, [&] {
    return on_compute_type(n, [&](dt c) {
      return dnnl::deconvolution_forward::primitive_desc(
          n.engine, prop::forward_training, alg::deconvolution_direct, image_md(x_md, x, c, g),
          any_md(w_md, c), image_md(y_md, y, c, g), g.strides, g.dilation, g.pad_l, g.pad_r,
          user_scratchpad());
    });
  });
  auto make = [&](const memory::desc& held_w) {
    return on_chosen_layouts<dnnl::deconvolution_forward>(
        n, pd, {{DNNL_ARG_SRC, x.id, x_md}, {DNNL_ARG_WEIGHTS, w.id, held_w}},
        {DNNL_ARG_DST, y.id, y_md});
  };
  // A weight kept in its data gradient's convolution layout (weight_layouts.h: the Conv2D
  // reading it as [C, O, kh, kw]), seen with C and O swapped as this primitive's are.
  const memory::desc* kept = n.layouts ? n.layouts->kept(w.id) : nullptr;
  if (kept == nullptr || g.groups != 1) return make(w_md);
  return std::make_unique<KeptOrPlain>(make(kept->permute_axes({1, 0, 2, 3})), make(w_md), w.id,
                                       n.layouts);
}

}  // namespace

std::optional<memory::desc> conv_kernel_weights(const Node& n) {
  const std::string op = n.spec->op;
  if (n.out[0].dtype == F64) return std::nullopt;  // conv_f64.cpp reads weights as they lie
  if (op == "Conv2D" && !on_columns(n))
    return forward_conv(n).pd.query_md(dnnl::query::exec_arg_md, DNNL_ARG_WEIGHTS);
  if (op != "Conv2DBackpropFilter" || on_columns(n)) return std::nullopt;
  FilterGradPd f = filter_grad_pd(n);
  if (f.own) return std::nullopt;
  return f.pd.query_md(dnnl::query::exec_arg_md, DNNL_ARG_DIFF_WEIGHTS);
}

PLANNER_REGISTER_KERNELS(conv) {
  r["Conv2D"] = {conv2d, "float32|float64"};
  r["Conv2DBackpropInput"] = {conv2d_backprop_input, "float32|float64"};
  r["Conv2DBackpropFilter"] = {conv2d_backprop_filter, "float32|float64"};
  r["ConvTranspose2D"] = {conv_transpose2d, "float32|float64"};
}

}  // namespace planner
