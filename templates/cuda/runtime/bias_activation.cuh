// The folded bias and activation of a Conv2D (after cuDNN's convolution) or a MatMul (after
// cuBLAS's GEMMs): one pass over the y the library wrote, in float32 before a low-type y's one
// rounding, instead of BiasAdd's and Relu's two. The Relu is `v < 0 ? 0 : v`, which keeps NaN,
// as the Relu kernel and the reference do (fused_activation.h).
#pragma once
#include <cstdint>

#include "kernel.h"
#include "low_float.cuh"

namespace planner {

// y = act(y + bias[i / plane % channels]) over all `total` elements; `bias` may be null (an
// activation alone). An NCHW convolution output: plane = H*W, channels = C; a row-major
// (..., n) product: plane = 1, channels = n.
template <class T>
__global__ void bias_activation(T* __restrict__ y, const T* __restrict__ bias, int64_t total,
                                int64_t plane, int64_t channels, int relu) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    float v = widen(y[i]);
    if (bias) v += widen(bias[i / plane % channels]);
    if (relu && v < 0.f) v = 0.f;
    y[i] = narrow<T>(v);
  }
}

// The pass over a `dtype` y on `stream`.
inline void launch_bias_activation(int dtype, char* y, const char* bias, int64_t total,
                                   int64_t plane, int64_t channels, bool relu,
                                   cudaStream_t stream) {
  if (total == 0) return;
  const int threads = 256;
  with_float(dtype, [&](auto t) {
    using T = decltype(t);
    bias_activation<T><<<blocks_for(total, threads), threads, 0, stream>>>(
        reinterpret_cast<T*>(y), reinterpret_cast<const T*>(bias), total, plane, channels,
        relu ? 1 : 0);
  });
  PLANNER_LAUNCHED("bias_activation");
}

}  // namespace planner
