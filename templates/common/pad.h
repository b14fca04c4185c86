// Pad's attributes as both backends read them (planner/ops/pad.py): per axis the elements added
// before and after (ONNX's `pads`: every axis's begin, then every axis's end), the mode, and the
// constant; checked against the unpadded (`small`) and padded (`big`) shapes.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime.h"

namespace planner {

enum PadMode : int { kConstant = 0, kReflect = 1, kEdge = 2 };

struct PadAttrs {
  std::vector<int64_t> before, after;  // per axis of `small`
  PadMode mode;
  double value;  // (a float64 pad's constant: a float32 one takes it rounded)
};

inline PadAttrs pad_attrs(const Attrs& attrs, const Shape& small, const Shape& big) {
  const std::vector<int64_t> pads = attrs.ints("pads");
  const std::string mode = attrs.s("mode");
  const size_t rank = small.size();
  if (pads.size() != 2 * rank || big.size() != rank)
    throw std::runtime_error("Pad: pads must hold 2 * rank values");
  PadAttrs p;
  if (mode == "constant") p.mode = kConstant;
  else if (mode == "reflect") p.mode = kReflect;
  else if (mode == "edge") p.mode = kEdge;
  else throw std::runtime_error("Pad: unknown mode " + mode);
  p.value = attrs.has("value") ? attrs.f("value") : 0.0;
  for (size_t a = 0; a < rank; ++a) {
    p.before.push_back(pads[a]);
    p.after.push_back(pads[rank + a]);
    if (big[a] != small[a] + pads[a] + pads[rank + a])
      throw std::runtime_error("Pad: shapes do not match pads");
  }
  return p;
}

}  // namespace planner
