// The float64 MatMul (matmul_f64.cpp: BLAS's dgemm), which matmul.cpp's factory returns for a
// float64 node.
#pragma once
#include "../kernel.h"

namespace planner {

KernelPtr matmul_f64(const Node& n);

}  // namespace planner
