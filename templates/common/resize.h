// Resize's per-axis taps (planner/ops/resize.py): output coordinate o of an axis of input
// length L reads L[i0] * (1 - w1) + L[i1] * w1. Both backends compute them with these
// functions, in double, from the node's attributes; the numpy reference is the oracle.
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
  int64_t length = 1;  // input length
  double scale = 1;    // output length / input length, or the model's scale
  bool linear = false;
  int coord = kHalfPixel;
  int round = kPreferFloor;

  // Output coordinate o's taps: input indices i0, i1 (clamped to the axis) and i1's weight.
  PLANNER_HOST_DEVICE void taps(int64_t o, int64_t* i0, int64_t* i1, double* w1) const {
    const double resized = static_cast<double>(length) * scale;
    double x;
    if (coord == kAlignCorners)
      x = resized == 1 ? 0.0 : static_cast<double>(o) * static_cast<double>(length - 1) /
                                   (resized - 1);
    else if (coord == kAsymmetric)
      x = static_cast<double>(o) / scale;
    else if (coord == kPytorchHalfPixel && resized <= 1)
      x = 0.0;
    else
      x = (static_cast<double>(o) + 0.5) / scale - 0.5;
    const double base = floor(x);
    if (!linear) {
      double r;
      if (round == kFloor) r = base;
      else if (round == kCeil) r = ceil(x);
      else if (x == base + 0.5) r = round == kPreferFloor ? base : base + 1;
      else r = floor(x + 0.5);
      *i0 = *i1 = clamp(static_cast<int64_t>(r));
      *w1 = 0;
      return;
    }
    *i0 = clamp(static_cast<int64_t>(base));
    *i1 = clamp(static_cast<int64_t>(base) + 1);
    *w1 = x - base;
  }
  PLANNER_HOST_DEVICE int64_t clamp(int64_t i) const {
    return i < 0 ? 0 : (i >= length ? length - 1 : i);
  }
};

// The axes of a Resize / ResizeGrad node: H (0) and W (1) of input lengths in_h, in_w.
// `mode`, `coordinate_mode`, `nearest_mode` and `scales` are the node's attributes.
inline ResizeAxis resize_axis(const std::string& mode, const std::string& coord,
                              const std::string& round, double scale, int64_t length) {
  ResizeAxis a;
  a.length = length;
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
  return a;
}

}  // namespace planner
