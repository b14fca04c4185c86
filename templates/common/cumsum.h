// The scans as both backends read them (planner/ops/cumsum.py): x seen as (outer, extent, inner)
// around the node's axis, each of the outer * inner lines summed (CumSum) or multiplied
// (CumProd, CumProdGrad's forward products) along it, from the end when reverse, each result
// leaving out its own element when exclusive.
#pragma once
#include <cstring>
#include <stdexcept>
#include <string>

#include "runtime.h"

namespace planner {

struct CumSumScan {
  AxisSplit lines;
  bool exclusive, reverse, product;
};

// N: a backend's kernel-factory Node.
template <class N>
CumSumScan cumsum_scan(const N& n) {
  for (const auto& t : n.in)
    if (t.dtype != F32) throw std::runtime_error(std::string(n.spec->op) + ": float32 tensors");
  if (n.out[0].dtype != F32) throw std::runtime_error(std::string(n.spec->op) + ": float32 tensors");
  const TensorRef& x = n.in.back();  // CumProdGrad: [dy, x]
  return {axis_split(n.attrs, x.shape), n.attrs.b("exclusive"), n.attrs.b("reverse"),
          std::strcmp(n.spec->op, "CumSum") != 0};
}

}  // namespace planner
