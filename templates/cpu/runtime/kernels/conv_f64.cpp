// Convolutions in float64 (Conv2D, its data and filter gradients, ConvTranspose2D): a float64
// model with a convolution through either torch door (a physics-informed network's conv
// front). oneDNN 3.2's CPU convolutions have no f64, so each is im2col and BLAS's dgemm from
// the scipy-openblas32 wheel (as kernels/matmul_f64.cpp), every sum PyTorch's float64 sum of
// products up to its order (planner/ops/conv.py's references, torch's slow_conv2d).
//
// Determinism (matmul_f64.cpp's rule, docs/executor.md "Busy machines"): every dgemm runs on
// one thread (openblas_set_num_threads(1)), and the work is cut into pieces fixed by the
// geometry, never by the team, which shares the pieces out: every thread count gives the same
// bits. The pieces:
//   - Conv2D: per image and group, the output rows cut into at most kMaxPieces parts of at
//     least kPiece multiply-adds each; a part is its columns (taps x positions) and one dgemm.
//   - data gradient (Conv2DBackpropInput, ConvTranspose2D: the same sum with x as dy): per
//     image and group, the columns w_g' dy_bg (one dgemm) summed back into dx's planes (col2im,
//     taps in order).
//   - filter gradient: per group, the taps cut into parts as above; a part accumulates its
//     dw columns over the images in order (dgemm with beta 1 after the first image).
// Each thread takes its columns from its own slice of the op's scratch: threads x (taps x OH x
// OW) doubles, planner/ops/conv_scratch.py's float64 rule.
//
// Layout: plain NCHW (float64 tensors are never channel-blocked: planner/step/blocked.py),
// weights OIHW (a ConvTranspose2D's IOHW is its Conv2D's OIHW). A Conv2D's bias input (a graph
// written so: planner/frontend/passes/fold_conv_bias.py folds float32 convolutions only) is
// each output's first term, the products added to it; no folded activation. A `layout`
// attribute (a float32 decision) changes nothing here.
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>

#include "conv.h"
#include "../lapack.h"
#include "../loops.h"
#include "conv_f64.h"

