// ClipGradNorm's operands and max_norm as both backends read them
// (planner/ops/clip_grad_norm.py): [g1 .. gn] -> [g1 * c .. gn * c, total_norm], float32.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "host_device.h"
#include "runtime.h"

namespace planner {

struct GradClip {
  std::vector<int> in, out;     // gradient k and its clipped copy (possibly the same bytes)
  std::vector<int64_t> sizes;   // gradient k's elements
  int total;                    // total_norm
  float max_norm;
};

// What every gradient is multiplied by: min(max_norm / (total + 1e-6), 1) as PyTorch's
// clip_grad_norm_ computes it, a NaN total giving a NaN factor (its clamp keeps NaN; fminf
// would return 1 and leave the gradients unclipped on one backend only).
PLANNER_HOST_DEVICE inline float clip_factor(float max_norm, float total) {
  const float f = max_norm / (total + 1e-6f);
  return 1.f < f ? 1.f : f;
}

// N: a backend's kernel-factory Node.
template <class N>
GradClip grad_clip(const N& n) {
  require_f32(n);
  if (n.out.size() != n.in.size() + 1)
    throw std::runtime_error("ClipGradNorm: one output per gradient, then total_norm");
  GradClip c{{}, {}, {}, n.out.back().id, static_cast<float>(n.attrs.f("max_norm"))};
  for (size_t k = 0; k < n.in.size(); ++k) {
    c.in.push_back(n.in[k].id);
    c.out.push_back(n.out[k].id);
    c.sizes.push_back(n.in[k].size());
  }
  return c;
}

}  // namespace planner
