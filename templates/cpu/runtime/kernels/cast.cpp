// Cast: one oneDNN reorder between two plain layouts of different data types (float32 <->
// bfloat16 / float16), rounding to nearest even as the numpy reference (ml_dtypes) does.
// oneDNN's reorders convert these types on every x86-64 CPU, AVX2 ones included.
#include "../dnnl_kernel.h"

namespace planner {
namespace {

KernelPtr cast(const Node& n) {
  const TensorRef &x = n.in[0], &y = n.out[0];
  auto pd = dnnl::reorder::primitive_desc(n.engine, plain_md(x.shape, x.dtype), n.engine,
                                          plain_md(y.shape, y.dtype), user_scratchpad());
  auto k = std::make_unique<DnnlKernel>();
  k->add(dnnl::reorder(pd), pd, {{DNNL_ARG_FROM, x.id}, {DNNL_ARG_TO, y.id}});
  return k;
}

}  // namespace

PLANNER_REGISTER_KERNELS(cast) { r["Cast"] = cast; }

}  // namespace planner
