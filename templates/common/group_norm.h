// GroupNorm's geometry as both backends read it (planner/ops/group_norm.py): x is (N, C, ...),
// `groups` divides C; the gradient op is the one with five inputs.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "runtime.h"

namespace planner {

struct GroupNormGeometry {
  bool grad;
  int64_t batch, channels, groups, space;
  double eps;
};

inline GroupNormGeometry group_norm_geometry(const Attrs& attrs, size_t inputs,
                                             const std::vector<int64_t>& x) {
  if (x.size() < 2) throw std::runtime_error("GroupNorm: x must be (N, C, ...)");
  GroupNormGeometry g{inputs == 5, x[0], x[1], attrs.i("groups"), 1, attrs.f("epsilon")};
  if (g.groups < 1 || g.channels % g.groups != 0)
    throw std::runtime_error("GroupNorm: groups must divide the channels");
  for (size_t k = 2; k < x.size(); ++k) g.space *= x[k];
  return g;
}

}  // namespace planner
