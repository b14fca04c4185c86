// A convolution's attributes as both backends read them (planner/ops/conv.py): strides [h, w],
// pads [top, left, bottom, right], dilations [h, w] (1 = dense), groups, and a Conv2D's folded
// activation (planner/frontend/passes/fold_conv_bias.py, fused_activation.h). Every convolution op has
// the geometry; the activation is Conv2D's alone, absent elsewhere and read as none.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "fused_activation.h"
#include "runtime.h"

namespace planner {

struct ConvGeometry {
  int64_t strides[2];
  int64_t pads[4];  // top, left, bottom, right
  int64_t dilations[2];
  int64_t groups;
  Activation activation;

  bool symmetric() const { return pads[0] == pads[2] && pads[1] == pads[3]; }
};

inline ConvGeometry conv_geometry(const Attrs& attrs) {
  const std::vector<int64_t> s = attrs.ints("strides"), p = attrs.ints("pads");
  const std::vector<int64_t> d =
      attrs.has("dilations") ? attrs.ints("dilations") : std::vector<int64_t>{1, 1};
  const int64_t groups = attrs.has("groups") ? attrs.i("groups") : 1;
  if (s.size() != 2 || p.size() != 4 || d.size() != 2 || groups < 1)
    throw std::runtime_error("convolution attrs need strides[2], pads[4], dilations[2] and "
                             "groups >= 1");
  return ConvGeometry{{s[0], s[1]}, {p[0], p[1], p[2], p[3]}, {d[0], d[1]}, groups,
                      fused_activation(attrs, "Conv2D")};
}

}  // namespace planner
