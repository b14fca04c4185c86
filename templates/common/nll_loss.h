// NLLLoss's and its gradient's operands and attributes as both backends read them
// (planner/ops/nll_loss.py): [x, labels(, weight)] -> loss or [dloss, x, labels(, weight)] ->
// dx, the classes along the node's axis of x, labels equal to ignore_index skipped,
// label_smoothing, and the reduction (none, mean or sum).
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>

#include "runtime.h"

namespace planner {

enum class LossReduction { kNone, kMean, kSum };

struct NllLoss {
  bool grad;
  int x, labels, weight, dloss, out;  // weight: -1 without class weights; dloss: -1 forward
  AxisSplit classes;  // x as (outer, classes, inner): one label per outer * inner
  int64_t ignore_index;
  double label_smoothing;
  LossReduction reduction;
  int64_t positions() const { return classes.outer * classes.inner; }
};

inline LossReduction loss_reduction(const std::string& s) {
  if (s == "none") return LossReduction::kNone;
  if (s == "sum") return LossReduction::kSum;
  if (s == "mean") return LossReduction::kMean;
  throw std::runtime_error("NLLLoss: reduction must be none, mean or sum");
}

// N: a backend's kernel-factory Node.
template <class N>
NllLoss nll_loss(const N& n) {
  const bool grad = n.in.size() == 4 || (n.in.size() == 3 && n.in[2].dtype == I64);
  const size_t first = grad ? 1 : 0;
  const TensorRef& x = n.in[first];
  if (x.shape.size() < 2) throw std::runtime_error("NLLLoss: input must be (N, C, ...)");
  if (n.in[first + 1].dtype != I64) throw std::runtime_error("NLLLoss: labels must be int64");
  const bool weighted = n.in.size() == first + 3;
  return {grad,
          x.id,
          n.in[first + 1].id,
          weighted ? n.in[first + 2].id : -1,
          grad ? n.in[0].id : -1,
          n.out[0].id,
          axis_split(n.attrs, x.shape),
          n.attrs.i("ignore_index"),
          n.attrs.f("label_smoothing"),
          loss_reduction(n.attrs.s("reduction"))};
}

}  // namespace planner
