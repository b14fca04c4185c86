// BatchNorm's and LRN's attributes as both backends read them (planner/ops/norm.py), read
// once so that the oneDNN and cuDNN paths, and the plain LRN loops of each, take the same
// epsilon, momentum, mode and window for a node.
#pragma once
#include <cstdint>
#include <limits>
#include <stdexcept>

#include "runtime.h"

namespace planner {

// BatchNorm and BatchNormGrad: training normalizes with the batch statistics (the gradient's
// last inputs are then saved_mean and saved_invstd), else with the running ones; training is
// the default of both ops. momentum is BatchNorm's running update (BatchNormGrad has none: 0).
struct BatchNormAttrs {
  bool training;
  double epsilon, momentum;
};

inline BatchNormAttrs batch_norm_attrs(const Attrs& attrs) {
  return {!attrs.has("training") || attrs.b("training"), attrs.f("epsilon"),
          attrs.has("momentum") ? attrs.f("momentum") : 0.0};
}

// LRN and LRNGrad: channel c's window is [c - (size-1)/2, c + size/2] (ONNX's), the
// denominator bias + alpha / size * (its sum of squares), raised to beta.
struct LrnParams {
  int size;
  float alpha, beta, bias;
};

inline LrnParams lrn_params(const Attrs& attrs) {
  const int64_t size = attrs.i("size");
  if (size < 1 || size > std::numeric_limits<int>::max())
    throw std::runtime_error("LRN size must be >= 1 and fit an int");
  return {static_cast<int>(size), static_cast<float>(attrs.f("alpha")),
          static_cast<float>(attrs.f("beta")), static_cast<float>(attrs.f("bias"))};
}

}  // namespace planner