namespace planner {
namespace {

constexpr int64_t kPiece = 1 << 16, kMaxPieces = 16;

// The convolution from image x (N, C, H, W) to output y (N, O, OH, OW) with weights
// (O, C / groups, kh, kw), whichever tensor of the op holds each.
struct Geometry {
  int64_t batch, channels, height, width, outs, out_h, out_w, kh, kw, groups;
  int64_t sh, sw, dh, dw, pt, pl;
  int64_t cg() const { return channels / groups; }
  int64_t og() const { return outs / groups; }
  int64_t taps() const { return cg() * kh * kw; }
  int64_t area() const { return out_h * out_w; }
  int64_t image_area() const { return height * width; }
  // One thread's columns: at most every tap at every output position of one image.
  size_t thread_bytes() const {
    return static_cast<size_t>((taps() * area() * 8 + 63) / 64 * 64);
  }
};

int blas_int(int64_t v) {
  if (v < 0 || v > std::numeric_limits<int>::max())
    throw std::runtime_error("convolution in float64: a size beyond BLAS's 32-bit integers");
  return static_cast<int>(v);
}

Geometry geometry(const Node& n, const TensorRef& x, const TensorRef& w, const TensorRef& y) {
  for (const auto* side : {&n.in, &n.out})
    for (const TensorRef& t : *side) {
      if (t.dtype != F64) throw std::runtime_error("convolution: float64 operands and result");
      if (t.block) throw std::runtime_error("convolution in float64: plain (NCHW) tensors only");
    }
  const ConvGeometry c = conv_geometry(n.attrs);
  if (c.activation != kActNone)
    throw std::runtime_error("convolution in float64: no folded activation (float32's alone)");
  if (x.shape.size() != 4 || w.shape.size() != 4 || y.shape.size() != 4)
    throw std::runtime_error("convolution in float64: 4-D image, weights and output");
  Geometry g{x.shape[0], x.shape[1], x.shape[2], x.shape[3], y.shape[1], y.shape[2],
             y.shape[3], w.shape[2], w.shape[3], c.groups, c.strides[0], c.strides[1],
             c.dilations[0], c.dilations[1], c.pads[0], c.pads[1]};
  if (g.channels % g.groups || g.outs % g.groups || w.shape[0] != g.outs ||
      w.shape[1] != g.cg())
    throw std::runtime_error("convolution in float64: weights do not fit the channels");
  for (int64_t v : {g.taps(), g.area(), g.og(), g.image_area()}) blas_int(v);
  return g;
}

// cols[t - t0][(oy - oy0) * OW + ox] = x[b, g * C/G + c, oy * sh + i * dh - pt, ox * sw + j *
// dw - pl] for tap t = (c, i, j) in [t0, t1) and output rows [oy0, oy1); 0 where it reads the
// padding (which the sum then skips: a product with 0 adds nothing but a NaN weight's NaN).
void im2col(const Geometry& g, const double* x, int64_t b, int64_t group, int64_t t0, int64_t t1,
            int64_t oy0, int64_t oy1, double* cols) {
  const int64_t positions = (oy1 - oy0) * g.out_w, window = g.kh * g.kw;
  for (int64_t t = t0; t < t1; ++t) {
    const int64_t c = t / window, i = (t / g.kw) % g.kh, j = t % g.kw;
    const double* plane = x + (b * g.channels + group * g.cg() + c) * g.image_area();
    double* row = cols + (t - t0) * positions;
    for (int64_t oy = oy0; oy < oy1; ++oy) {
      double* out = row + (oy - oy0) * g.out_w;
      const int64_t iy = oy * g.sh + i * g.dh - g.pt;
      if (iy < 0 || iy >= g.height) {
        std::fill(out, out + g.out_w, 0.0);
        continue;
      }
      const double* line = plane + iy * g.width;
      for (int64_t ox = 0; ox < g.out_w; ++ox) {
        const int64_t ix = ox * g.sw + j * g.dw - g.pl;
        out[ox] = ix >= 0 && ix < g.width ? line[ix] : 0.0;
      }
    }
  }
}

// col2im of one image and group: dx's planes = the sum of their taps' columns (taps x OH OW)
// over the positions that read each pixel, taps in order; 0 where none does.
void col2im(const Geometry& g, const double* cols, int64_t b, int64_t group, double* dx) {
  const int64_t window = g.kh * g.kw, area = g.area();
  for (int64_t c = 0; c < g.cg(); ++c) {
    double* plane = dx + (b * g.channels + group * g.cg() + c) * g.image_area();
    std::fill(plane, plane + g.image_area(), 0.0);
    for (int64_t k = 0; k < window; ++k) {
      const int64_t i = k / g.kw, j = k % g.kw;
      const double* row = cols + (c * window + k) * area;
      for (int64_t oy = 0; oy < g.out_h; ++oy) {
        const int64_t iy = oy * g.sh + i * g.dh - g.pt;
        if (iy < 0 || iy >= g.height) continue;
        for (int64_t ox = 0; ox < g.out_w; ++ox) {
          const int64_t ix = ox * g.sw + j * g.dw - g.pl;
          if (ix >= 0 && ix < g.width) plane[iy * g.width + ix] += row[oy * g.out_w + ox];
        }
      }
    }
  }
}

// Column-major C (m x n, ldc) = op(A) op(B) + beta C, one thread.
void dgemm(char ta, char tb, int64_t m, int64_t n, int64_t k, const double* a, int64_t lda,
           const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  const int mm = blas_int(m), nn = blas_int(n), kk = blas_int(k), la = blas_int(lda),
            lb = blas_int(ldb), lc = blas_int(ldc);
  const double one = 1.0;
  PLANNER_LAPACK(dgemm)(&ta, &tb, &mm, &nn, &kk, &one, a, &la, b, &lb, &beta, c, &lc, 1, 1);
}

// A number of parts fixed by the work (at most kMaxPieces and `most`, each >= kPiece).
int64_t parts_of(int64_t work, int64_t most) {
  return std::max<int64_t>(1, std::min({kMaxPieces, most, work / kPiece}));
}

// What the three kernels share: the geometry, the tensors, the team and the scratch.
class ConvF64 : public Kernel {
 public:
  ConvF64(const Node& n, const Geometry& g) : g_(g), threads_(std::max(1, n.threads)) {
    PLANNER_LAPACK_JOIN(PLANNER_LAPACK_PREFIX, openblas_set_num_threads)(1);
  }
  std::string impl() const override { return "im2col + blas:dgemm"; }
  size_t scratch_bytes() const override { return threads_ * g_.thread_bytes(); }

