// SoftmaxCrossEntropy's and its gradient's operands and attributes as both backends read them
// (planner/ops/loss.py): [logits, labels] -> loss or [dloss, logits, labels] -> dlogits, the
// classes along the node's axis of the logits, labels equal to ignore_index skipped, and
// label_smoothing. Read once so that both backends count and smooth the same labels.
#pragma once
#include <cstdint>
#include <stdexcept>

#include "runtime.h"

namespace planner {

struct CrossEntropy {
  bool grad;
  int logits, labels, dloss, out;  // dloss: -1 for the forward
  AxisSplit classes;  // the logits as (outer, classes, inner): one label per outer * inner
  int64_t ignore_index;
  double label_smoothing;
};

// N: a backend's kernel-factory Node.
template <class N>
CrossEntropy cross_entropy(const N& n) {
  const bool grad = n.in.size() == 3;
  const TensorRef& x = n.in[grad ? 1 : 0];
  if (x.shape.size() < 2)
    throw std::runtime_error("SoftmaxCrossEntropy: logits must be (N, C, ...)");
  return {grad,
          x.id,
          n.in[grad ? 2 : 1].id,
          grad ? n.in[0].id : -1,
          n.out[0].id,
          axis_split(n.attrs, x.shape),
          n.attrs.i("ignore_index"),
          n.attrs.f("label_smoothing")};
}

}  // namespace planner
