// MaxPool and MaxPoolGrad as plain OpenMP loops (oneDNN's pooling drops NaN, and its backward
// must first rerun the forward for an argmax workspace the graph does not keep: 2-4x PyTorch's
// time on googlenet's pools). Semantics are the numpy reference's: padding never wins, a NaN in
// the window gives NaN, and the gradient goes to the first maximum in row-major tap order (the
// first NaN if any).
//
// Three loop orders, chosen at load by the layout and the output width:
//   blocked           an image the step keeps channel-blocked (TensorRef::block: (N, C/B, H, W,
//                     B), planner/step/blocked.py) is channels-last already, B channels at a
//                     time: the channels loops run on it in place, each (sample, block) as an
//                     image of B channels, no transposes (ResNet's stem pool: its gradient took
//                     1.2 ms a step at batch 32 on the rows loops, whose stride-2 taps gather);
//   rows (ow >= 16)   NCHW planes, output row by row with the column innermost: per kernel tap,
//                     the columns whose tap is inside the input form one contiguous range found
//                     at load, so the inner loop has no bounds checks and vectorizes (stride 1)
//                     or strides (stride 2);
//   channels (small maps, many channels: googlenet's 14x14 and 7x7 stages) x (and dy) are
//                     transposed to NHWC in the scratch area, the window loop runs with the
//                     channel innermost (contiguous, vectorized), and the result is transposed
//                     back; a 7-wide row would leave the vector units idle.
// Every order visits one output's taps in the same row-major order and adds a dx element's
// contributions in output order, so all three give the same bits.
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <stdexcept>

#include "../dnnl_kernel.h"
#include "../loops.h"
#include "pool.h"
#include "pool_f64.h"

namespace planner {
namespace {

constexpr int64_t kWideRow = 16;
constexpr int64_t kChannelBlock = 64;  // channels per task in the channels-last backward
constexpr float kLowest = -std::numeric_limits<float>::infinity();
constexpr const char* kAlike =
    "a max pool's images must be held alike (all blocked or all plain)";

struct MaxPoolGeometry {
  int64_t n, c, ih, iw, oh, ow, kh, kw, sh, sw, dh, dw, pt, pl;
  // per tap column kw: the output columns [lo, hi) whose tap is inside the input
  std::vector<int64_t> col_lo, col_hi;

  int64_t block;  // channels per block of a blocked x and y, 0: plain

