// MaxPool and MaxPoolGrad as plain OpenMP loops over NCHW planes (oneDNN's pooling drops NaN,
// and its backward must first rerun the forward for an argmax workspace the graph does not
// keep: 2-4x PyTorch's time on googlenet's pools).
//
// Both walk a plane's output row by row with the output column innermost: per kernel tap
// (kh, kw), the columns whose tap falls inside the input form one contiguous range, found at
// load, so the inner loop has no bounds checks and vectorizes (stride 1) or strides (stride 2).
// Semantics are the numpy reference's: padding never wins, a NaN in the window gives NaN, and
// the gradient goes to the first maximum in row-major tap order (the first NaN if any).
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "../loops.h"

namespace planner {
namespace {

struct Geometry {
  int64_t planes, ih, iw, oh, ow, kh, kw, sh, sw, dh, dw, pt, pl;
  // per tap column kw: the output columns [lo, hi) whose tap is inside the input
  std::vector<int64_t> col_lo, col_hi;

  Geometry(const Node& n, const Shape& x, const Shape& y) {
    const auto k = n.attrs.ints("kernel"), s = n.attrs.ints("strides"), p = n.attrs.ints("pads");
    const auto d = n.attrs.has("dilations") ? n.attrs.ints("dilations") : std::vector<int64_t>{1, 1};
    planes = x[0] * x[1];
    ih = x[2], iw = x[3], oh = y[2], ow = y[3];
    kh = k[0], kw = k[1], sh = s[0], sw = s[1], dh = d[0], dw = d[1], pt = p[0], pl = p[1];
    for (int64_t t = 0; t < kw; ++t) {
      int64_t lo = 0, hi = ow;
      while (lo < ow && lo * sw - pl + t * dw < 0) ++lo;
      while (hi > lo && (hi - 1) * sw - pl + t * dw >= iw) --hi;
      col_lo.push_back(lo);
      col_hi.push_back(hi);
    }
  }
  // Input row of tap row t for output row r, or -1 outside the input.
  int64_t row(int64_t r, int64_t t) const {
    const int64_t h = r * sh - pt + t * dh;
    return h >= 0 && h < ih ? h : -1;
  }
};

// NaN-propagating max: a NaN, once taken, stays.
inline float nan_max(float m, float v) { return v > m || v != v ? v : m; }

class MaxPool : public Kernel {
 public:
  explicit MaxPool(const Node& n) : x_(n.in[0].id), y_(n.out[0].id), g_(n, n.in[0].shape, n.out[0].shape) {
    require_f32(n);
  }
  void run(const Run& r) override {
    const float* x = r.at<float>(x_);
    float* y = r.at<float>(y_);
    const Geometry& g = g_;
    const float lowest = -std::numeric_limits<float>::infinity();
#pragma omp parallel for collapse(2)
    for (int64_t p = 0; p < g.planes; ++p) {
      for (int64_t orow = 0; orow < g.oh; ++orow) {
        const float* plane = x + p * g.ih * g.iw;
        float* out = y + (p * g.oh + orow) * g.ow;
        std::fill(out, out + g.ow, lowest);
        for (int64_t th = 0; th < g.kh; ++th) {
          const int64_t h = g.row(orow, th);
          if (h < 0) continue;
          const float* in = plane + h * g.iw;
          for (int64_t tw = 0; tw < g.kw; ++tw) {
            const int64_t lo = g.col_lo[tw], hi = g.col_hi[tw], sw = g.sw;
            const float* src = in - g.pl + tw * g.dw;
#pragma omp simd
            for (int64_t c = lo; c < hi; ++c) out[c] = nan_max(out[c], src[c * sw]);
          }
        }
      }
    }
  }

 private:
  int x_, y_;
  Geometry g_;
};

// [dy, x] -> dx. Per output row: the first maximum's input offset for every column (per thread
// buffers in the scratch area), then dy added there; each plane belongs to one thread, so the
// adds of overlapping windows never race.
class MaxPoolGrad : public Kernel {
 public:
  explicit MaxPoolGrad(const Node& n)
      : dy_(n.in[0].id), x_(n.in[1].id), dx_(n.out[0].id), team_(std::max(1, n.threads)),
        g_(n, n.in[1].shape, n.in[0].shape) {
    require_f32(n);
  }
  size_t scratch_bytes() const override {
    return static_cast<size_t>(team_) * g_.ow * (sizeof(float) + sizeof(int64_t));
  }
  void run(const Run& r) override {
    const float* dy = r.at<float>(dy_);
    const float* x = r.at<float>(x_);
    float* dx = r.at<float>(dx_);
    const Geometry& g = g_;
    const int team = std::min(team_, std::max(1, r.threads));
    std::memset(dx, 0, sizeof(float) * g.planes * g.ih * g.iw);
#pragma omp parallel num_threads(team)
    {
      const int t = omp_get_thread_num();
      int64_t* at = reinterpret_cast<int64_t*>(r.scratch) + static_cast<int64_t>(t) * g.ow;
      float* best = reinterpret_cast<float*>(r.scratch + sizeof(int64_t) * team * g.ow) +
                    static_cast<int64_t>(t) * g.ow;
#pragma omp for schedule(static)
      for (int64_t p = 0; p < g.planes; ++p) {
        const float* plane = x + p * g.ih * g.iw;
        float* dplane = dx + p * g.ih * g.iw;
        for (int64_t orow = 0; orow < g.oh; ++orow) {
          std::fill(at, at + g.ow, int64_t{-1});
          for (int64_t th = 0; th < g.kh; ++th) {
            const int64_t h = g.row(orow, th);
            if (h < 0) continue;
            for (int64_t tw = 0; tw < g.kw; ++tw) {
              const int64_t lo = g.col_lo[tw], hi = g.col_hi[tw], sw = g.sw;
              const int64_t base = h * g.iw - g.pl + tw * g.dw;
              const float* src = plane + base;
              for (int64_t c = lo; c < hi; ++c) {
                const float v = src[c * sw];
                // strictly larger keeps the first maximum; a NaN wins once, then stays
                if (at[c] < 0 || v > best[c] || (v != v && best[c] == best[c])) {
                  best[c] = v;
                  at[c] = base + c * sw;
                }
              }
            }
          }
          const float* g_row = dy + (p * g.oh + orow) * g.ow;
          for (int64_t c = 0; c < g.ow; ++c) dplane[at[c]] += g_row[c];
        }
      }
    }
  }

 private:
  int dy_, x_, dx_, team_;
  Geometry g_;
};

KernelPtr max_pool(const Node& n) { return std::make_unique<MaxPool>(n); }
KernelPtr max_pool_grad(const Node& n) { return std::make_unique<MaxPoolGrad>(n); }

}  // namespace

void add_max_pool_kernels(Registry& r) {
  r["MaxPool"] = max_pool;
  r["MaxPoolGrad"] = max_pool_grad;
}

}  // namespace planner
