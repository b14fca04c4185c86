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
// - Non-finite values as PyTorch and the reference: nearest reads (and gathers) its one tap
//   only; linear adds every tap's product on its own, zero weights included, in the reference's
//   order (a row of dy onto a column sum, the rows' i0 terms, then their i1 terms), never one
//   combined weight per cell nor a skipped zero weight: inf * 0 must stay NaN.
#include <cstdint>
#include <string>

#include "../groups.cuh"
#include "resize.h"

namespace planner {
namespace {

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
    const float* xp = x + p * ih * iw;
    if (!h.linear) {  // the one tap: x * 1 + x * 0 would turn an infinity into NaN
      y[k] = xp[h0 * iw + w0];
      continue;
    }
    const float fh = static_cast<float>(wh), fw = static_cast<float>(ww);
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
    // pass 0 adds the rows reading i as their i0, pass 1 those reading it as their i1
    for (int pass = 0; pass < (h.linear ? 2 : 1); ++pass) {
      for (int64_t a = alo; a < ahi; ++a) {
        int64_t h0, h1;
        double wh;
        h.taps(a, &h0, &h1, &wh);
        if ((pass == 0 ? h0 : h1) != i) continue;
        const float* g = dyp + a * ow;
        float col = 0.f;  // dy's row a onto input column j, as the reference's column sum
        for (int64_t b = blo; b < bhi; ++b) {
          int64_t w0, w1i;
          double ww;
          w.taps(b, &w0, &w1i, &ww);
          if (w0 == j) col += w.linear ? g[b] * (1.f - static_cast<float>(ww)) : g[b];
        }
        if (w.linear) {
          for (int64_t b = blo; b < bhi; ++b) {
            int64_t w0, w1i;
            double ww;
            w.taps(b, &w0, &w1i, &ww);
            if (w1i == j) col += g[b] * static_cast<float>(ww);
          }
        }
        const float fh = static_cast<float>(wh);
        acc += h.linear ? col * (pass == 0 ? 1.f - fh : fh) : col;
      }
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
    h_ = resize_axis(mode, coord, round, n.attrs.f("ratio_h"), n.attrs.f("scale_h"), small[2],
                     oh_);
    w_ = resize_axis(mode, coord, round, n.attrs.f("ratio_w"), n.attrs.f("scale_w"), small[3],
                     ow_);
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
