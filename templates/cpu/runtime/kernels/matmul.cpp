// MatMul: one oneDNN matmul primitive. Transposes are strided views (no copies); batch axes
// broadcast as in numpy.matmul (oneDNN broadcasts size-1 batch dims of either side). A batched
// A (not transposed) times a matrix B is one GEMM over A's rows, (batch x M, K) x (K, N): oneDNN
// runs a batch as that many small GEMMs, about half as fast (an LSTM's input projection over
// every step, a linear layer on a sequence).
// perm_a / perm_b / perm_y (folded Transposes: attention's head splits and merges) are strides
// too: an operand's row-major strides read through its permutation, the result's written
// through perm_y. oneDNN 3.2's brgemm matmul takes any strides on src and weights and a dst
// whose rows are contiguous, which the op's rule keeps (planner/ops/matmul.py); other dst
// strides would get its reference kernel.
// bfloat16 / float16 operands accumulate in float32 inside the primitive. Where this CPU's oneDNN
// has no matmul for the low type, the operands are widened into float32 temporaries (exact), the
// product runs in float32 and the result is rounded once into the low-type output: the native
// kernel's numbers up to summation order (conv.cpp does the same for convolutions).
// An optional third input, a (N,) bias (a BiasAdd over the last axis folded in by
// planner/frontend/passes/fold_bias.py), is the primitive's bias argument: added as each output tile is
// written, instead of a second pass over y. A folded Relu (`activation: relu`, a linear
// layer's, fold_bias.py too) is one pass over the float32 y right after the product, while y is
// still in cache, not a separate op (fused_relu.h: NaN kept, so not oneDNN's Relu post-op).
// A B that another MatMul of the schedule reads too (an LSTM's weight, read by every time
// step) is multiplied from a copy in oneDNN's own blocked layout, packed once per step
// (weight_packs.h) instead of by the primitive at every call.
#include <algorithm>

#include "../dnnl_kernel.h"
#include "../fused_relu.h"
#include "../weight_packs.h"
#include "matmul_f64.h"

namespace planner {
namespace {

// Row-major element strides of `shape`.
memory::dims row_major(const Shape& shape) {
  memory::dims strides(shape.size(), 1);
  for (int k = static_cast<int>(shape.size()) - 2; k >= 0; --k)
    strides[k] = strides[k + 1] * shape[k + 1];
  return strides;
}

bool identity(const std::vector<int>& perm) {
  for (size_t k = 0; k < perm.size(); ++k)
    if (perm[k] != static_cast<int>(k)) return false;
  return true;
}

// Descriptor of op(t) seen as rank-`rank` (leading 1s): the tensor's row-major bytes read
// through `perm` (view axis k is the tensor's axis perm[k]), last two axes swapped when
// `transposed`.
memory::desc operand_md(const Shape& shape, const std::vector<int>& perm, int rank,
                        bool transposed, int dtype) {
  const int lead = rank - static_cast<int>(shape.size());
  const memory::dims own = row_major(shape);
  memory::dims d(rank, 1), strides(rank, std::max<int64_t>(numel(shape), 1));
  for (size_t k = 0; k < shape.size(); ++k) {
    d[lead + k] = shape[perm[k]];
    strides[lead + k] = own[perm[k]];
  }
  if (transposed) {
    std::swap(d[rank - 1], d[rank - 2]);
    std::swap(strides[rank - 1], strides[rank - 2]);
  }
  return memory::desc(d, dnnl_type(dtype), strides);
}

// Descriptor of the product Y whose bytes are y = transpose(Y, perm) of shape `shape`: Y's axis
// perm[k] is y's axis k.
memory::desc result_md(const Shape& shape, const std::vector<int>& perm, int dtype) {
  const memory::dims own = row_major(shape);
  memory::dims d(shape.size()), strides(shape.size());
  for (size_t k = 0; k < shape.size(); ++k) {
    d[perm[k]] = shape[k];
    strides[perm[k]] = own[k];
  }
  return memory::desc(d, dnnl_type(dtype), strides);
}

// The MatMul reading B from its pack: the pack made current for this pass, then the
// primitive, its weights argument the pack's block.
class PackedWeightsMatMul : public DnnlKernel {
 public:
  PackedWeightsMatMul(WeightPacks::Pack* pack, int b) : pack_(pack), b_(b) {}
  char* const* slot() const { return &packed_; }
  void run(const Run& r) override {
    packed_ = pack_->current(r.pass, r.ptr[b_], r.stream);
    run_all(r);
  }

