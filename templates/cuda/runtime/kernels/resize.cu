// Resize and ResizeGrad on the GPU, following planner/ops/resize.py (nearest or bilinear over
// NCHW's H and W; each output a weighted sum of at most 2 x 2 inputs).
//   Resize      y[p, a, b] = sum of x[p, i, j] * wh(a, i) * ww(b, j) over the taps of (a, b)
//   ResizeGrad  dx[p, i, j] = sum of dy[p, a, b] * wh(a, i) * ww(b, j) over the (a, b) reading it
//
// Why it is built this way:
// - The taps are the shared closed-form arithmetic of common/resize.h (the CPU kernel's), on a
//   small struct passed by value: no tables in device memory, nothing allocated.
// - ResizeGrad is a gather, not the CPU's scatter: each dx element finds the output rows and
//   columns whose taps read it (a monotone mapping: one scan of each axis), so there are no
//   atomics and dx is the same bits every step.
#include <cstdint>
#include <string>

#include "../groups.cuh"
#include "resize.h"

namespace planner {
namespace {

// The weight with which output coordinate o reads input index i on one axis (0 when it does
// not), as the CPU kernel's float weights.
__device__ __forceinline__ float tap_weight(const ResizeAxis& a, int64_t o, int64_t i) {
  int64_t i0, i1;
  double w1;
  a.taps(o, &i0, &i1, &w1);
  const float w = static_cast<float>(w1);
  return (i0 == i ? 1.f - w : 0.f) + (i1 == i ? w : 0.f);
}

__global__ void resize_forward(const float* __restrict__ x, float* __restrict__ y,
                               int64_t planes, int64_t oh, int64_t ow, ResizeAxis h,
                               ResizeAxis w) {
  const int64_t total = planes * oh * ow, ih = h.length, iw = w.length;
  for (int64_t k = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; k < total;
       k += int64_t{gridDim.x} * blockDim.x) {
    const int64_t b = k % ow, a = (k / ow) % oh, p = k / (ow * oh);
    int64_t h0, h1, w0, w1i;
    double wh, ww;
    h.taps(a, &h0, &h1, &wh);
    w.taps(b, &w0, &w1i, &ww);
    const float fh = static_cast<float>(wh), fw = static_cast<float>(ww);
    const float* xp = x + p * ih * iw;
    const float top = xp[h0 * iw + w0] * (1.f - fw) + xp[h0 * iw + w1i] * fw;
    const float bottom = xp[h1 * iw + w0] * (1.f - fw) + xp[h1 * iw + w1i] * fw;
    y[k] = top * (1.f - fh) + bottom * fh;
  }
}

// The output range [lo, hi) of an axis whose taps may read input index i (empty: lo == hi).
__device__ void reading(const ResizeAxis& a, int64_t out, int64_t i, int64_t* lo,
                        int64_t* hi) {
  *lo = out;
  *hi = out;
  for (int64_t o = 0; o < out; ++o) {
    int64_t i0, i1;
    double w1;
    a.taps(o, &i0, &i1, &w1);
    if (i0 == i || i1 == i) {
      if (*lo == out) *lo = o;
      *hi = o + 1;
    }
  }
}

__global__ void resize_backward(const float* __restrict__ dy, float* __restrict__ dx,
                                int64_t planes, int64_t oh, int64_t ow, ResizeAxis h,
                                ResizeAxis w) {
  const int64_t ih = h.length, iw = w.length, total = planes * ih * iw;
  for (int64_t k = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; k < total;
       k += int64_t{gridDim.x} * blockDim.x) {
    const int64_t j = k % iw, i = (k / iw) % ih, p = k / (iw * ih);
    int64_t alo, ahi, blo, bhi;
    reading(h, oh, i, &alo, &ahi);
    reading(w, ow, j, &blo, &bhi);
    const float* dyp = dy + p * oh * ow;
    float acc = 0.f;
    for (int64_t a = alo; a < ahi; ++a) {
      const float fh = tap_weight(h, a, i);
      if (fh == 0.f) continue;
      for (int64_t b = blo; b < bhi; ++b) acc += dyp[a * ow + b] * fh * tap_weight(w, b, j);
    }
    dx[k] = acc;
  }
}

class Resize : public Kernel {
 public:
  explicit Resize(const Node& n)
      : grad_(n.attrs.has("input_sizes")), threads_(block_threads(n)), x_(n.in[0].id),
        y_(n.out[0].id) {
    require_f32(n);
    const Shape& small = grad_ ? n.out[0].shape : n.in[0].shape;
    const Shape& big = grad_ ? n.in[0].shape : n.out[0].shape;
    if (small.size() != 4 || big.size() != 4)
      throw std::runtime_error("Resize: tensors must be NCHW");
    planes_ = small[0] * small[1];
    oh_ = big[2];
    ow_ = big[3];
    const std::string mode = n.attrs.s("mode"), coord = n.attrs.s("coordinate_mode"),
                      round = n.attrs.s("nearest_mode");
    h_ = resize_axis(mode, coord, round, n.attrs.f("scale_h"), small[2]);
    w_ = resize_axis(mode, coord, round, n.attrs.f("scale_w"), small[3]);
    const int64_t total = grad_ ? planes_ * small[2] * small[3] : planes_ * oh_ * ow_;
    blocks_ = blocks_for(total, threads_);
    empty_ = total == 0;
  }
  void run(const Run& r) override {
    if (empty_) return;
    if (grad_) {
      resize_backward<<<blocks_, threads_, 0, r.stream>>>(r.at<float>(x_), r.at<float>(y_),
                                                          planes_, oh_, ow_, h_, w_);
      PLANNER_LAUNCHED("ResizeGrad");
      return;
    }
    resize_forward<<<blocks_, threads_, 0, r.stream>>>(r.at<float>(x_), r.at<float>(y_),
                                                       planes_, oh_, ow_, h_, w_);
    PLANNER_LAUNCHED("Resize");
  }

 private:
  bool grad_;
  int threads_;
  int x_, y_;
  int64_t planes_ = 0, oh_ = 1, ow_ = 1;
  ResizeAxis h_, w_;
  unsigned blocks_ = 1;
  bool empty_ = false;
};

KernelPtr resize(const Node& n) { return std::make_unique<Resize>(n); }

}  // namespace

PLANNER_REGISTER_KERNELS(resize) {
  r["Resize"] = resize;
  r["ResizeGrad"] = resize;
}

}  // namespace planner
