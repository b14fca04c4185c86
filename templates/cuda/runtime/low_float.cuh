// The float types a CUDA kernel may read and write: float32 and, for mixed precision
// (planner/frontend/passes/precision.py), bfloat16 and float16. Hand-written kernels load a low value
// widened to float32 (exact), compute in float32 and round each result once to nearest even
// (cuDNN's, cuBLAS's and the reference interpreter's rounding); the libraries get the
// matching data type with float32 compute.
#pragma once
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cudnn.h>

#include <stdexcept>
#include <string>

#include "runtime.h"

namespace planner {

inline bool is_low_float(int dtype) { return dtype == BF16 || dtype == F16; }

__host__ __device__ inline float widen(float v) { return v; }
__device__ inline float widen(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ inline float widen(__half v) { return __half2float(v); }

template <class T> __device__ inline T narrow(float v);
template <> __device__ inline float narrow<float>(float v) { return v; }
template <> __device__ inline __nv_bfloat16 narrow<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
template <> __device__ inline __half narrow<__half>(float v) { return __float2half_rn(v); }

inline const char* float_name(int dtype) {
  return dtype == F32 ? "float32" : dtype == BF16 ? "bfloat16" : dtype == F16 ? "float16"
                                                                            : "not a float";
}

inline cudnnDataType_t cudnn_type(int dtype) {
  switch (dtype) {
    case F32: return CUDNN_DATA_FLOAT;
    case BF16: return CUDNN_DATA_BFLOAT16;
    case F16: return CUDNN_DATA_HALF;
  }
  throw std::runtime_error("cuDNN takes float32, bfloat16 or float16 tensors here");
}

inline cudaDataType_t cuda_type(int dtype) {
  switch (dtype) {
    case F32: return CUDA_R_32F;
    case BF16: return CUDA_R_16BF;
    case F16: return CUDA_R_16F;
  }
  throw std::runtime_error("cuBLAS takes float32, bfloat16 or float16 tensors here");
}

// Calls f(T{}) with T the C++ type of float dtype `dtype` (float, __nv_bfloat16, __half).
template <class F> void with_float(int dtype, F&& f) {
  switch (dtype) {
    case F32: f(float{}); return;
    case BF16: f(__nv_bfloat16{}); return;
    case F16: f(__half{}); return;
  }
  throw std::runtime_error("this kernel takes float32, bfloat16 or float16 tensors");
}

// The one float type every tensor of `ts` has (a convolution's, a GEMM's or a pool's), or a
// clear error.
template <class Ts> int one_float_type(const Ts& ts, const char* op) {
  const int d = ts.front().dtype;
  for (const TensorRef& t : ts)
    if (t.dtype != d || (d != F32 && !is_low_float(d)))
      throw std::runtime_error(std::string(op) + ": every tensor must be float32, or all "
                               "bfloat16 or all float16 (mixed precision); got " +
                               float_name(t.dtype) + " beside " + float_name(d));
  return d;
}

}  // namespace planner
