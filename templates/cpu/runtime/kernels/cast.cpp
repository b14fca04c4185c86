// Cast: one oneDNN reorder between two plain layouts of different data types (float32 <->
// bfloat16 / float16), rounding to nearest even as the numpy reference (ml_dtypes) does.
// oneDNN's reorders convert these types on every x86-64 CPU, AVX2 ones included. Between
// float32, float64, int64, int32, bool, int16, int8 and uint8 (comparisons' masks, integer ids,
// PyTorch's .to()) a plain loop, as numpy's astype: an integer rounds to the nearest float32, a
// float truncates toward zero, anything is true where non-zero (NaN too), a bool is 0 or 1. (oneDNN has no 64-bit
// integers, and its reorder to int32 rounds rather than truncates.) A low float to or from an
// integer, bool or the other low float goes through float32 copies (the torch front end emits
// two Casts instead).
#include <type_traits>

#include "../dnnl_kernel.h"
#include "../loops.h"
#include "plain_dtypes.h"

namespace planner {
namespace {

template <class In, class Out>
class Convert : public Kernel {
 public:
  explicit Convert(const Node& n) : x_(n.in[0].id), y_(n.out[0].id), size_(n.out[0].size()) {}
  void run(const Run& r) override {
    const In* x = r.at<In>(x_);
    Out* y = r.at<Out>(y_);
    const int64_t size = size_;
#pragma omp parallel for simd if(parallel: size >= kGrain)
    for (int64_t i = 0; i < size; ++i) {
      if constexpr (std::is_same_v<Out, bool>) y[i] = x[i] != In{0};
      // a float to a storage integer through int64, wrapping as PyTorch's x86 kernels do
      // (a direct conversion out of the type's range is undefined)
      else if constexpr (std::is_floating_point_v<In> && sizeof(Out) < 4)
        y[i] = static_cast<Out>(static_cast<int64_t>(x[i]));
      else y[i] = static_cast<Out>(x[i]);
    }
  }

 private:
  int x_, y_;
  int64_t size_;
};

bool low_float(int dtype) { return dtype == BF16 || dtype == F16; }

KernelPtr cast(const Node& n) {
  const TensorRef &x = n.in[0], &y = n.out[0];
  if (x.dtype == y.dtype) return std::make_unique<Copy>(x.id, y.id, y.size() * dtype_bytes(y.dtype));
  // a low float to or from anything but float32 (an integer, bool, the other low float): through
  // float32 copies (oneDNN reorders neither to 64-bit integers nor bfloat16 to float16 directly)
  if ((low_float(x.dtype) || low_float(y.dtype)) && x.dtype != F32 && y.dtype != F32)
    return widened(n, cast);
  KernelPtr plain;
  with_plain_dtype<true>(x.dtype, [&](auto in) {
    with_plain_dtype<true>(y.dtype, [&](auto out) {
      plain = std::make_unique<Convert<decltype(in), decltype(out)>>(n);
    });
  });
  if (plain) return plain;
  auto pd = dnnl::reorder::primitive_desc(n.engine, plain_md(x.shape, x.dtype), n.engine,
                                          plain_md(y.shape, y.dtype), user_scratchpad());
  auto k = std::make_unique<DnnlKernel>();
  k->add(dnnl::reorder(pd), pd, {{DNNL_ARG_FROM, x.id}, {DNNL_ARG_TO, y.id}});
  return k;
}

}  // namespace

PLANNER_REGISTER_KERNELS(cast) { r["Cast"] = {cast, "*"}; }

}  // namespace planner
