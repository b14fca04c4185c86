// What the cuDNN-based kernel families share: descriptors owned by the kernel (created at
// load, destroyed with it, never copied), and NCHW tensor descriptors whose dims are
// checked to fit cuDNN's int API instead of silently truncating.
#pragma once
#include <limits>
#include <stdexcept>
#include <string>

#include "kernel.h"

namespace planner {

// One cuDNN descriptor, created at construction and destroyed with its owner.
template <class T, cudnnStatus_t (*Create)(T*), cudnnStatus_t (*Destroy)(T)>
class CudnnDesc {
 public:
  CudnnDesc() { check_cudnn(Create(&d_), "cudnnCreate*Descriptor"); }
  ~CudnnDesc() { Destroy(d_); }
  CudnnDesc(const CudnnDesc&) = delete;
  CudnnDesc& operator=(const CudnnDesc&) = delete;
  operator T() const { return d_; }

 private:
  T d_{};
};

using TensorDesc =
    CudnnDesc<cudnnTensorDescriptor_t, cudnnCreateTensorDescriptor, cudnnDestroyTensorDescriptor>;
using FilterDesc =
    CudnnDesc<cudnnFilterDescriptor_t, cudnnCreateFilterDescriptor, cudnnDestroyFilterDescriptor>;
using ConvDesc = CudnnDesc<cudnnConvolutionDescriptor_t, cudnnCreateConvolutionDescriptor,
                           cudnnDestroyConvolutionDescriptor>;

// v as an int for cuDNN / cuBLAS, or a clear error naming `what`.
inline int to_int(int64_t v, const char* what) {
  if (v < 0 || v > std::numeric_limits<int>::max())
    throw std::runtime_error(std::string(what) + " = " + std::to_string(v) +
                             " does not fit the library's int dimensions");
  return static_cast<int>(v);
}

// A packed NCHW tensor descriptor (float32 unless told: mixed precision's low types).
inline void set_nchw(cudnnTensorDescriptor_t d, int64_t n, int64_t c, int64_t h, int64_t w,
                     cudnnDataType_t type = CUDNN_DATA_FLOAT) {
  PLANNER_CUDNN(cudnnSetTensor4dDescriptor(d, CUDNN_TENSOR_NCHW, type,
                                           to_int(n, "N"), to_int(c, "C"), to_int(h, "H"),
                                           to_int(w, "W")));
}

inline void require_rank(const TensorRef& t, size_t rank, const char* what) {
  if (t.shape.size() != rank)
    throw std::runtime_error(std::string(what) + " must have rank " + std::to_string(rank) +
                             ", got shape " + shape_text(t.shape));
}

// Rounds scratch offsets up to the 256 bytes cuDNN / cuBLAS workspaces like.
inline size_t align256(size_t bytes) { return (bytes + 255) / 256 * 256; }

}  // namespace planner
