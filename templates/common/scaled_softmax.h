// ScaledSoftmax's rows as both backends read them (planner/ops/scaled_softmax.py): x (dy and y
// for the gradient) seen as `rows` rows of `n` scores along the last axis, with the attrs
// scale and causal. width() is the scores a row reads, on the host and on a device, so both
// backends mask the same ones.
#pragma once
#include <cstdint>
#include <stdexcept>

#include "host_device.h"
#include "runtime.h"

namespace planner {

struct ScaledSoftmaxRows {
  int64_t rows, n, height;  // height: rows per matrix, the mask's row index is row % height
  float scale;
  bool causal;
  // A causal row i reads its first min(i + 1, n) scores (the rest are masked), others all n.
  PLANNER_HOST_DEVICE int64_t width(int64_t row) const {
    if (!causal) return n;
    const int64_t w = row % height + 1;
    return w < n ? w : n;
  }
};

// N: a backend's kernel-factory Node, ScaledSoftmax [x] -> y or ScaledSoftmaxGrad [dy, y] -> dx.
template <class N>
ScaledSoftmaxRows scaled_softmax_geometry(const N& node) {
  require_f32(node);
  const Shape& s = node.in[0].shape;
  for (const TensorRef& t : node.in)
    if (t.shape != s)
      throw std::runtime_error("ScaledSoftmaxGrad: dy and y must share one shape, got " +
                               shape_text(t.shape) + " and " + shape_text(s));
  ScaledSoftmaxRows r;
  r.scale = static_cast<float>(node.attrs.f("scale"));
  r.causal = node.attrs.b("causal");
  if (s.empty() || (r.causal && s.size() < 2))
    throw std::runtime_error("ScaledSoftmax: input rank too small for its mask");
  r.n = s.back();
  r.height = r.causal ? s[s.size() - 2] : 1;
  r.rows = r.n ? node.in[0].size() / r.n : 0;
  return r;
}

}  // namespace planner