 private:
  WeightPacks::Pack* pack_;
  int b_;
  char* packed_ = nullptr;
};

// Op n's MatMul from a packed B (weight_packs.h), or null where B is not shared with another
// MatMul, the product is batched, oneDNN prefers B as it is, or oneDNN has no matmul for
// these types (the caller's float32 fallback).
KernelPtr packed_weights_matmul(const Node& n, const memory::desc& a_md,
                                const memory::desc& b_md, const memory::desc& y_md,
                                const memory::desc* bias_md) {
  const TensorRef& b = n.in[1];
  if (n.packs == nullptr || n.attrs.has("perm_b") || b_md.get_ndims() != 2 ||
      !n.packs->shared(b.id, n.attrs.b("transpose_b")))
    return nullptr;
  const memory::desc any(b_md.get_dims(), b_md.get_data_type(), tag::any);
  dnnl::matmul::primitive_desc pd;
  try {
    pd = bias_md ? dnnl::matmul::primitive_desc(n.engine, a_md, any, *bias_md, y_md,
                                                user_scratchpad())
                 : dnnl::matmul::primitive_desc(n.engine, a_md, any, y_md, user_scratchpad());
  } catch (const dnnl::error& e) {
    if (e.status == dnnl_unimplemented) return nullptr;
    throw;
  }
  if (pd.weights_desc() == b_md) return nullptr;
  auto k = std::make_unique<PackedWeightsMatMul>(
      n.packs->pack(b.id, b_md, pd.weights_desc(), n.engine), b.id);
  std::vector<DnnlKernel::Arg> args = {{DNNL_ARG_SRC, n.in[0].id},
                                       {DNNL_ARG_WEIGHTS, -1, -1, k->slot()},
                                       {DNNL_ARG_DST, n.out[0].id}};
  if (bias_md) args.push_back({DNNL_ARG_BIAS, n.in[2].id});
  k->add(dnnl::matmul(pd), pd, args);
  return k;
}

KernelPtr matmul_product(const Node& n) {
  const TensorRef &a = n.in[0], &b = n.in[1], &y = n.out[0];
  const bool ta = n.attrs.b("transpose_a"), tb = n.attrs.b("transpose_b");
  std::vector<int> pa = permutation(n.attrs, "perm_a", a.shape.size());
  const std::vector<int> pb = permutation(n.attrs, "perm_b", b.shape.size());
  std::vector<int> py = permutation(n.attrs, "perm_y", y.shape.size());
  Shape a_shape = a.shape, y_shape = y.shape;
  if (a_shape.size() > 2 && b.shape.size() == 2 && !ta && identity(pa) && identity(py)) {
    int64_t rows = 1;
    for (size_t k = 0; k + 1 < y_shape.size(); ++k) rows *= y_shape[k];
    a_shape = {rows, a_shape.back()};
    y_shape = {rows, y_shape.back()};
    pa = py = {0, 1};
  }
  int rank = static_cast<int>(y_shape.size());
  auto a_md = operand_md(a_shape, pa, rank, ta, a.dtype);
  auto b_md = operand_md(b.shape, pb, rank, tb, b.dtype);
  auto y_md = result_md(y_shape, py, y.dtype);
  const bool biased = n.in.size() == 3;
  memory::desc bias_md;
  if (biased) {  // along the product's last axis, which perm_y keeps last
    Shape bias_dims(rank, 1);
    bias_dims[rank - 1] = y_shape.back();
    bias_md = plain_md(bias_dims, n.in[2].dtype);
  }
  if (KernelPtr packed = packed_weights_matmul(n, a_md, b_md, y_md, biased ? &bias_md : nullptr))
    return packed;
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
  const int64_t a_tmp = k->temp(a32.get_size()), b_tmp = k->temp(b32.get_size()),
                y_tmp = k->temp(y32.get_size());
  reorder(a_md, {0, a.id}, a32, {0, -1, a_tmp});
  reorder(b_md, {0, b.id}, b32, {0, -1, b_tmp});
  std::vector<DnnlKernel::Arg> args = {{DNNL_ARG_SRC, -1, a_tmp}, {DNNL_ARG_WEIGHTS, -1, b_tmp},
                                       {DNNL_ARG_DST, -1, y_tmp}};
  memory::desc bias32;
  if (biased) {
    bias32 = widened(bias_md);
    const int64_t bias_tmp = k->temp(bias32.get_size());
    reorder(bias_md, {0, n.in[2].id}, bias32, {0, -1, bias_tmp});
    args.push_back({DNNL_ARG_BIAS, -1, bias_tmp});
  }
  auto pd = biased ? dnnl::matmul::primitive_desc(n.engine, a32, b32, bias32, y32,
                                                  user_scratchpad())
                   : dnnl::matmul::primitive_desc(n.engine, a32, b32, y32, user_scratchpad());
  k->add(dnnl::matmul(pd), pd, args);
  reorder(y32, {0, -1, y_tmp}, y_md, {0, y.id});
  return k;
}

// y = act(op(a) @ op(b) + bias): the GEMM, then its folded activation; float64: BLAS's dgemm
// (matmul_f64.cpp).
KernelPtr matmul(const Node& n) {
  if (n.out[0].dtype == F64) return matmul_f64(n);
  return with_fused_activation(matmul_product(n), n, "MatMul");
}

}  // namespace

PLANNER_REGISTER_KERNELS(matmul) { r["MatMul"] = {matmul, "float32|float64"}; }

}  // namespace planner
