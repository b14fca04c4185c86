// Resize [x (N,C,H,W)] -> y (N,C,OH,OW) and ResizeGrad [dy] -> dx, nearest or bilinear
// (planner/ops/resize.py): each output is a weighted sum of at most 2 x 2 inputs, the taps of
// each axis computed once at load (common/resize.h). OpenMP over the N*C planes; the gradient
// scatters each dy onto the taps it was read from, within its own plane (no races), in the
// reference's order: a row of dy onto a column sum, then that onto the rows of dx.
// Non-finite values as PyTorch (and the reference): nearest reads and scatters its one tap
// only; linear computes every tap's product, zero weights included (inf * 0 = NaN).
#include <omp.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "../loops.h"
#include "resize.h"

namespace planner {
namespace {

struct Taps {
  std::vector<int64_t> i0, i1;
  std::vector<float> w1;
  Taps(const ResizeAxis& a, int64_t out) : i0(out), i1(out), w1(out) {
    for (int64_t o = 0; o < out; ++o) {
      double w;
      a.taps(o, &i0[o], &i1[o], &w);
      w1[o] = static_cast<float>(w);  // the reference's weights are in the input's dtype
    }
  }
};

class Resize : public Kernel {
 public:
  explicit Resize(const Node& n)
      : grad_(n.attrs.has("input_sizes")), x_(n.in[0].id), y_(n.out[0].id) {
    require_f32(n);
    const Shape& small = grad_ ? n.out[0].shape : n.in[0].shape;  // the input side
    const Shape& big = grad_ ? n.in[0].shape : n.out[0].shape;    // the output side
    planes_ = small[0] * small[1];
    ih_ = small[2], iw_ = small[3], oh_ = big[2], ow_ = big[3];
    const std::string mode = n.attrs.s("mode"), coord = n.attrs.s("coordinate_mode"),
                      round = n.attrs.s("nearest_mode");
    nearest_ = mode == "nearest";
    h_ = std::make_unique<Taps>(resize_axis(mode, coord, round, n.attrs.f("ratio_h"),
                                            n.attrs.f("scale_h"), ih_, oh_), oh_);
    w_ = std::make_unique<Taps>(resize_axis(mode, coord, round, n.attrs.f("ratio_w"),
                                            n.attrs.f("scale_w"), iw_, ow_), ow_);
  }
  void run(const Run& r) override {
    const Taps &h = *h_, &w = *w_;
    const int64_t ih = ih_, iw = iw_, oh = oh_, ow = ow_;
    const bool nearest = nearest_;
    if (!grad_) {
      const float* x = r.at<float>(x_);
      float* y = r.at<float>(y_);
#pragma omp parallel for
      for (int64_t p = 0; p < planes_; ++p) {
        const float* xp = x + p * ih * iw;
        float* yp = y + p * oh * ow;
        for (int64_t a = 0; a < oh; ++a) {
          const float* r0 = xp + h.i0[a] * iw;
          const float* r1 = xp + h.i1[a] * iw;
          const float wh = h.w1[a];
          if (nearest) {  // the one tap: x * 1 + x * 0 would turn an infinity into NaN
            for (int64_t b = 0; b < ow; ++b) yp[a * ow + b] = r0[w.i0[b]];
            continue;
          }
          for (int64_t b = 0; b < ow; ++b) {
            const float ww = w.w1[b];
            const float top = r0[w.i0[b]] * (1 - ww) + r0[w.i1[b]] * ww;
            const float bottom = r1[w.i0[b]] * (1 - ww) + r1[w.i1[b]] * ww;
            yp[a * ow + b] = top * (1 - wh) + bottom * wh;
          }
        }
      }
      return;
    }
    const float* dy = r.at<float>(x_);
    float* dx = r.at<float>(y_);
#pragma omp parallel for
    for (int64_t p = 0; p < planes_; ++p) {
      const float* dyp = dy + p * oh * ow;
      float* dxp = dx + p * ih * iw;
      std::fill(dxp, dxp + ih * iw, 0.f);
      std::vector<float> col(iw);
      for (int64_t a = 0; a < oh; ++a) {
        const float* g = dyp + a * ow;
        float* r0 = dxp + h.i0[a] * iw;
        std::fill(col.begin(), col.end(), 0.f);
        if (nearest) {  // each dy added once onto its one tap
          for (int64_t b = 0; b < ow; ++b) col[w.i0[b]] += g[b];
          for (int64_t j = 0; j < iw; ++j) r0[j] += col[j];
          continue;
        }
        for (int64_t b = 0; b < ow; ++b) {
          const float ww = w.w1[b];
          col[w.i0[b]] += g[b] * (1 - ww);
        }
        for (int64_t b = 0; b < ow; ++b) col[w.i1[b]] += g[b] * w.w1[b];
        float* r1 = dxp + h.i1[a] * iw;
        const float wh = h.w1[a];
        for (int64_t j = 0; j < iw; ++j) r0[j] += col[j] * (1 - wh);
        for (int64_t j = 0; j < iw; ++j) r1[j] += col[j] * wh;
      }
    }
  }

 private:
  bool grad_, nearest_ = false;
  int x_, y_;
  int64_t planes_ = 0, ih_ = 1, iw_ = 1, oh_ = 1, ow_ = 1;
  std::unique_ptr<Taps> h_, w_;
};

KernelPtr resize(const Node& n) { return std::make_unique<Resize>(n); }

}  // namespace

PLANNER_REGISTER_KERNELS(resize) {
  r["Resize"] = resize;
  r["ResizeGrad"] = resize;
}

}  // namespace planner
