// The direct float32 depthwise weight gradient of filter_grads.h. It walks the taps of a
// convolution as the columns kernels do (conv_columns.h: first_inside, end_inside).
#include "filter_grads.h"

#include <algorithm>

#include "conv_columns.h"

namespace planner {
namespace {

// mobilenet_v2's 480 channels of 2x2 maps took 1.1 ms a call on the GEMMs, one per group, on
// the 2-core EPYC (a third of its depthwise work, ~100x the arithmetic). Direct instead: the
// team splits the channels; each tap sums dy x x over the batch and the output positions whose
// input lies inside the image, in that fixed order, so every thread count gives the same bits.
class DepthwiseFilterGrad : public Kernel {
 public:
  explicit DepthwiseFilterGrad(const Node& n)
      : x_(n.in[0].id), dy_(n.in[1].id), dw_(n.out[0].id), g_(conv_geometry(n.attrs)),
        x_shape_(n.in[0].shape), dy_shape_(n.in[1].shape), w_shape_(n.out[0].shape),
        xs_(n.in[0].shape, n.in[0].block), ys_(n.in[1].shape, n.in[1].block) {}
  std::string impl() const override { return "direct:depthwise"; }
  void run(const Run& r) override {
    const float* x = reinterpret_cast<const float*>(r.ptr[x_]);
    const float* dy = reinterpret_cast<const float*>(r.ptr[dy_]);
    float* dw = r.at<float>(dw_);
    const int64_t batch = x_shape_[0], channels = x_shape_[1], h = x_shape_[2], w = x_shape_[3];
    const int64_t oh = dy_shape_[2], ow = dy_shape_[3], kh = w_shape_[2], kw = w_shape_[3];
    const ConvGeometry g = g_;
    const Planes xs = xs_, ys = ys_;  // plain or channel-blocked: the same walk
    const int64_t x_step = xs.step(), y_step = ys.step(), across = g.strides[1] * x_step;
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < channels; ++c) {
      for (int64_t i = 0; i < kh; ++i) {
        const int64_t row_tap = i * g.dilations[0] - g.pads[0];
        const int64_t y0 = first_inside(row_tap, g.strides[0]);
        const int64_t y1 = end_inside(row_tap, g.strides[0], h, oh);
        for (int64_t j = 0; j < kw; ++j) {
          const int64_t col_tap = j * g.dilations[1] - g.pads[1];
          const int64_t x0 = first_inside(col_tap, g.strides[1]);
          const int64_t x1 = end_inside(col_tap, g.strides[1], w, ow);
          float sum = 0.0f;
          for (int64_t b = 0; b < batch; ++b) {
            const float* image = x + xs.at(b, c);
            const float* grad = dy + ys.at(b, c);
            for (int64_t oy = y0; oy < y1; ++oy) {
              const float* in_row = image + ((oy * g.strides[0] + row_tap) * w + col_tap) * x_step;
              const float* dy_row = grad + oy * ow * y_step;
              for (int64_t ox = x0; ox < x1; ++ox)
                sum += dy_row[ox * y_step] * in_row[ox * across];
            }
          }
          dw[(c * kh + i) * kw + j] = sum;
        }
      }
    }
  }

 private:
  int x_, dy_, dw_;
  ConvGeometry g_;
  Shape x_shape_, dy_shape_, w_shape_;
  Planes xs_, ys_;
};

}  // namespace

bool depthwise_float32(const Node& n, int64_t groups) {
  const Shape &x = n.in[0].shape, &w = n.out[0].shape;
  return float32_only(n) && groups > 1 && x[1] == groups && w[0] == groups && w[1] == 1;
}

KernelPtr depthwise_filter_grad(const Node& n) {
  return std::make_unique<DepthwiseFilterGrad>(n);
}

}  // namespace planner
