// The depthwise weight gradient that the runtime computes itself where oneDNN 3.2 would run
// its im2col GEMM fallback (x64:gemm:jit) for a float32 convolution's weight gradient: the
// kernel no larger than the image, pads at most half of it and no dilation are what its direct
// kernels need, so a network's last stage on 2x2 maps falls back. conv.cpp asks oneDNN which
// implementation it would take and calls this only where it took the GEMMs (a one-group one
// takes conv_columns.h's kernel there).
#pragma once
#include "../dnnl_kernel.h"

namespace planner {

// One filter per channel (groups = C = O), x, dy and dw float32: a direct loop.
bool depthwise_float32(const Node& n, int64_t groups);
KernelPtr depthwise_filter_grad(const Node& n);

}  // namespace planner
