// Resize's per-axis taps (planner/ops/resize.py): output coordinate o of an axis of input
// length L reads, linear, x[i0] * (1 - w1) + x[i1] * w1 (every product computed, zero weights
// included: PyTorch's inf * 0 = NaN); nearest, x[i0] alone (i1 == i0, w1 == 0 never multiplied).
// Both backends compute them with these functions, in the reference's arithmetic (PyTorch's
// float32 for its mappings, ONNX's double for the others), from the node's attributes; the
// numpy reference is the oracle.
#pragma once

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "host_device.h"

namespace planner {

// Coordinate modes and nearest rounding modes, as ints a GPU kernel can take.
enum ResizeCoord { kHalfPixel = 0, kPytorchHalfPixel = 1, kAlignCorners = 2, kAsymmetric = 3 };
enum ResizeRound { kPreferFloor = 0, kPreferCeil = 1, kFloor = 2, kCeil = 3 };

struct ResizeAxis {
  int64_t length = 1;    // input length
  int64_t out = 1;       // output length
  float ratio = 1;       // ratio_h / ratio_w: a PyTorch mapping's float32 sampling ratio
  double scale = 1;      // scale_h / scale_w: an ONNX-only mapping's scale
  bool pytorch = false;  // nearest asymmetric floor, linear half_pixel or align_corners
  bool linear = false;
  int coord = kHalfPixel;
  int round = kPreferFloor;

  // Output coordinate o's taps: input indices i0, i1 (clamped to the axis) and i1's weight,
  // in the reference's arithmetic: PyTorch's float32 for its mappings, ONNX's double else.
  PLANNER_HOST_DEVICE void taps(int64_t o, int64_t* i0, int64_t* i1, double* w1) const {
    double x;
    if (pytorch) {
      if (out == length) {  // PyTorch copies an unresized axis (x[o] * 1 + x[o] * 0)
        *i0 = *i1 = o;
        *w1 = 0;
        return;
      }
      // r * o, or r * (o + 0.5) - 0.5 rounded once (PyTorch's fused multiply-add)
      x = coord == kAlignCorners || coord == kAsymmetric
              ? ratio * static_cast<float>(o)
              : fmaf(ratio, static_cast<float>(o) + 0.5f, -0.5f);
    } else {
      const double resized = static_cast<double>(length) * scale;
      if (coord == kAlignCorners)
        x = resized == 1 ? 0.0 : static_cast<double>(o) * static_cast<double>(length - 1) /
                                     (resized - 1);
      else if (coord == kAsymmetric)
        x = static_cast<double>(o) / scale;
      else if (coord == kPytorchHalfPixel && resized <= 1)
        x = 0.0;
      else
        x = (static_cast<double>(o) + 0.5) / scale - 0.5;
    }
    if (!linear) {
      const double base = floor(x);
      double r;
      if (round == kFloor) r = base;
      else if (round == kCeil) r = ceil(x);
      else if (x - base == 0.5) r = round == kPreferFloor ? base : base + 1;  // a tie
      else r = x - base < 0.5 ? base : base + 1;
      *i0 = *i1 = clamp(static_cast<int64_t>(r));
      *w1 = 0;
      return;
    }
    // PyTorch's (and ONNX Runtime's) clamps: x raised to 0 (x = -0.25 reads x[0] * 1 +
    // x[1] * 0), i0 lowered to L - 1, the weight kept in [0, 1]
    if (x < 0) x = 0;
    const int64_t base = static_cast<int64_t>(floor(x));
    *i0 = base < length - 1 ? base : length - 1;
    *i1 = *i0 + 1 < length ? *i0 + 1 : length - 1;
    const double w = x - static_cast<double>(*i0);
    *w1 = w < 0 ? 0 : (w > 1 ? 1 : w);
  }
  PLANNER_HOST_DEVICE int64_t clamp(int64_t i) const {
    return i < 0 ? 0 : (i >= length ? length - 1 : i);
  }
};

// An axis of a Resize / ResizeGrad node, of input length `length` and output length `out`.
// `mode`, `coordinate_mode`, `nearest_mode`, `ratio` (ratio_h or ratio_w) and `scale` (scale_h
// or scale_w) are the node's attributes.
inline ResizeAxis resize_axis(const std::string& mode, const std::string& coord,
                              const std::string& round, double ratio, double scale,
                              int64_t length, int64_t out) {
  ResizeAxis a;
  a.length = length;
  a.out = out;
  a.ratio = static_cast<float>(ratio);  // exact: the planner wrote a float32
  a.scale = scale;
  a.linear = mode == "linear";
  if (coord == "half_pixel") a.coord = kHalfPixel;
  else if (coord == "pytorch_half_pixel") a.coord = kPytorchHalfPixel;
  else if (coord == "align_corners") a.coord = kAlignCorners;
  else if (coord == "asymmetric") a.coord = kAsymmetric;
  else throw std::runtime_error("Resize: unknown coordinate_mode " + coord);
  if (round == "round_prefer_floor") a.round = kPreferFloor;
  else if (round == "round_prefer_ceil") a.round = kPreferCeil;
  else if (round == "floor") a.round = kFloor;
  else if (round == "ceil") a.round = kCeil;
  else throw std::runtime_error("Resize: unknown nearest_mode " + round);
  if (mode != "linear" && mode != "nearest") throw std::runtime_error("Resize: unknown mode " + mode);
  // planner/ops/resize.py's pytorch_mapping
  a.pytorch = a.linear ? a.coord == kHalfPixel || a.coord == kAlignCorners
                       : a.coord == kAsymmetric && a.round == kFloor;
  return a;
}

}  // namespace planner