  MaxPoolGeometry(const Node& node, const TensorRef& x_ref, const TensorRef& y_ref)
      : block(x_ref.block) {
    const Shape &x = x_ref.shape, &y = y_ref.shape;
    if (y_ref.block != block || (block && x_ref.shape[1] % block))
      throw std::runtime_error(kAlike);
    const PoolWindow w = pool_window(node.attrs, x, y);  // common/pool.h
    n = x[0], c = x[1], ih = x[2], iw = x[3], oh = y[2], ow = y[3];
    kh = w.kernel[0], kw = w.kernel[1], sh = w.stride[0], sw = w.stride[1];
    dh = w.dilation[0], dw = w.dilation[1], pt = w.pad_begin[0], pl = w.pad_begin[1];
    for (int64_t t = 0; t < kw; ++t) {
      int64_t lo = 0, hi = ow;
      while (lo < ow && lo * sw - pl + t * dw < 0) ++lo;
      while (hi > lo && (hi - 1) * sw - pl + t * dw >= iw) --hi;
      col_lo.push_back(lo);
      col_hi.push_back(hi);
    }
  }
  // The transposed channels-last loops (plain small maps); a blocked image needs none.
  bool channels_last() const { return !block && ow < kWideRow; }
  bool rows() const { return !block && ow >= kWideRow; }
  // The channels loops' images: (samples, area, channels) as they lie in memory.
  int64_t samples() const { return block ? n * (c / block) : n; }
  int64_t lanes() const { return block ? block : c; }
  int64_t in_area() const { return ih * iw; }
  int64_t out_area() const { return oh * ow; }
  // Input row of tap row t for output row r, or -1 outside the input.
  int64_t row(int64_t r, int64_t t) const {
    const int64_t h = r * sh - pt + t * dh;
    return h >= 0 && h < ih ? h : -1;
  }
  int64_t col(int64_t q, int64_t t) const {
    const int64_t w = q * sw - pl + t * dw;
    return w >= 0 && w < iw ? w : -1;
  }
};

// NaN-propagating max: a NaN, once taken, stays.
inline float nan_max(float m, float v) { return v > m || v != v ? v : m; }
// Argmax step: strictly larger keeps the first maximum; a NaN wins once, then stays; the first
// tap inside the input is taken whatever it holds (-inf too).
inline bool takes(float v, float best, bool first) {
  return (v > best) | ((v != v) & (best == best)) | first;
}

// (n, c, s) <-> (n, s, c) for s in [0, area): NCHW <-> NHWC.
void to_channels_last(const float* src, float* dst, int64_t n, int64_t c, int64_t area) {
#pragma omp parallel for collapse(2)
  for (int64_t b = 0; b < n; ++b)
    for (int64_t s = 0; s < area; ++s) {
      const float* from = src + b * c * area + s;
      float* to = dst + (b * area + s) * c;
      for (int64_t k = 0; k < c; ++k) to[k] = from[k * area];
    }
}

void to_channels_first(const float* src, float* dst, int64_t n, int64_t c, int64_t area) {
#pragma omp parallel for collapse(2)
  for (int64_t b = 0; b < n; ++b)
    for (int64_t k = 0; k < c; ++k) {
      const float* from = src + b * area * c + k;
      float* to = dst + (b * c + k) * area;
      for (int64_t s = 0; s < area; ++s) to[s] = from[s * c];
    }
}

class MaxPool : public Kernel {
 public:
  explicit MaxPool(const Node& n)
      : x_(n.in[0].id), y_(n.out[0].id), g_(n, n.in[0], n.out[0]) {
    require_f32(n);
  }
  size_t scratch_bytes() const override {
    if (!g_.channels_last()) return 0;
    return sizeof(float) * g_.n * g_.c * (g_.in_area() + g_.out_area()) + 64;
  }
  void run(const Run& r) override {
    const float* x = r.at<float>(x_);
    float* y = r.at<float>(y_);
    if (g_.rows()) return rows(x, y);
    if (!g_.channels_last()) return channels(x, y);
    float* xt = reinterpret_cast<float*>(r.scratch);
    float* yt = xt + g_.n * g_.c * g_.in_area();
    to_channels_last(x, xt, g_.n, g_.c, g_.in_area());
    channels(xt, yt);
    to_channels_first(yt, y, g_.n, g_.c, g_.out_area());
  }

 private:
  void rows(const float* x, float* y) const {
    const MaxPoolGeometry& g = g_;
#pragma omp parallel for collapse(2)
    for (int64_t p = 0; p < g.n * g.c; ++p) {
      for (int64_t orow = 0; orow < g.oh; ++orow) {
        const float* plane = x + p * g.in_area();
        float* out = y + (p * g.oh + orow) * g.ow;
        std::fill(out, out + g.ow, kLowest);
        for (int64_t th = 0; th < g.kh; ++th) {
          const int64_t h = g.row(orow, th);
          if (h < 0) continue;
          for (int64_t tw = 0; tw < g.kw; ++tw) {
            const int64_t lo = g.col_lo[tw], hi = g.col_hi[tw], sw = g.sw;
            const float* src = plane + h * g.iw - g.pl + tw * g.dw;
#pragma omp simd
            for (int64_t q = lo; q < hi; ++q) out[q] = nan_max(out[q], src[q * sw]);
          }
        }
      }
    }
  }
  void channels(const float* xt, float* yt) const {
    const MaxPoolGeometry& g = g_;
    const int64_t c = g.lanes();
#pragma omp parallel for collapse(2)
    for (int64_t b = 0; b < g.samples(); ++b) {
      for (int64_t o = 0; o < g.out_area(); ++o) {
        const int64_t orow = o / g.ow, q = o % g.ow;
        float* out = yt + (b * g.out_area() + o) * c;
        std::fill(out, out + c, kLowest);
        for (int64_t th = 0; th < g.kh; ++th) {
          const int64_t h = g.row(orow, th);
          if (h < 0) continue;
          for (int64_t tw = 0; tw < g.kw; ++tw) {
            const int64_t w = g.col(q, tw);
            if (w < 0) continue;
            const float* src = xt + ((b * g.ih + h) * g.iw + w) * c;
#pragma omp simd
            for (int64_t k = 0; k < c; ++k) out[k] = nan_max(out[k], src[k]);
          }
        }
      }
    }
  }