 protected:
  // The team for `tasks` pieces of `work` multiply-adds in all: the plan's threads, one under
  // the grain.
  int team(const Run& r, int64_t tasks, int64_t work) const {
    if (work < kGrain) return 1;
    return static_cast<int>(
        std::max<int64_t>(1, std::min<int64_t>(tasks, std::min(r.threads, threads_))));
  }
  double* columns(const Run& r) const {
    return reinterpret_cast<double*>(r.scratch + omp_get_thread_num() * g_.thread_bytes());
  }

  Geometry g_;
  int threads_;
};

// Conv2D [x, w, bias?] -> y: per (image, group, rows part) y_part' (positions x O/G) =
// columns' w_g' (+ the bias, each row of y_part filled with it first).
class Conv2DF64 : public ConvF64 {
 public:
  explicit Conv2DF64(const Node& n)
      : ConvF64(n, geometry(n, n.in[0], n.in[1], n.out[0])),
        x_(n.in[0].id), w_(n.in[1].id), bias_(n.in.size() > 2 ? n.in[2].id : -1),
        y_(n.out[0].id) {
    parts_ = parts_of(g_.area() * g_.og() * g_.taps(), g_.out_h);
  }
  void run(const Run& r) override {
    const double* x = r.at<double>(x_);
    const double* w = r.at<double>(w_);
    const double* bias = bias_ >= 0 ? r.at<double>(bias_) : nullptr;
    double* y = r.at<double>(y_);
    const int64_t parts = parts_, tasks = g_.batch * g_.groups * parts;
    const int nt = team(r, tasks, g_.batch * g_.outs * g_.area() * g_.taps());
#pragma omp parallel for schedule(static) num_threads(nt) if(nt > 1)
    for (int64_t task = 0; task < tasks; ++task) {
      const int64_t part = task % parts, group = (task / parts) % g_.groups;
      const int64_t b = task / parts / g_.groups;
      const int64_t oy0 = g_.out_h * part / parts, oy1 = g_.out_h * (part + 1) / parts;
      const int64_t positions = (oy1 - oy0) * g_.out_w;
      if (positions == 0) continue;
      double* cols = columns(r);
      double* out = y + (b * g_.outs + group * g_.og()) * g_.area() + oy0 * g_.out_w;
      if (bias)
        for (int64_t o = 0; o < g_.og(); ++o)
          std::fill_n(out + o * g_.area(), positions, bias[group * g_.og() + o]);
      im2col(g_, x, b, group, 0, g_.taps(), oy0, oy1, cols);
      dgemm('N', 'N', positions, g_.og(), g_.taps(), cols, positions,
            w + group * g_.og() * g_.taps(), g_.taps(), bias ? 1.0 : 0.0, out, g_.area());
    }
  }

