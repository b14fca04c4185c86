// Sums, hand-written rather than TVM-generated (a TVM reduction with symbolic sizes needs an
// rfactor and cross-thread schedule that was not worth its time here): ReduceSum, ReduceMean,
// BiasAddGrad, and PReluGrad's dslope (pointwise.cu). The input is seen as kept and summed
// dims (adjacent dims of one kind merged); one block per output element sums its elements in
// double, threads striding over them, then groups.cuh's fixed block tree: deterministic for a
// plan. BiasAddGrad of mixed precision reads a bfloat16 / float16 dy (widened, summed in
// double like float32's) and writes a float32 db.
#include <algorithm>

#include "../groups.cuh"
#include "../kernel.h"
#include "../low_float.cuh"
#include "pointwise.h"
#include "reduce.h"

namespace planner {

namespace {

__device__ int64_t offset_of(int64_t index, const SumTo::Dims& d) {
  int64_t off = 0;
  for (int k = d.rank - 1; k >= 0; --k) {
    off += (index % d.size[k]) * d.stride[k];
    index /= d.size[k];
  }
  return off;
}

template <class T>
__global__ void sum_to_kernel(const T* x, float* y, int64_t outputs, int64_t reduced,
                              SumTo::Dims kept, SumTo::Dims summed, double scale) {
  for (int64_t o = blockIdx.x; o < outputs; o += gridDim.x) {
    const int64_t base = offset_of(o, kept);
    double acc = 0.0;
    for (int64_t r = threadIdx.x; r < reduced; r += blockDim.x) acc += widen(x[base + offset_of(r, summed)]);
    acc = block_reduce(acc, SumOp{}, 0.0);
    if (threadIdx.x == 0) y[o] = static_cast<float>(acc * scale);
  }
}

}  // namespace

SumTo::SumTo(const Shape& from, const Shape& to, double scale, int block)
    : scale_(scale), block_(block) {
  const size_t rank = from.size();
  if (to.size() > rank) throw std::runtime_error("SumTo: target has more dims than the source");
  Shape padded(rank - to.size(), 1);
  padded.insert(padded.end(), to.begin(), to.end());
  Shape stride(rank, 1);
  for (int k = static_cast<int>(rank) - 2; k >= 0; --k) stride[k] = stride[k + 1] * from[k + 1];
  int last = -1;  // 0 kept, 1 summed
  for (size_t k = 0; k < rank; ++k) {
    if (from[k] == 1) continue;
    if (padded[k] != 1 && padded[k] != from[k])
      throw std::runtime_error("SumTo: shapes do not broadcast");
    const int kind = padded[k] == 1 ? 1 : 0;
    Dims& d = kind ? summed_ : kept_;
    if (kind == last) {  // merge with the previous dim of this kind (contiguous in the source)
      d.size[d.rank - 1] *= from[k];
      d.stride[d.rank - 1] = stride[k];
    } else {
      if (d.rank == kMaxRank) throw std::runtime_error("SumTo: more than 8 dims after merging");
      d.size[d.rank] = from[k];
      d.stride[d.rank] = stride[k];
      ++d.rank;
    }
    last = kind;
  }
  outputs_ = 1;
  for (int k = 0; k < kept_.rank; ++k) outputs_ *= kept_.size[k];
  for (int k = 0; k < summed_.rank; ++k) reduced_ *= summed_.size[k];
  if (numel(from) == 0) outputs_ = numel(to);
}

void SumTo::run(const float* x, float* y, cudaStream_t stream) const { run(x, F32, y, stream); }

void SumTo::run(const void* x, int x_dtype, float* y, cudaStream_t stream) const {
  if (outputs_ == 0) return;
  if (reduced_ == 0) {
    PLANNER_CUDA(cudaMemsetAsync(y, 0, sizeof(float) * outputs_, stream));
    return;
  }
  const unsigned grid = static_cast<unsigned>(std::min<int64_t>(outputs_, int64_t{1} << 20));
  with_float(x_dtype, [&](auto t) {
    using T = decltype(t);
    sum_to_kernel<T><<<grid, block_, 0, stream>>>(static_cast<const T*>(x), y, outputs_,
                                                  reduced_, kept_, summed_, scale_);
  });
  PLANNER_LAUNCHED("sum_to_kernel");
}

namespace {

Shape reduced_to(const Node& n) {
  const Shape& s = n.in[0].shape;
  const std::vector<bool> reduced = reduced_axes(n.attrs, s.size());  // common/reduce.h
  Shape to = s;
  for (size_t k = 0; k < s.size(); ++k)
    if (reduced[k]) to[k] = 1;
  return to;
}

class Sum : public Kernel {
 public:
  Sum(const Node& n, const Shape& to, double scale, bool low_input = false)
      : x_(n.in[0].id), y_(n.out[0].id), x_type_(n.in[0].dtype),
        sum_(n.in[0].shape, to, scale, block_threads(n)) {
    // float32 sums; with `low_input` (BiasAddGrad) x may be a low type (mixed precision)
    if (low_input && is_low_float(x_type_)) {
      if (n.out[0].dtype != F32) throw std::runtime_error("the sum of a low x must be float32");
    } else {
      require_f32(n);
    }
  }
  void run(const Run& r) override { sum_.run(r.ptr[x_], x_type_, r.at<float>(y_), r.stream); }

 private:
  int x_, y_, x_type_;
  SumTo sum_;
};

KernelPtr reduce_sum(const Node& n) { return std::make_unique<Sum>(n, reduced_to(n), 1.0); }

KernelPtr reduce_mean(const Node& n) {
  const Shape to = reduced_to(n);
  const int64_t count = numel(to) ? numel(n.in[0].shape) / numel(to) : 0;
  return std::make_unique<Sum>(n, to, count ? 1.0 / static_cast<double>(count) : 0.0);
}

KernelPtr bias_add_grad(const Node& n) {
  const Shape& s = n.in[0].shape;
  Shape to(s.size(), 1);
  const AxisSplit a = axis_split(n.attrs, s);  // the channels along the axis
  to[a.axis] = a.extent;
  return std::make_unique<Sum>(n, to, 1.0, true);
}

}  // namespace

PLANNER_REGISTER_KERNELS(reduce) {
  r["ReduceSum"] = reduce_sum;
  r["ReduceMean"] = reduce_mean;
  r["BiasAddGrad"] = bias_add_grad;
}

}  // namespace planner
