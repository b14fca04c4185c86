// A Conv2D's or MatMul's folded activation as both backends read it (the `activation` attr,
// planner/ops/fused_activation.py: "none", absent read as none, or "relu" after the bias,
// float32 only, NaN kept as Relu keeps it).
#pragma once
#include <stdexcept>
#include <string>

#include "runtime.h"

namespace planner {

enum Activation : int { kActNone = 0, kActRelu = 1 };

inline Activation fused_activation(const Attrs& attrs, const std::string& op) {
  const std::string act = attrs.has("activation") ? attrs.s("activation") : "none";
  if (act == "relu") return kActRelu;
  if (act != "none") throw std::runtime_error(op + ": unknown activation " + act);
  return kActNone;
}

}  // namespace planner
