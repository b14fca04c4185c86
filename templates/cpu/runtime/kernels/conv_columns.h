// Convolutions as one matmul over the whole batch's columns (im2col): what the runtime runs
// where oneDNN 3.2's kernels work image by image on maps too small to keep their registers
// busy. A float32 one-group convolution only; the plan asks for it per op (the `columns`
// layout a convolution gets where the profile measured it faster,
// planner/costs/conv_layouts.py), and a weight gradient oneDNN would put on its GEMM fallback
// takes it unasked (conv.cpp). Every thread count computes the same bits.
#pragma once
#include <algorithm>

#include "../dnnl_kernel.h"
#include "conv.h"

namespace planner {

// A tap at offset `tap` (kernel index x dilation - leading pad) along an axis of `size` pixels:
// the first output position o whose input o * stride + tap lies inside the image, and one past
// the last (o < outputs); the padding contributes nothing, so the kernels skip it.
inline int64_t first_inside(int64_t tap, int64_t stride) {
  return tap >= 0 ? 0 : (-tap + stride - 1) / stride;
}
inline int64_t end_inside(int64_t tap, int64_t stride, int64_t size, int64_t outputs) {
  const int64_t room = size - tap;  // o * stride < room
  return room <= 0 ? 0 : std::min(outputs, (room + stride - 1) / stride);
}

// Where an image's plane (b, c) starts and the step between its pixels: plain NCHW (step 1),
// or channel-blocked (TensorRef::block B: (N, C/B, H, W, B), step B). The kernels visit the
// same elements in the same order either way: the same bits.
struct Planes {
  int64_t channels, area, block;  // block 0: plain
  Planes(const Shape& image, int image_block)
      : channels(image[1]), area(image[2] * image[3]), block(image_block) {}
  int64_t at(int64_t b, int64_t c) const {
    return block ? ((b * (channels / block) + c / block) * area) * block + c % block
                 : (b * channels + c) * area;
  }
  int64_t step() const { return block ? block : 1; }
};

// The geometry of a convolution seen through its columns: image x (N, C, H, W), output
// (N, O, OH, OW), weights (O, C, kh, kw), and how the image and output lie.
struct Columns {
  Shape x, y, w;
  ConvGeometry g;
  Planes xs, ys;
  int64_t positions() const { return y[0] * y[2] * y[3]; }  // N x OH x OW
  int64_t taps() const { return w[1] * w[2] * w[3]; }       // C x kh x kw
  // The columns (positions x taps floats) and a regrouped copy of the output or dy
  // (positions x O), each 64-byte aligned: every columns kernel's scratch (their sgemm keeps
  // its packing buffers to itself; planner/ops/conv_scratch.py's columns_bytes).
  size_t columns_bytes() const { return align64(positions() * taps() * 4); }
  size_t bytes() const { return columns_bytes() + align64(positions() * w[0] * 4); }
  static size_t align64(int64_t bytes) { return static_cast<size_t>((bytes + 63) / 64 * 64); }
  // columns[(c, i, j)][(b, oy, ox)] = x[b, c, oy * stride + i * dilation - pad, ...], or 0
  // where the tap reads padding: taps() rows of positions() floats, split over the team of
  // the parallel region it is called in (an orphaned `omp for`).
  void copy(const float* x, float* columns) const;
  // col2im of one plane: dx[b, c] = the sum of its taps' columns over the positions that read
  // each pixel (iy = oy * stride + i * dilation - pad), taps in order, 0 where none does. The
  // column of tap (c, i, j) at output position (oy, ox) of image b is
  // image_columns[tap * tap_step + (oy * OW + ox) * position_step].
  void add_plane(const float* image_columns, int64_t tap_step, int64_t position_step,
                 int64_t b, int64_t c, float* dx) const;
};

// Whether every tensor of node `n` is float32 (what the runtime's own convolution kernels
// compute in), and whether the columns kernels can run it (that, and one group).
bool float32_only(const Node& n);
bool columns_apply(const Node& n);

// A Conv2D (x, w[, bias] -> y) as y' (O x positions) = w (O x taps) columns, for a node
// columns_apply holds for; its scratch is planner/ops/conv_scratch.py's columns_bytes.
KernelPtr columns_conv2d(const Node& n);
// A Conv2DBackpropInput (dy, w -> dx) as dx's columns (positions x taps) = dy' w, summed back
// into dx; as above.
KernelPtr columns_conv2d_backprop_input(const Node& n);
// A Conv2DBackpropInput (dy, w -> dx) or a ConvTranspose2D (x, w -> y, the same sum with x as
// dy) image by image: each image's columns (taps x area) = w' dy_b, summed back into its dx; for
// a node columns_apply holds for, on the plan's `image_columns` layout (planner/ops/
// conv_scratch.py's image_columns_bytes: each thread's columns and regrouped dy).
KernelPtr image_columns_data_gradient(const Node& n);
// A Conv2DBackpropFilter (x, dy -> dw) as dw = dy' columns^T; null where columns_apply does
// not hold or its scratch would exceed `budget` bytes (where oneDNN's GEMM fallback is
// replaced, what that booked: the plan reserved that much).
KernelPtr columns_conv2d_backprop_filter(const Node& n, size_t budget);

}  // namespace planner
