// The direct float32 weight gradients of filter_grads.h. Both walk the taps of a
// convolution as the columns kernels do (conv_columns.h: first_inside, end_inside).
#include "filter_grads.h"

#include <algorithm>
#include <cstring>

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
        x_shape_(n.in[0].shape), dy_shape_(n.in[1].shape), w_shape_(n.out[0].shape) {}
  std::string impl() const override { return "direct:depthwise"; }
  void run(const Run& r) override {
    const float* x = reinterpret_cast<const float*>(r.ptr[x_]);
    const float* dy = reinterpret_cast<const float*>(r.ptr[dy_]);
    float* dw = r.at<float>(dw_);
    const int64_t batch = x_shape_[0], channels = x_shape_[1], h = x_shape_[2], w = x_shape_[3];
    const int64_t oh = dy_shape_[2], ow = dy_shape_[3], kh = w_shape_[2], kw = w_shape_[3];
    const ConvGeometry g = g_;
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
            const float* image = x + (b * channels + c) * h * w;
            const float* grad = dy + (b * channels + c) * oh * ow;
            for (int64_t oy = y0; oy < y1; ++oy) {
              const float* in_row = image + (oy * g.strides[0] + row_tap) * w + col_tap;
              const float* dy_row = grad + oy * ow;
              for (int64_t ox = x0; ox < x1; ++ox) sum += dy_row[ox] * in_row[ox * g.strides[1]];
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
};

// ResNet-18's 256x256x3x3 layer on 2x2 maps (batch 8) took 1.2-1.8 ms a call on the GEMMs of
// the 2-core EPYC: one per image, each only OH x OW = 4 deep, the 2.4 MB gradient read and
// written again for every image. Instead the whole batch at once: x's columns (a row of
// N x OH x OW per input channel and tap, zero where the tap reads padding) and dy regrouped
// by output channel (a row of N x OH x OW per channel) are copied into the scratch area, and
// one matmul dw (O x C kh kw) = dy' columns^T sums over the batch and positions (0.5-0.7 ms).
// The matmul reads the columns as its transposed operand, the layout oneDNN's f32 GEMM runs
// fastest. Its bits follow the thread count as oneDNN's own weight gradients do
// (Conv2DBackpropFilter keeps the main schedule's count in every variant).
class Im2colFilterGrad : public DnnlKernel {
 public:
  explicit Im2colFilterGrad(const Node& n)
      : x_(n.in[0].id), dy_(n.in[1].id),
        geometry_{n.in[0].shape, n.in[1].shape, n.out[0].shape, conv_geometry(n.attrs)} {
    const int64_t positions = geometry_.positions(), taps = geometry_.taps();
    const int64_t outs = geometry_.w[0];
    columns_ = temp(static_cast<size_t>(taps * positions) * sizeof(float));
    regrouped_ = temp(static_cast<size_t>(outs * positions) * sizeof(float));
    const memory::desc a({outs, positions}, dt::f32, tag::ab);
    const memory::desc b({positions, taps}, dt::f32, tag::ba);
    const memory::desc c({outs, taps}, dt::f32, tag::ab);
    const dnnl::matmul::primitive_desc pd(n.engine, a, b, c, user_scratchpad());
    add(dnnl::matmul(pd), pd,
        {{DNNL_ARG_SRC, -1, regrouped_}, {DNNL_ARG_WEIGHTS, -1, columns_},
         {DNNL_ARG_DST, n.out[0].id}});
  }
  std::string impl() const override { return "direct:im2col + " + DnnlKernel::impl(); }
  void run(const Run& r) override {
    const float* x = r.at<float>(x_);
    const float* dy = r.at<float>(dy_);
    float* columns = reinterpret_cast<float*>(r.scratch + columns_);
    float* regrouped = reinterpret_cast<float*>(r.scratch + regrouped_);
#pragma omp parallel
    {
      geometry_.copy(x, columns);
      regroup(dy, regrouped);
    }
    run_all(r);
  }

 private:
  // (In the team's parallel region.) regrouped[o][(b, p)] = dy[b, o, p].
  void regroup(const float* dy, float* regrouped) const {
    const Shape& dy_shape = geometry_.y;
    const int64_t batch = dy_shape[0], outs = dy_shape[1], area = dy_shape[2] * dy_shape[3];
#pragma omp for schedule(static)
    for (int64_t o = 0; o < outs; ++o)
      for (int64_t b = 0; b < batch; ++b)
        std::memcpy(regrouped + (o * batch + b) * area, dy + (b * outs + o) * area,
                    static_cast<size_t>(area) * sizeof(float));
  }

  int x_, dy_;
  Columns geometry_;
  int64_t columns_ = 0, regrouped_ = 0;
};

}  // namespace

bool depthwise_float32(const Node& n, int64_t groups) {
  const Shape &x = n.in[0].shape, &w = n.out[0].shape;
  return float32_only(n) && groups > 1 && x[1] == groups && w[0] == groups && w[1] == 1;
}

KernelPtr depthwise_filter_grad(const Node& n) {
  return std::make_unique<DepthwiseFilterGrad>(n);
}

KernelPtr im2col_filter_grad(const Node& n, size_t gemm_scratchpad) {
  if (!columns_apply(n)) return nullptr;
  auto k = std::make_unique<Im2colFilterGrad>(n);
  if (k->scratch_bytes() > gemm_scratchpad) return nullptr;
  return k;
}

}  // namespace planner
