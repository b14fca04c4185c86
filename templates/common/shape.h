// The layout ops' attributes as both backends read them (planner/ops/shape.py): Transpose's
// permutation (axes normalized, one per axis of x) and a Slice's per-axis begin and step (every
// axis given, no step 0), checked before any kernel indexes with them.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "runtime.h"

namespace planner {

inline std::vector<int64_t> transpose_perm(const Attrs& attrs, size_t rank) {
  std::vector<int64_t> perm;
  for (int64_t p : attrs.ints("perm")) perm.push_back(norm_axis(p, rank));
  if (perm.size() != rank) throw std::runtime_error("Transpose: perm does not fit x");
  return perm;
}

struct SliceWindow {
  std::vector<int64_t> begin, step;  // per axis of the full tensor
};

inline SliceWindow slice_window(const Attrs& attrs, const Shape& full) {
  SliceWindow w{attrs.ints("begin"), attrs.ints("step")};
  if (w.begin.size() != full.size() || w.step.size() != full.size())
    throw std::runtime_error("Slice: begin and step must give every axis");
  for (int64_t s : w.step)
    if (s == 0) throw std::runtime_error("Slice: a step is 0");
  return w;
}

}  // namespace planner
