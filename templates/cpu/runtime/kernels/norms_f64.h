// The float64 normalisations and softmaxes (norms_f64.cpp: loops in double), which the
// float32 kernels' factories return for a float64 node.
#pragma once
#include "../kernel.h"

namespace planner {

KernelPtr layer_norm_f64(const Node& n);
KernelPtr layer_norm_grad_f64(const Node& n);
KernelPtr batch_norm_f64(const Node& n);
KernelPtr batch_norm_grad_f64(const Node& n);
KernelPtr softmax_f64(const Node& n);
KernelPtr log_softmax_f64(const Node& n);
KernelPtr softmax_grad_f64(const Node& n);

}  // namespace planner
