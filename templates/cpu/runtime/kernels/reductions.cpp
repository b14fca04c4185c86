// The reduction family (planner/ops/reductions.py, common/reductions.h) as plain OpenMP loops:
// oneDNN's reduction has max, min and mul, but its max and min drop NaN where the reference
// keeps it, and it has no NaN-skipping sum, log-sum-exp, p-norm of any p or boolean any/all.
// Each output's group is read through a table of the reduced elements' offsets (made at load),
// threads splitting the outputs; accumulation is in double, so the result is the same for any
// team size. ReduceAny and ReduceAll read float32, int64 or bool and write bool.
#include <vector>

#include "../loops.h"
#include "integer.h"
#include "reductions.h"

namespace planner {
namespace {

std::vector<int64_t> group_offsets(const FoldView& v) {
  std::vector<int64_t> off(static_cast<size_t>(v.count));
  for (int64_t r = 0; r < v.count; ++r) off[r] = fold_offset(r, v.reduced);
  return off;
}

class FoldKernel : public Kernel {
 public:
  explicit FoldKernel(const Node& n)
      : x_(n.in[0].id), y_(n.out[0].id), x_type_(n.in[0].dtype), f_(fold_of(n.spec->op)),
        p_(n.attrs.has("p") ? n.attrs.f("p") : 0.0), view_(fold_view(n, n.in[0].shape)),
        offsets_(group_offsets(view_)) {
    check_fold_types(n, f_);  // common/reductions.h
  }
  void run(const Run& r) override {
    if (x_type_ == F32) fold(r, r.at<float>(x_));
    else if (x_type_ == I64) fold(r, r.at<int64_t>(x_));
    else fold(r, r.at<bool>(x_));
  }

 private:
  template <class T>
  void fold(const Run& r, const T* x) {
    const int64_t outputs = view_.outputs;
    const int64_t* off = offsets_.data();
    const Fold f = f_;
    const double p = p_;
    const FoldView& v = view_;
    void* y = r.ptr[y_];
#pragma omp parallel for schedule(static)
    for (int64_t o = 0; o < outputs; ++o)
      fold_output(f, p, v, x, y, o, [off](int64_t k) { return off[k]; });  // common/reductions.h
  }

  int x_, y_, x_type_;
  Fold f_;
  double p_;
  FoldView view_;
  std::vector<int64_t> offsets_;
};

// ReduceGrad [dy, x, y] -> dx: per group, its statistics, then each element's slope.
class FoldGradKernel : public Kernel {
 public:
  explicit FoldGradKernel(const Node& n)
      : dy_(n.in[0].id), x_(n.in[1].id), y_(n.in[2].id), dx_(n.out[0].id),
        f_(fold_of(n.attrs.s("of"))), p_(n.attrs.f("p")), view_(fold_view(n, n.in[1].shape)),
        offsets_(group_offsets(view_)) {
    require_f32(n);
  }
  void run(const Run& r) override {
    const float *dy = r.at<float>(dy_), *x = r.at<float>(x_), *y = r.at<float>(y_);
    float* dx = r.at<float>(dx_);
    const int64_t outputs = view_.outputs;
    const int64_t* off = offsets_.data();
    const Fold f = f_;
    const double p = p_;
    const FoldView& v = view_;
#pragma omp parallel for schedule(static)
    for (int64_t o = 0; o < outputs; ++o)
      fold_output_slopes(f, p, v, dy, x, y, dx, o, [off](int64_t k) { return off[k]; });
  }

 private:
  int dy_, x_, y_, dx_;
  Fold f_;
  double p_;
  FoldView view_;
  std::vector<int64_t> offsets_;
};

// ReduceMax, ReduceMin and ReduceProd of integers: exact, in the integer type (kernels/integer.cpp).
KernelPtr fold_kernel(const Node& n) {
  const Fold f = fold_of(n.spec->op);
  if (is_integer(n.in[0].dtype) && (f == Fold::Max || f == Fold::Min || f == Fold::Prod))
    return int_reduction(n, f == Fold::Max ? IntOp::ReduceMax : f == Fold::Min ? IntOp::ReduceMin
                                                                              : IntOp::Prod);
  return std::make_unique<FoldKernel>(n);
}
KernelPtr fold_grad_kernel(const Node& n) { return std::make_unique<FoldGradKernel>(n); }

}  // namespace

PLANNER_REGISTER_KERNELS(reductions) {
  r["ReduceMax"] = {fold_kernel, "float32|int64|int32|int16|int8|uint8"};
  r["ReduceMin"] = {fold_kernel, "float32|int64|int32|int16|int8|uint8"};
  r["ReduceProd"] = {fold_kernel, "float32|int64|int32|int16|int8|uint8"};
  r["ReduceNanSum"] = fold_kernel;
  r["ReduceNanMean"] = fold_kernel;
  r["ReduceLogSumExp"] = fold_kernel;
  r["ReduceNorm"] = fold_kernel;
  r["ReduceAny"] = {fold_kernel, "float32,bool|int64,bool|bool"};
  r["ReduceAll"] = {fold_kernel, "float32,bool|int64,bool|bool"};
  r["ReduceGrad"] = fold_grad_kernel;
}

}  // namespace planner
