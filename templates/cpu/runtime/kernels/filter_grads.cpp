// The direct float32 depthwise weight gradient of filter_grads.h. It walks the taps of a
// convolution as the columns kernels do (conv_columns.h: first_inside, end_inside).
#include "filter_grads.h"

#include <algorithm>
#include <stdexcept>

#include "conv_columns.h"

namespace planner {
namespace {

// mobilenet_v2's 480 channels of 2x2 maps took 1.1 ms a call on the GEMMs, one per group, on
// the 2-core EPYC (a third of its depthwise work, ~100x the arithmetic). Direct instead: the
// team splits the channels in groups of kLanes (a blocked image's block), a group's channels in
// the vector lanes; each tap sums dy x x over the batch and the output positions whose input
// lies inside the image, in that fixed order per channel, so every thread count and either
// layout give the same bits. (Channel by channel, one scalar sum at a time, the 480-channel
// layer took ~210 us a call on the 2-core AVX-512 Xeon, its blocked images read 16 floats
// apart.)
class DepthwiseFilterGrad : public Kernel {
 public:
  static constexpr int64_t kLanes = 16;

  explicit DepthwiseFilterGrad(const Node& n)
      : x_(n.in[0].id), dy_(n.in[1].id), dw_(n.out[0].id), g_(conv_geometry(n.attrs)),
        x_shape_(n.in[0].shape), dy_shape_(n.in[1].shape), w_shape_(n.out[0].shape),
        xs_(n.in[0].shape, n.in[0].block), ys_(n.in[1].shape, n.in[1].block) {
    if (xs_.block && ys_.block && xs_.block != ys_.block)
      throw std::runtime_error("a depthwise weight gradient's images must share one block");
  }
  std::string impl() const override { return "direct:depthwise"; }
  void run(const Run& r) override {
    const float* x = reinterpret_cast<const float*>(r.ptr[x_]);
    const float* dy = reinterpret_cast<const float*>(r.ptr[dy_]);
    float* dw = r.at<float>(dw_);
    const int64_t batch = x_shape_[0], channels = x_shape_[1], h = x_shape_[2], w = x_shape_[3];
    const int64_t oh = dy_shape_[2], ow = dy_shape_[3], kh = w_shape_[2], kw = w_shape_[3];
    const ConvGeometry g = g_;
    const Planes xs = xs_, ys = ys_;  // plain or channel-blocked: the same walk
    const int64_t x_step = xs.step(), y_step = ys.step();
    // A group's channels: within one block of a blocked image (lanes 1 float apart), or
    // planes apart in a plain one.
    const int64_t group = xs.block ? xs.block : ys.block ? ys.block : kLanes;
    const int64_t x_lane = xs.block ? 1 : xs.area, y_lane = ys.block ? 1 : ys.area;
#pragma omp parallel for schedule(static)
    for (int64_t k = 0; k < (channels + group - 1) / group; ++k) {
      const int64_t c0 = k * group, lanes = std::min(group, channels - c0);
      for (int64_t i = 0; i < kh; ++i) {
        const int64_t row_tap = i * g.dilations[0] - g.pads[0];
        const int64_t y0 = first_inside(row_tap, g.strides[0]);
        const int64_t y1 = end_inside(row_tap, g.strides[0], h, oh);
        for (int64_t j = 0; j < kw; ++j) {
          const int64_t col_tap = j * g.dilations[1] - g.pads[1];
          const int64_t x0 = first_inside(col_tap, g.strides[1]);
          const int64_t x1 = end_inside(col_tap, g.strides[1], w, ow);
          float sum[kLanes] = {};
          for (int64_t b = 0; b < batch; ++b) {
            const float* image = x + xs.at(b, c0);
            const float* grad = dy + ys.at(b, c0);
            for (int64_t oy = y0; oy < y1; ++oy) {
              const int64_t in_row = (oy * g.strides[0] + row_tap) * w + col_tap;
              for (int64_t ox = x0; ox < x1; ++ox) {
                const float* xp = image + (in_row + ox * g.strides[1]) * x_step;
                const float* yp = grad + (oy * ow + ox) * y_step;
#pragma omp simd
                for (int64_t l = 0; l < lanes; ++l) sum[l] += yp[l * y_lane] * xp[l * x_lane];
              }
            }
          }
          for (int64_t l = 0; l < lanes; ++l) dw[((c0 + l) * kh + i) * kw + j] = sum[l];
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
