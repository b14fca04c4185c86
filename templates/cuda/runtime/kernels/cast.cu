// Cast on the GPU (planner/ops/cast.py), the op a mixed-precision policy inserts: float32 to
// bfloat16 / float16 rounds to nearest even (overflow to infinity, NaN kept), as the
// reference's ml_dtypes / numpy; the low types to float32 widen exactly; a cast to the same
// type is a copy. Two elements per thread (float2, nv_bfloat162, half2 loads and stores) when
// the count is even and both addresses are aligned for them, checked each step; else one.
// Between float32, int64, int32 and bool (masks, ids, PyTorch's .to()), one element per
// thread as numpy's astype: a float truncates toward zero, non-zero is true, a bool is 0 or 1.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "../kernel.h"
#include "../low_float.cuh"
#include "plain_dtypes.h"

namespace planner {
namespace {

template <class T> struct Pair;
template <> struct Pair<float> { using type = float2; };
template <> struct Pair<__nv_bfloat16> { using type = __nv_bfloat162; };
template <> struct Pair<__half> { using type = __half2; };

template <class In, class Out>
__global__ void cast_one(const In* __restrict__ x, Out* __restrict__ y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    y[i] = narrow<Out>(widen(x[i]));
}

template <class In, class Out>
__global__ void cast_two(const In* __restrict__ x, Out* __restrict__ y, int64_t pairs) {
  using InPair = typename Pair<In>::type;
  using OutPair = typename Pair<Out>::type;
  const InPair* xp = reinterpret_cast<const InPair*>(x);
  OutPair* yp = reinterpret_cast<OutPair*>(y);
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < pairs;
       i += int64_t{gridDim.x} * blockDim.x) {
    const InPair v = xp[i];
    OutPair w;
    w.x = narrow<Out>(widen(v.x));
    w.y = narrow<Out>(widen(v.y));
    yp[i] = w;
  }
}

template <class In, class Out>
__global__ void cast_plain(const In* __restrict__ x, Out* __restrict__ y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    if constexpr (std::is_same_v<Out, bool>) y[i] = x[i] != In{0};
    else y[i] = static_cast<Out>(x[i]);
  }
}

bool aligned(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

class Cast : public Kernel {
 public:
  explicit Cast(const Node& n)
      : x_(n.in[0].id), y_(n.out[0].id), n_(n.out[0].size()), threads_(block_threads(n)) {
    const int from = n.in[0].dtype, to = n.out[0].dtype;
    if (n.in[0].shape != n.out[0].shape)
      throw std::runtime_error("Cast: y " + shape_text(n.out[0].shape) + " differs from x " +
                               shape_text(n.in[0].shape));
    if (from == to) {
      copy_ = std::make_unique<Copy>(x_, y_, n_ * dtype_bytes(to));
      return;
    }
    with_plain_dtype(from, [&](auto in) {
      with_plain_dtype(to, [&](auto out) {
        one_ = reinterpret_cast<const void*>(&cast_plain<decltype(in), decltype(out)>);
      });
    });
    if (one_) return;  // no paired form
    if ((from != F32 && !is_low_float(from)) || (to != F32 && !is_low_float(to)))
      throw std::runtime_error("Cast: the CUDA kernel converts between float32, bfloat16 and "
                               "float16, and between float32, int64, int32 and bool");
    align_ = 2 * static_cast<size_t>(std::max(dtype_bytes(from), dtype_bytes(to)));
    with_float(from, [&](auto in) {
      with_float(to, [&](auto out) {
        using In = decltype(in);
        using Out = decltype(out);
        one_ = reinterpret_cast<const void*>(&cast_one<In, Out>);
        two_ = reinterpret_cast<const void*>(&cast_two<In, Out>);
      });
    });
  }

  void run(const Run& r) override {
    if (copy_) return copy_->run(r);
    if (n_ == 0) return;
    const void* x = r.ptr[x_];
    void* y = r.ptr[y_];
    const bool pairs = two_ && n_ % 2 == 0 && aligned(x, align_) && aligned(y, align_);
    int64_t count = pairs ? n_ / 2 : n_;
    void* args[] = {&x, &y, &count};
    PLANNER_CUDA(cudaLaunchKernel(pairs ? two_ : one_, dim3(blocks_for(count, threads_)),
                                  dim3(threads_), args, 0, r.stream));
  }

 private:
  int x_, y_;
  int64_t n_;
  int threads_;
  size_t align_ = 4;
  const void* one_ = nullptr;
  const void* two_ = nullptr;
  std::unique_ptr<Copy> copy_;
};

KernelPtr cast(const Node& n) { return std::make_unique<Cast>(n); }

}  // namespace

PLANNER_REGISTER_KERNELS(cast) { r["Cast"] = cast; }

}  // namespace planner