  int x_, y_;
  MaxPoolGeometry g_;
};

// [dy, x] -> dx: per output, the first maximum's position, then dy added there. Each task owns
// whole planes (rows) or a block of channels of one sample (channels), so the adds of
// overlapping windows never race; it zeroes its part of dx first.
class MaxPoolGrad : public Kernel {
 public:
  explicit MaxPoolGrad(const Node& n)
      : dy_(n.in[0].id), x_(n.in[1].id), dx_(n.out[0].id), team_(std::max(1, n.threads)),
        g_(n, n.in[1], n.in[0]) {
    require_f32(n);
    if (n.out[0].block != g_.block) throw std::runtime_error(kAlike);
    if (g_.in_area() >= (int64_t{1} << 31)) throw std::runtime_error("MaxPoolGrad: plane too large");
  }
  // rows: per thread, the best value and its offset for one output row; channels: x, dy and
  // dx channels-last, then per thread a block's best values and positions.
  // Per-thread buffers start on their own cache line: threads writing neighbouring slices of
  // one line would share it back and forth on every tap (2 threads ran slower than 1).
  int64_t per_thread() const {
    return g_.rows() ? (g_.ow + 15) / 16 * 16 : kChannelBlock;
  }
  size_t scratch_bytes() const override {
    const size_t per_thread = this->per_thread();
    size_t bytes = team_ * per_thread * (sizeof(float) + sizeof(int32_t)) + 64;
    if (g_.channels_last())
      bytes += sizeof(float) * g_.n * g_.c * (2 * g_.in_area() + g_.out_area());
    return bytes;
  }
  void run(const Run& r) override {
    const float* dy = r.at<float>(dy_);
    const float* x = r.at<float>(x_);
    float* dx = r.at<float>(dx_);
    const int team = std::min(team_, std::max(1, r.threads));
    const int64_t per_thread = this->per_thread();
    int32_t* at = reinterpret_cast<int32_t*>(r.scratch);
    float* best = reinterpret_cast<float*>(at + team * per_thread);
    if (g_.rows()) return rows(dy, x, dx, team, at, best);
    if (!g_.channels_last()) return channels(dy, x, dx, team, at, best);
    const MaxPoolGeometry& g = g_;
    float* xt = best + team * per_thread;
    float* dxt = xt + g.n * g.c * g.in_area();
    float* dyt = dxt + g.n * g.c * g.in_area();
    to_channels_last(x, xt, g.n, g.c, g.in_area());
    to_channels_last(dy, dyt, g.n, g.c, g.out_area());
    channels(dyt, xt, dxt, team, at, best);
    to_channels_first(dxt, dx, g.n, g.c, g.in_area());
  }

 private:
  void rows(const float* dy, const float* x, float* dx, int team, int32_t* at_all,
            float* best_all) const {
    const MaxPoolGeometry& g = g_;
#pragma omp parallel num_threads(team)
    {
      const int t = omp_get_thread_num();
      int32_t* at = at_all + static_cast<int64_t>(t) * per_thread();
      float* best = best_all + static_cast<int64_t>(t) * per_thread();
#pragma omp for schedule(static)
      for (int64_t p = 0; p < g.n * g.c; ++p) {
        const float* plane = x + p * g.in_area();
        float* dplane = dx + p * g.in_area();
        std::memset(dplane, 0, sizeof(float) * g.in_area());
        for (int64_t orow = 0; orow < g.oh; ++orow) {
          std::fill(at, at + g.ow, -1);
          std::fill(best, best + g.ow, kLowest);
          for (int64_t th = 0; th < g.kh; ++th) {
            const int64_t h = g.row(orow, th);
            if (h < 0) continue;
            for (int64_t tw = 0; tw < g.kw; ++tw) {
              const int64_t lo = g.col_lo[tw], hi = g.col_hi[tw], sw = g.sw;
              const int32_t base = static_cast<int32_t>(h * g.iw - g.pl + tw * g.dw);
              const float* src = plane + base;
#pragma omp simd
              for (int64_t q = lo; q < hi; ++q) {
                const float v = src[q * sw];
                const bool take = takes(v, best[q], at[q] < 0);
                best[q] = take ? v : best[q];
                at[q] = take ? base + static_cast<int32_t>(q * sw) : at[q];
              }
            }
          }
          const float* grad = dy + (p * g.oh + orow) * g.ow;
          for (int64_t q = 0; q < g.ow; ++q) dplane[at[q]] += grad[q];
        }
      }
    }
  }

