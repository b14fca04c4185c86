// CumSum's scan as both backends read it (planner/ops/cumsum.py): x seen as (outer, extent,
// inner) around the node's axis, each of the outer * inner lines summed along it, from the
// end when reverse, each sum leaving out its own element when exclusive.
#pragma once
#include <stdexcept>

#include "runtime.h"

namespace planner {

struct CumSumScan {
  AxisSplit lines;
  bool exclusive, reverse;
};

// N: a backend's kernel-factory Node.
template <class N>
CumSumScan cumsum_scan(const N& n) {
  if (n.in[0].dtype != F32 || n.out[0].dtype != F32)
    throw std::runtime_error("CumSum: float32 tensors");
  return {axis_split(n.attrs, n.in[0].shape), n.attrs.b("exclusive"), n.attrs.b("reverse")};
}

}  // namespace planner
