// The float64 2-D pools (pool_f64.cpp: loops in double over common/pool_nd.h's windows),
// which max_pool.cpp's and pool.cpp's factories return for a float64 node.
#pragma once
#include "../kernel.h"

namespace planner {

KernelPtr max_pool_f64(const Node& n);
KernelPtr max_pool_grad_f64(const Node& n);
KernelPtr avg_pool_f64(const Node& n);
KernelPtr avg_pool_grad_f64(const Node& n);

}  // namespace planner