  void channels(const float* dyt, const float* xt, float* dxt, int team, int32_t* at_all,
                float* best_all) const {
    const MaxPoolGeometry& g = g_;
    const int64_t c = g.lanes(), blocks = (c + kChannelBlock - 1) / kChannelBlock;
#pragma omp parallel num_threads(team)
    {
      const int t = omp_get_thread_num();
      int32_t* at = at_all + static_cast<int64_t>(t) * kChannelBlock;
      float* best = best_all + static_cast<int64_t>(t) * kChannelBlock;
#pragma omp for schedule(static)
      for (int64_t task = 0; task < g.samples() * blocks; ++task) {
        const int64_t b = task / blocks, k0 = (task % blocks) * kChannelBlock;
        const int64_t width = std::min(kChannelBlock, c - k0);
        const float* xs = xt + b * g.in_area() * c + k0;
        float* dxs = dxt + b * g.in_area() * c + k0;
        for (int64_t s = 0; s < g.in_area(); ++s) std::fill(dxs + s * c, dxs + s * c + width, 0.f);
        for (int64_t o = 0; o < g.out_area(); ++o) {
          const int64_t orow = o / g.ow, q = o % g.ow;
          std::fill(at, at + width, -1);
          std::fill(best, best + width, kLowest);
          for (int64_t th = 0; th < g.kh; ++th) {
            const int64_t h = g.row(orow, th);
            if (h < 0) continue;
            for (int64_t tw = 0; tw < g.kw; ++tw) {
              const int64_t w = g.col(q, tw);
              if (w < 0) continue;
              const int32_t pos = static_cast<int32_t>(h * g.iw + w);
              const float* src = xs + pos * c;
#pragma omp simd
              for (int64_t k = 0; k < width; ++k) {
                const float v = src[k];
                const bool take = takes(v, best[k], at[k] < 0);
                best[k] = take ? v : best[k];
                at[k] = take ? pos : at[k];
              }
            }
          }
          const float* grad = dyt + (b * g.out_area() + o) * c + k0;
          for (int64_t k = 0; k < width; ++k) dxs[at[k] * c + k] += grad[k];
        }
      }
    }
  }

  int dy_, x_, dx_, team_;
  MaxPoolGeometry g_;
};

KernelPtr max_pool_f32(const Node& n) { return std::make_unique<MaxPool>(n); }
KernelPtr max_pool_grad_f32(const Node& n) { return std::make_unique<MaxPoolGrad>(n); }
// bfloat16 / float16 (mixed precision): the float32 loops on widened copies, so a window's
// overlapping gradients add in float32 and dx is rounded once, as the reference does.
// float64: pool_f64.cpp's loops in double.
KernelPtr max_pool(const Node& n) {
  return n.in[0].dtype == F64 ? max_pool_f64(n) : widened(n, max_pool_f32);
}
KernelPtr max_pool_grad(const Node& n) {
  return n.in[0].dtype == F64 ? max_pool_grad_f64(n) : widened(n, max_pool_grad_f32);
}

}  // namespace

PLANNER_REGISTER_KERNELS(max_pool) {
  r["MaxPool"] = {max_pool, "float32|float64"};
  r["MaxPoolGrad"] = {max_pool_grad, "float32|float64"};
}

}  // namespace planner
