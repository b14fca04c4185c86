// The columns kernels of conv_columns.h.
#include "conv_columns.h"

#include <algorithm>
#include <atomic>

#include "../fused_relu.h"

namespace planner {

void Columns::copy(const float* image, float* columns) const {
  const int64_t batch = x[0], channels = x[1], h = x[2], w_ = x[3];
  const int64_t oh = y[2], ow = y[3], kh = w[2], kw = w[3];
  const int64_t n_positions = positions();
  const ConvGeometry geo = g;
#pragma omp parallel for schedule(static)
  for (int64_t row = 0; row < channels * kh * kw; ++row) {
    const int64_t c = row / (kh * kw), i = row / kw % kh, j = row % kw;
    const int64_t row_tap = i * geo.dilations[0] - geo.pads[0];
    const int64_t col_tap = j * geo.dilations[1] - geo.pads[1];
    const int64_t y0 = std::min(oh, first_inside(row_tap, geo.strides[0]));
    const int64_t y1 = std::max(y0, end_inside(row_tap, geo.strides[0], h, oh));
    const int64_t x0 = std::min(ow, first_inside(col_tap, geo.strides[1]));
    const int64_t x1 = std::max(x0, end_inside(col_tap, geo.strides[1], w_, ow));
    float* out = columns + row * n_positions;
    std::fill(out, out + n_positions, 0.0f);
    for (int64_t b = 0; b < batch; ++b) {
      const float* plane = image + (b * channels + c) * h * w_;
      for (int64_t oy = y0; oy < y1; ++oy) {
        const float* in_row = plane + (oy * geo.strides[0] + row_tap) * w_ + col_tap;
        float* out_row = out + (b * oh + oy) * ow;
        for (int64_t ox = x0; ox < x1; ++ox) out_row[ox] = in_row[ox * geo.strides[1]];
      }
    }
  }
}

bool float32_only(const Node& n) {
  for (const auto* side : {&n.in, &n.out})
    for (const TensorRef& t : *side)
      if (t.dtype != F32) return false;
  return true;
}

bool columns_apply(const Node& n) {
  return float32_only(n) && conv_geometry(n.attrs).groups == 1;
}

namespace {

// oneDNN's direct kernels run a convolution image by image, a few output pixels per register
// block: on ResNet's last stage (2x2 maps) each image streams the whole weight tensor for four
// positions (a 256x256x3x3 forward at batch 8 took ~1 ms on two threads of the 2-core EPYC).
// Here the batch's columns are copied once and the weights read once, by one GEMM whose
// rows (output channels) are split into fixed blocks of kRows: each block is one
// single-threaded sgemm (oneDNN runs sequentially inside the team's parallel region) on one
// thread, so every thread count computes the same bits, as oneDNN's forward kernels do (a
// schedule variant may run a Conv2D on another count). Each block then writes its rows of y
// (plus the bias) while they are in cache.
class ColumnsConv2D : public Kernel {
 public:
  static constexpr int64_t kRows = 64;

  explicit ColumnsConv2D(const Node& n)
      : x_(n.in[0].id), w_(n.in[1].id), bias_(n.in.size() == 3 ? n.in[2].id : -1),
        y_(n.out[0].id),
        geometry_{n.in[0].shape, n.out[0].shape, n.in[1].shape, conv_geometry(n.attrs)} {
    products_ = align(static_cast<size_t>(geometry_.taps() * geometry_.positions()) * 4);
    bytes_ = products_ + align(static_cast<size_t>(geometry_.w[0] * geometry_.positions()) * 4);
  }
  size_t scratch_bytes() const override { return bytes_; }
  std::string impl() const override { return "direct:columns + sgemm"; }

  void run(const Run& r) override {
    float* columns = reinterpret_cast<float*>(r.scratch);
    float* products = reinterpret_cast<float*>(r.scratch + products_);
    geometry_.copy(r.at<float>(x_), columns);
    const float* w = r.at<float>(w_);
    const float* bias = bias_ >= 0 ? r.at<float>(bias_) : nullptr;
    float* y = r.at<float>(y_);
    const int64_t outs = geometry_.w[0], taps = geometry_.taps(), p = geometry_.positions();
    const int64_t batch = geometry_.y[0], area = geometry_.y[2] * geometry_.y[3];
    const int64_t blocks = (outs + kRows - 1) / kRows;
    std::atomic<int> failed{dnnl_success};
#pragma omp parallel for schedule(static)
    for (int64_t k = 0; k < blocks; ++k) {
      const int64_t first = k * kRows, rows = std::min(kRows, outs - first);
      float* block = products + first * p;
      const dnnl_status_t st = dnnl_sgemm('N', 'N', rows, p, taps, 1.0f, w + first * taps,
                                          taps, columns, p, 0.0f, block, p);
      if (st != dnnl_success) failed = st;
      for (int64_t o = first; o < first + rows; ++o) {
        const float add = bias ? bias[o] : 0.0f;
        const float* from = products + o * p;
        for (int64_t b = 0; b < batch; ++b) {
          float* to = y + (b * outs + o) * area;
          for (int64_t q = 0; q < area; ++q) to[q] = from[b * area + q] + add;
        }
      }
    }
    if (failed != dnnl_success)
      throw std::runtime_error("oneDNN sgemm failed with status " + std::to_string(failed));
  }

 private:
  static size_t align(size_t bytes) { return (bytes + 63) / 64 * 64; }

  int x_, w_, bias_, y_;
  Columns geometry_;
  size_t products_ = 0, bytes_ = 0;
};

}  // namespace

KernelPtr columns_conv2d(const Node& n, size_t budget) {
  if (!columns_apply(n)) return nullptr;
  auto k = std::make_unique<ColumnsConv2D>(n);
  if (k->scratch_bytes() > budget) return nullptr;
  return with_fused_activation(std::move(k), n, "Conv2D");
}

}  // namespace planner
