// ClipGradNorm's operands and max_norm as both backends read them
// (planner/ops/clip_grad_norm.py): [g1 .. gn] -> [g1 * c .. gn * c, total_norm], float32.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "runtime.h"

namespace planner {

struct GradClip {
  std::vector<int> in, out;     // gradient k and its clipped copy (possibly the same bytes)
  std::vector<int64_t> sizes;   // gradient k's elements
  int total;                    // total_norm
  float max_norm;
};

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
