// ReduceSum's and ReduceMean's `axes` as both backends read them (planner/ops/reduce.py): per
// axis of x, whether it is reduced. No axes reduces every axis (the op's rule); keepdims only
// changes the declared shape, never the bytes, so no kernel reads it.
#pragma once
#include <cstdint>
#include <vector>

#include "runtime.h"

namespace planner {

inline std::vector<bool> reduced_axes(const Attrs& attrs, size_t rank) {
  const std::vector<int64_t> axes = attrs.ints("axes");
  std::vector<bool> reduced(rank, axes.empty());
  for (int64_t a : axes) reduced[norm_axis(a, rank)] = true;
  return reduced;
}

}  // namespace planner
