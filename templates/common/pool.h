// A pool's window as both backends read it (planner/ops/pool.py, conv.py's Window): per
// spatial axis (H, W) the kernel, stride, dilation and padding before and after, checked
// against the NCHW input and output the plan gave the node, so that every kernel (oneDNN's,
// the CPU's max loops, CUDA's) starts from the same windows or refuses the node alike.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime.h"

namespace planner {

struct PoolWindow {
  int64_t kernel[2], stride[2], dilation[2];
  int64_t pad_begin[2], pad_end[2];  // top, left; bottom, right
  bool ceil_mode;
  bool count_include_pad;  // AvgPool's divisor: the window clipped to the padded input
};

// Windows along one axis, as Window.out_hw: ceil_mode keeps a last partial window unless it
// would start inside the bottom/right padding.
inline int64_t pool_out_size(int64_t in, int64_t kernel, int64_t stride, int64_t dilation,
                             int64_t pad_begin, int64_t pad_end, bool ceil_mode) {
  const int64_t room = in + pad_begin + pad_end - (dilation * (kernel - 1) + 1);
  if (room < 0) return 0;
  int64_t n = (ceil_mode ? (room + stride - 1) / stride : room / stride) + 1;
  if (ceil_mode && (n - 1) * stride >= in + pad_begin) --n;
  return n;
}

// The window of a pool over input x (N, C, H, W) with output y.
inline PoolWindow pool_window(const Attrs& attrs, const Shape& x, const Shape& y) {
  if (x.size() != 4 || y.size() != 4 || x[0] != y[0] || x[1] != y[1])
    throw std::runtime_error("pooling needs NCHW input and output with the same N and C, got " +
                             shape_text(x) + " and " + shape_text(y));
  auto ints = [&](const char* key, std::vector<int64_t> otherwise) {
    return attrs.has(key) ? attrs.ints(key) : otherwise;
  };
  const std::vector<int64_t> k = attrs.ints("kernel"), s = ints("strides", {1, 1}),
                             p = ints("pads", {0, 0, 0, 0}), d = ints("dilations", {1, 1});
  if (k.size() != 2 || s.size() != 2 || p.size() != 4 || d.size() != 2)
    throw std::runtime_error("pooling attrs need kernel[2], strides[2], pads[4], dilations[2]");
  PoolWindow w;
  w.ceil_mode = attrs.has("ceil_mode") && attrs.b("ceil_mode");
  w.count_include_pad = attrs.has("count_include_pad") && attrs.b("count_include_pad");
  for (int a = 0; a < 2; ++a) {
    if (k[a] < 1 || s[a] < 1 || d[a] < 1 || p[a] < 0 || p[a + 2] < 0)
      throw std::runtime_error("pooling kernel, strides and dilations must be >= 1, pads >= 0");
    w.kernel[a] = k[a];
    w.stride[a] = s[a];
    w.dilation[a] = d[a];
    w.pad_begin[a] = p[a];
    w.pad_end[a] = p[a + 2];
    const int64_t o = pool_out_size(x[2 + a], k[a], s[a], d[a], p[a], p[a + 2], w.ceil_mode);
    if (o != y[2 + a])
      throw std::runtime_error("pooling input " + shape_text(x) + " gives " +
                               std::to_string(o) + " windows along axis " +
                               std::to_string(2 + a) + ", the output is " + shape_text(y));
  }
  return w;
}

}  // namespace planner
