// A Conv2D's or MatMul's folded activation as both backends read it (the `activation` attr,
// planner/ops/fused_activation.py: "none", absent read as none, or "relu" after the bias,
// float32 only, NaN kept as Relu keeps it; "leaky_relu", with attr alpha, a CPU step's fold
// alone: planner/step/fold_conv_leaky.py; the CUDA kernels refuse it).
#pragma once
#include <stdexcept>
#include <string>

#include "runtime.h"

namespace planner {

enum Activation : int { kActNone = 0, kActRelu = 1, kActLeakyRelu = 2 };

inline Activation fused_activation(const Attrs& attrs, const std::string& op) {
  const std::string act = attrs.has("activation") ? attrs.s("activation") : "none";
  if (act == "relu") return kActRelu;
  if (act == "leaky_relu") return kActLeakyRelu;
  if (act != "none") throw std::runtime_error(op + ": unknown activation " + act);
  return kActNone;
}

// The folded activation of an op whose kernels take a Relu alone (a sum, a GEMM): a
// leaky_relu there is refused, never run as a Relu.
inline Activation relu_activation(const Attrs& attrs, const std::string& op) {
  const Activation act = fused_activation(attrs, op);
  if (act == kActLeakyRelu)
    throw std::runtime_error(op + ": no folded leaky_relu here (Conv2D's and BatchNorm's "
                             "alone, on the CPU)");
  return act;
}

}  // namespace planner
