// MatMul: one oneDNN matmul primitive. Transposes are strided views (no copies); batch axes
// broadcast as in numpy.matmul (oneDNN broadcasts size-1 batch dims of either side). A batched
// A (not transposed) times a matrix B is one GEMM over A's rows, (batch x M, K) x (K, N): oneDNN
// runs a batch as that many small GEMMs, about half as fast (an LSTM's input projection over
// every step, a linear layer on a sequence).
// bfloat16 / float16 operands accumulate in float32 inside the primitive. Where this CPU's oneDNN
// has no matmul for the low type, the operands are widened into float32 temporaries (exact), the
// product runs in float32 and the result is rounded once into the low-type output: the native
// kernel's numbers up to summation order (conv.cpp does the same for convolutions).
// An optional third input, a (N,) bias (a BiasAdd over the last axis folded in by
// planner/graph/fold_bias.py), is the primitive's bias argument: added as each output tile is
// written, instead of a second pass over y.
#include "../dnnl_kernel.h"

namespace planner {
namespace {

// Descriptor of `shape` seen as rank-`rank` (leading 1s), last two axes swapped when
// `transposed`, over the tensor's row-major bytes.
memory::desc matrix_md(const Shape& shape, int rank, bool transposed, int dtype) {
  Shape dims(rank - shape.size(), 1);
  dims.insert(dims.end(), shape.begin(), shape.end());
  memory::dims strides(rank, 1);
  for (int k = rank - 2; k >= 0; --k) strides[k] = strides[k + 1] * dims[k + 1];
  memory::dims d(dims.begin(), dims.end());
  if (transposed) {
    std::swap(d[rank - 1], d[rank - 2]);
    std::swap(strides[rank - 1], strides[rank - 2]);
  }
  return memory::desc(d, dnnl_type(dtype), strides);
}

KernelPtr matmul(const Node& n) {
  const TensorRef &a = n.in[0], &b = n.in[1], &y = n.out[0];
  Shape a_shape = a.shape, y_shape = y.shape;
  if (a_shape.size() > 2 && b.shape.size() == 2 && !n.attrs.b("transpose_a")) {
    int64_t rows = 1;
    for (size_t k = 0; k + 1 < y_shape.size(); ++k) rows *= y_shape[k];
    a_shape = {rows, a_shape.back()};
    y_shape = {rows, y_shape.back()};
  }
  int rank = static_cast<int>(y_shape.size());
  auto a_md = matrix_md(a_shape, rank, n.attrs.b("transpose_a"), a.dtype);
  auto b_md = matrix_md(b.shape, rank, n.attrs.b("transpose_b"), b.dtype);
  auto y_md = plain_md(y_shape, y.dtype);
  const bool biased = n.in.size() == 3;
  memory::desc bias_md;
  if (biased) {
    Shape bias_dims(rank, 1);
    bias_dims[rank - 1] = y_shape.back();
    bias_md = plain_md(bias_dims, n.in[2].dtype);
  }
  auto k = std::make_unique<DnnlKernel>();
  try {
    auto pd = biased ? dnnl::matmul::primitive_desc(n.engine, a_md, b_md, bias_md, y_md,
                                                    user_scratchpad())
                     : dnnl::matmul::primitive_desc(n.engine, a_md, b_md, y_md, user_scratchpad());
    std::vector<DnnlKernel::Arg> args = {{DNNL_ARG_SRC, a.id}, {DNNL_ARG_WEIGHTS, b.id},
                                         {DNNL_ARG_DST, y.id}};
    if (biased) args.push_back({DNNL_ARG_BIAS, n.in[2].id});
    k->add(dnnl::matmul(pd), pd, args);
    return k;
  } catch (const dnnl::error& e) {
    bool low = y.dtype == BF16 || y.dtype == F16;
    if (e.status != dnnl_unimplemented || !low) throw;
  }
  // The float32 fallback: each operand's bytes reordered into a float32 temporary of the
  // same strides, the product, then the result reordered (rounded) into y.
  auto widened = [](const memory::desc& md) {
    return memory::desc(md.get_dims(), dt::f32, md.get_strides());
  };
  auto reorder = [&](const memory::desc& from, DnnlKernel::Arg src, const memory::desc& to,
                     DnnlKernel::Arg dst) {
    dnnl::reorder::primitive_desc r(n.engine, from, n.engine, to, user_scratchpad());
    src.dnnl_arg = DNNL_ARG_FROM;
    dst.dnnl_arg = DNNL_ARG_TO;
    k->add(dnnl::reorder(r), r, {src, dst});
  };
  auto a32 = widened(a_md), b32 = widened(b_md), y32 = widened(y_md);
  int64_t ta = k->temp(a32.get_size()), tb = k->temp(b32.get_size()), ty = k->temp(y32.get_size());
  reorder(a_md, {0, a.id}, a32, {0, -1, ta});
  reorder(b_md, {0, b.id}, b32, {0, -1, tb});
  std::vector<DnnlKernel::Arg> args = {{DNNL_ARG_SRC, -1, ta}, {DNNL_ARG_WEIGHTS, -1, tb},
                                       {DNNL_ARG_DST, -1, ty}};
  memory::desc bias32;
  if (biased) {
    bias32 = widened(bias_md);
    int64_t tbias = k->temp(bias32.get_size());
    reorder(bias_md, {0, n.in[2].id}, bias32, {0, -1, tbias});
    args.push_back({DNNL_ARG_BIAS, -1, tbias});
  }
  auto pd = biased ? dnnl::matmul::primitive_desc(n.engine, a32, b32, bias32, y32,
                                                  user_scratchpad())
                   : dnnl::matmul::primitive_desc(n.engine, a32, b32, y32, user_scratchpad());
  k->add(dnnl::matmul(pd), pd, args);
  reorder(y32, {0, -1, ty}, y_md, {0, y.id});
  return k;
}

}  // namespace

PLANNER_REGISTER_KERNELS(matmul) { r["MatMul"] = matmul; }

}  // namespace planner
