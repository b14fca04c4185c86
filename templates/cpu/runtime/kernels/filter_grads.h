// Weight gradients that the runtime computes itself where oneDNN 3.2 would run its im2col GEMM
// fallback (x64:gemm:jit) for a float32 convolution's weight gradient: the kernel no larger
// than the image, pads at most half of it and no dilation are what its direct kernels need, so
// a network's last stage on 2x2 maps falls back. conv.cpp asks oneDNN which implementation it
// would take and calls these only where it took the GEMMs.
#pragma once
#include "../dnnl_kernel.h"

namespace planner {

// One filter per channel (groups = C = O), x, dy and dw float32: a direct loop.
bool depthwise_float32(const Node& n, int64_t groups);
KernelPtr depthwise_filter_grad(const Node& n);

// One group, x, dy and dw float32: the batch's columns and one matmul, or null where its two
// copies and the matmul's scratchpad would take more than `gemm_scratchpad` bytes (the
// scratch the GEMM fallback books at this thread count, which the plan reserved).
KernelPtr im2col_filter_grad(const Node& n, size_t gemm_scratchpad);

}  // namespace planner
