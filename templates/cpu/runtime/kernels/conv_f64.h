// The float64 convolutions (conv_f64.cpp: im2col and BLAS's dgemm), which conv.cpp's
// factories return for a float64 node.
#pragma once
#include "../kernel.h"

namespace planner {

KernelPtr conv2d_f64(const Node& n);
KernelPtr conv2d_backprop_input_f64(const Node& n);
KernelPtr conv2d_backprop_filter_f64(const Node& n);
KernelPtr conv_transpose2d_f64(const Node& n);

}  // namespace planner
