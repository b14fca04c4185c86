// Cast: one oneDNN reorder between two plain layouts of different data types (float32 <->
// bfloat16 / float16), rounding to nearest even as the numpy reference (ml_dtypes) does.
// oneDNN's reorders convert these types on every x86-64 CPU, AVX2 ones included. An int64 or
// bool tensor to float32 (PyTorch's type promotion: an int tensor added to a float one) is a
// plain loop, as oneDNN has no 64-bit integers; int64 rounds to the nearest float32, as numpy.
#include "../dnnl_kernel.h"
#include "../loops.h"

namespace planner {
namespace {

template <class T>
class ToFloat : public Kernel {
 public:
  explicit ToFloat(const Node& n) : x_(n.in[0].id), y_(n.out[0].id), size_(n.out[0].size()) {}
  void run(const Run& r) override {
    const T* x = r.at<T>(x_);
    float* y = r.at<float>(y_);
    const int64_t size = size_;
#pragma omp parallel for
    for (int64_t i = 0; i < size; ++i) y[i] = static_cast<float>(x[i]);
  }

 private:
  int x_, y_;
  int64_t size_;
};

KernelPtr cast(const Node& n) {
  const TensorRef &x = n.in[0], &y = n.out[0];
  if (y.dtype == F32 && x.dtype == I64) return std::make_unique<ToFloat<int64_t>>(n);
  if (y.dtype == F32 && x.dtype == BOOL) return std::make_unique<ToFloat<bool>>(n);
  auto pd = dnnl::reorder::primitive_desc(n.engine, plain_md(x.shape, x.dtype), n.engine,
                                          plain_md(y.shape, y.dtype), user_scratchpad());
  auto k = std::make_unique<DnnlKernel>();
  k->add(dnnl::reorder(pd), pd, {{DNNL_ARG_FROM, x.id}, {DNNL_ARG_TO, y.id}});
  return k;
}

}  // namespace

PLANNER_REGISTER_KERNELS(cast) { r["Cast"] = cast; }

}  // namespace planner