 private:
  int x_, w_, bias_, y_;
  int64_t parts_ = 1;
};

// The data gradient [dy, w] -> dx (Conv2DBackpropInput; ConvTranspose2D [x, w] -> y is the
// same with x as dy): per (image, group) columns (taps x OH OW) = w_g' dy_bg, then col2im.
class DataGradF64 : public ConvF64 {
 public:
  explicit DataGradF64(const Node& n)
      : ConvF64(n, geometry(n, n.out[0], n.in[1], n.in[0])),
        dy_(n.in[0].id), w_(n.in[1].id), dx_(n.out[0].id) {}
  void run(const Run& r) override {
    const double* dy = r.at<double>(dy_);
    const double* w = r.at<double>(w_);
    double* dx = r.at<double>(dx_);
    const int64_t tasks = g_.batch * g_.groups;
    const int nt = team(r, tasks, g_.batch * g_.outs * g_.area() * g_.taps());
#pragma omp parallel for schedule(static) num_threads(nt) if(nt > 1)
    for (int64_t task = 0; task < tasks; ++task) {
      const int64_t group = task % g_.groups, b = task / g_.groups;
      double* cols = columns(r);
      // column-major: cols (OH OW x taps) = dy_bg (OH OW x O/G) w_g (O/G x taps)
      dgemm('N', 'T', g_.area(), g_.taps(), g_.og(),
            dy + (b * g_.outs + group * g_.og()) * g_.area(), g_.area(),
            w + group * g_.og() * g_.taps(), g_.taps(), 0.0, cols, g_.area());
      col2im(g_, cols, b, group, dx);
    }
  }

 private:
  int dy_, w_, dx_;
};

// Conv2DBackpropFilter [x, dy] -> dw: per (group, taps part), dw_g[:, part] = the sum over the
// images, in order, of dy_bg columns_b[part]'.
class FilterGradF64 : public ConvF64 {
 public:
  explicit FilterGradF64(const Node& n)
      : ConvF64(n, geometry(n, n.in[0], n.out[0], n.in[1])),
        x_(n.in[0].id), dy_(n.in[1].id), dw_(n.out[0].id) {
    parts_ = parts_of(g_.batch * g_.area() * g_.og() * g_.taps(), g_.taps());
  }
  void run(const Run& r) override {
    const double* x = r.at<double>(x_);
    const double* dy = r.at<double>(dy_);
    double* dw = r.at<double>(dw_);
    const int64_t parts = parts_, taps = g_.taps(), tasks = g_.groups * parts;
    if (g_.batch == 0 || g_.area() == 0) {  // no product: the sum is 0, as torch's
      std::fill(dw, dw + g_.outs * taps, 0.0);
      return;
    }
    const int nt = team(r, tasks, g_.batch * g_.outs * g_.area() * taps);
#pragma omp parallel for schedule(static) num_threads(nt) if(nt > 1)
    for (int64_t task = 0; task < tasks; ++task) {
      const int64_t part = task % parts, group = task / parts;
      const int64_t t0 = taps * part / parts, t1 = taps * (part + 1) / parts;
      if (t1 == t0) continue;
      double* cols = columns(r);
      for (int64_t b = 0; b < g_.batch; ++b) {
        im2col(g_, x, b, group, t0, t1, 0, g_.out_h, cols);
        // column-major: dw_g[:, t0:t1]' (t1-t0 x O/G) = cols (t1-t0 x OH OW) dy_bg'
        dgemm('T', 'N', t1 - t0, g_.og(), g_.area(), cols, g_.area(),
              dy + (b * g_.outs + group * g_.og()) * g_.area(), g_.area(), b ? 1.0 : 0.0,
              dw + group * g_.og() * taps + t0, taps);
      }
    }
  }

 private:
  int x_, dy_, dw_;
  int64_t parts_ = 1;
};

}  // namespace

KernelPtr conv2d_f64(const Node& n) { return std::make_unique<Conv2DF64>(n); }
KernelPtr conv2d_backprop_input_f64(const Node& n) { return std::make_unique<DataGradF64>(n); }
KernelPtr conv2d_backprop_filter_f64(const Node& n) {
  return std::make_unique<FilterGradF64>(n);
}
KernelPtr conv_transpose2d_f64(const Node& n) { return std::make_unique<DataGradF64>(n); }

}  // namespace planner
