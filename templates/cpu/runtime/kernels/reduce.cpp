// Reductions with oneDNN's reduction primitive: ReduceSum, ReduceMean, BiasAddGrad (a sum over
// every axis but the channel) and GlobalAvgPool (a mean over H and W). The destination is the
// source's shape with 1 on every reduced axis; keepdims only changes the declared shape, not the
// bytes. A "reduction" that reduces nothing is a copy.
#include "../dnnl_kernel.h"
#include "../loops.h"

namespace planner {
namespace {

KernelPtr reduction(const Node& n, dnnl::algorithm a, const std::vector<bool>& reduced) {
  const TensorRef &x = n.in[0], &y = n.out[0];
  Shape src = x.shape.empty() ? Shape{1} : x.shape;
  Shape dst = src;
  bool any = false;
  for (size_t k = 0; k < src.size(); ++k)
    if (k < reduced.size() && reduced[k] && src[k] != 1) {
      dst[k] = 1;
      any = true;
    }
  if (!any) return std::make_unique<Copy>(x.id, y.id, y.size() * dtype_bytes(y.dtype));
  auto x_md = view_md(src, x.dtype);
  auto y_md = view_md(dst, y.dtype);
  dnnl::reduction::primitive_desc pd(n.engine, a, x_md, y_md, 0.f, 0.f, user_scratchpad());
  auto k = std::make_unique<DnnlKernel>();
  k->add(dnnl::reduction(pd), pd, {{DNNL_ARG_SRC, x.id}, {DNNL_ARG_DST, y.id}});
  return k;
}

std::vector<bool> axes_mask(const Node& n) {
  size_t rank = n.in[0].shape.size();
  std::vector<int64_t> axes = n.attrs.ints("axes");
  std::vector<bool> mask(rank, axes.empty());
  for (int64_t a : axes) mask[norm_axis(a, rank)] = true;
  return mask;
}

KernelPtr reduce_sum(const Node& n) { return reduction(n, dnnl::algorithm::reduction_sum, axes_mask(n)); }
KernelPtr reduce_mean(const Node& n) { return reduction(n, dnnl::algorithm::reduction_mean, axes_mask(n)); }

KernelPtr bias_add_grad(const Node& n) {
  size_t rank = n.in[0].shape.size();
  std::vector<bool> mask(rank, true);
  mask[norm_axis(n.attrs.i("axis"), rank)] = false;
  return reduction(n, dnnl::algorithm::reduction_sum, mask);
}

KernelPtr global_avg_pool(const Node& n) {
  return reduction(n, dnnl::algorithm::reduction_mean, {false, false, true, true});
}

}  // namespace

void add_reduce_kernels(Registry& r) {
  r["ReduceSum"] = reduce_sum;
  r["ReduceMean"] = reduce_mean;
  r["BiasAddGrad"] = bias_add_grad;
  r["GlobalAvgPool"] = global_avg_pool;
}

}  // namespace planner
