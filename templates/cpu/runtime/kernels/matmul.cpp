// MatMul: one oneDNN matmul primitive. Transposes are strided views (no copies); batch axes
// broadcast as in numpy.matmul (oneDNN broadcasts size-1 batch dims of either side).
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
  int rank = static_cast<int>(y.shape.size());
  auto a_md = matrix_md(a.shape, rank, n.attrs.b("transpose_a"), a.dtype);
  auto b_md = matrix_md(b.shape, rank, n.attrs.b("transpose_b"), b.dtype);
  auto y_md = plain_md(y.shape, y.dtype);
  dnnl::matmul::primitive_desc pd(n.engine, a_md, b_md, y_md, user_scratchpad());
  auto k = std::make_unique<DnnlKernel>();
  k->add(dnnl::matmul(pd), pd, {{DNNL_ARG_SRC, a.id}, {DNNL_ARG_WEIGHTS, b.id},
                                {DNNL_ARG_DST, y.id}});
  return k;
}

}  // namespace

PLANNER_REGISTER_KERNELS(matmul) { r["MatMul"] = matmul; }

}  // namespace planner
