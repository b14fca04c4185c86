// The reduction family on the GPU (planner/ops/reductions.py), the rows of common/reductions.h
// as the CPU computes them: one thread per output group (grid-stride), reading the group's
// elements through the view's offsets and folding them in double, so a group's result does not
// depend on the launch. ReduceGrad: one thread per group, its statistics, then each element's
// slope. ReduceAny and ReduceAll read float32, int64 or bool and write bool.
#include <cstdint>
#include <string>

#include "../groups.cuh"
#include "reductions.h"

namespace planner {
namespace {

template <class T>
__global__ void fold_groups(const T* __restrict__ x, void* y, FoldView v, Fold f, double p) {
  for (int64_t o = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; o < v.outputs;
       o += int64_t{gridDim.x} * blockDim.x)
    fold_output(f, p, v, x, y, o, [&](int64_t k) { return fold_offset(k, v.reduced); });
}

__global__ void fold_slopes(const float* __restrict__ dy, const float* __restrict__ x,
                            const float* __restrict__ y, float* __restrict__ dx, FoldView v,
                            Fold f, double p) {
  for (int64_t o = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; o < v.outputs;
       o += int64_t{gridDim.x} * blockDim.x)
    fold_output_slopes(f, p, v, dy, x, y, dx, o,
                       [&](int64_t k) { return fold_offset(k, v.reduced); });
}

class FoldKernel : public Kernel {
 public:
  explicit FoldKernel(const Node& n)
      : threads_(block_threads(n)), x_(n.in[0].id), y_(n.out[0].id), x_type_(n.in[0].dtype),
        f_(fold_of(n.spec->op)), p_(n.attrs.has("p") ? n.attrs.f("p") : 0.0),
        view_(fold_view(n, n.in[0].shape)) {
    check_fold_types(n, f_);  // common/reductions.h
    blocks_ = blocks_for(view_.outputs, threads_);
  }
  void run(const Run& r) override {
    if (view_.outputs == 0) return;
    void* y = r.ptr[y_];
    if (x_type_ == F32)
      fold_groups<<<blocks_, threads_, 0, r.stream>>>(r.at<float>(x_), y, view_, f_, p_);
    else if (x_type_ == I64)
      fold_groups<<<blocks_, threads_, 0, r.stream>>>(r.at<int64_t>(x_), y, view_, f_, p_);
    else
      fold_groups<<<blocks_, threads_, 0, r.stream>>>(r.at<bool>(x_), y, view_, f_, p_);
    PLANNER_LAUNCHED("fold_groups");
  }

 private:
  int threads_;
  int x_, y_, x_type_;
  Fold f_;
  double p_;
  FoldView view_;
  unsigned blocks_ = 1;
};

class FoldGradKernel : public Kernel {
 public:
  explicit FoldGradKernel(const Node& n)
      : threads_(block_threads(n)), dy_(n.in[0].id), x_(n.in[1].id), y_(n.in[2].id),
        dx_(n.out[0].id), f_(fold_of(n.attrs.s("of"))), p_(n.attrs.f("p")),
        view_(fold_view(n, n.in[1].shape)) {
    require_f32(n);
    blocks_ = blocks_for(view_.outputs, threads_);
  }
  void run(const Run& r) override {
    if (view_.outputs == 0) return;
    fold_slopes<<<blocks_, threads_, 0, r.stream>>>(r.at<float>(dy_), r.at<float>(x_),
                                                     r.at<float>(y_), r.at<float>(dx_), view_,
                                                     f_, p_);
    PLANNER_LAUNCHED("fold_slopes");
  }

 private:
  int threads_;
  int dy_, x_, y_, dx_;
  Fold f_;
  double p_;
  FoldView view_;
  unsigned blocks_ = 1;
};

KernelPtr fold_kernel(const Node& n) { return std::make_unique<FoldKernel>(n); }
KernelPtr fold_grad_kernel(const Node& n) { return std::make_unique<FoldGradKernel>(n); }

}  // namespace

PLANNER_REGISTER_KERNELS(reductions) {
  r["ReduceMax"] = fold_kernel;
  r["ReduceMin"] = fold_kernel;
  r["ReduceProd"] = fold_kernel;
  r["ReduceNanSum"] = fold_kernel;
  r["ReduceNanMean"] = fold_kernel;
  r["ReduceLogSumExp"] = fold_kernel;
  r["ReduceNorm"] = fold_kernel;
  r["ReduceAny"] = fold_kernel;
  r["ReduceAll"] = fold_kernel;
  r["ReduceGrad"] = fold_grad_kernel;
}

}  // namespace planner
