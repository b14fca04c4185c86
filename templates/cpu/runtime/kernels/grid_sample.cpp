// GridSample [x (N,C,*S), grid (N,*O,k)] -> y (N,C,*O) and GridSampleGrad [dy, x, grid] -> dx,
// dgrid (planner/ops/grid_sample.py), k = 2 (S = H, W) or 3 (S = D, H, W): bilinear (trilinear)
// or nearest, zeros / border / reflection padding, align_corners. Each grid point's positions,
// taps and weights are computed in float from the grid as the reference computes them, then
// applied to every channel. The forward runs over the points; the gradient first computes every
// point's taps into its scratch, then scatters dy per (n, c) plane, each plane by one thread
// walking the points in order, each point's taps in order (the reference's order; no races,
// the same bits on any thread count), and sums dgrid per point over the channels in order.
#include <omp.h>

#include <cmath>
#include <string>

#include "../loops.h"

namespace planner {
namespace {

// (not `Pad`: pad.cpp's kernel class, in the same unity translation unit as this file)
enum class GridPad { Zeros, Border, Reflection };

struct Axis {
  int64_t size;
  bool align;
  GridPad pad;
  // The position of grid value g along the axis and its derivative by g (the reference's
  // `source`: unnormalise, reflect, clamp).
  float at(float g, float* slope) const {
    const float scale = align ? static_cast<float>((size - 1) / 2.0) : static_cast<float>(size / 2.0);
    float x = align ? (g + 1.f) * scale : (g + 1.f) * scale - 0.5f;
    float d = scale;
    if (pad == GridPad::Reflection) {
      const int64_t low = align ? 0 : -1, high = align ? 2 * (size - 1) : 2 * size - 1;
      if (low == high) {
        *slope = 0.f;
        return 0.f;
      }
      const float lo = static_cast<float>(low / 2.0), span = static_cast<float>((high - low) / 2.0);
      float v = x - lo;
      const float sign = v < 0 ? -1.f : 1.f;
      v = std::fabs(v);
      const float extra = std::fmod(v, span);
      const bool odd = std::fmod(std::floor(v / span), 2.f) == 1.f;
      x = odd ? span - extra + lo : extra + lo;
      d *= odd ? -sign : sign;
    }
    if (pad != GridPad::Zeros) {
      const float top = static_cast<float>(size - 1);
      if (!(x > 0.f && x < top)) d = 0.f;
      x = std::min(top, std::max(x, 0.f));
    }
    *slope = d;
    return x;
  }
  // A pixel index (beyond either edge is simply outside) and whether it is inside.
  int64_t index(float v, bool* inside) const {
    const float far = std::min(static_cast<float>(size + 1), std::max(v, -2.f));
    const int64_t i = static_cast<int64_t>(far);
    *inside = i >= 0 && i < size;
    return std::min<int64_t>(size - 1, std::max<int64_t>(i, 0));
  }
};

// One grid point: up to 8 taps (offset into a plane, weight, inside) in the reference's order
// (the first spatial axis the slowest), and per spatial axis the fractional part and the
// position's slope, for dgrid.
struct Point {
  int64_t off[8];
  float w[8];
  bool in[8];
  int taps;
  float f[3], s[3];
};
static_assert(sizeof(Point) == 136, "planner/ops/grid_sample.py's POINT_BYTES prices this");

class GridSample : public Kernel {
 public:
  explicit GridSample(const Node& n) : grad_(n.spec->op == std::string("GridSampleGrad")) {
    require_f32(n);
    const int base = grad_ ? 1 : 0;
    dy_ = grad_ ? n.in[0].id : -1;
    x_ = n.in[base].id, grid_ = n.in[base + 1].id;
    out_ = n.out[0].id;
    dgrid_ = grad_ ? n.out[1].id : -1;
    const Shape& xs = n.in[base].shape;
    const Shape& gs = n.in[base + 1].shape;
    k_ = static_cast<int>(xs.size()) - 2;
    if (k_ != 2 && k_ != 3) throw std::runtime_error("GridSample: a 2-D or 3-D image");
    batch_ = xs[0], channels_ = xs[1];
    points_ = 1;
    for (int a = 1; a <= k_; ++a) points_ *= gs[a];
    const std::string pad = n.attrs.s("padding_mode");
    if (pad != "zeros" && pad != "border" && pad != "reflection")
      throw std::runtime_error("GridSample: padding_mode " + pad);
    const GridPad p = pad == "zeros" ? GridPad::Zeros : pad == "border" ? GridPad::Border : GridPad::Reflection;
    const std::string mode = n.attrs.s("mode");
    if (mode != "bilinear" && mode != "nearest")
      throw std::runtime_error("GridSample: mode " + mode);
    nearest_ = mode == "nearest";
    const bool align = n.attrs.b("align_corners");
    plane_ = 1;
    for (int a = 0; a < k_; ++a) {
      axes_[a] = Axis{xs[2 + a], align, p};
      plane_ *= xs[2 + a];
    }
  }

  size_t scratch_bytes() const override {
    return grad_ ? sizeof(Point) * static_cast<size_t>(batch_ * points_) : 0;
  }

  void run(const Run& r) override {
    const float* x = r.at<float>(x_);
    const float* grid = r.at<float>(grid_);
    const int64_t points = points_, plane = plane_, c = channels_, k = k_;
    if (!grad_) {
      float* y = r.at<float>(out_);
#pragma omp parallel for
      for (int64_t q = 0; q < batch_ * points; ++q) {
        const int64_t nn = q / points, j = q % points;
        const Point p = point(grid + k * q);
        const float* xn = x + nn * c * plane;
        float* yn = y + nn * c * points + j;
        for (int64_t ch = 0; ch < c; ++ch) {
          const float* xp = xn + ch * plane;
          float v = 0.f;
          for (int t = 0; t < p.taps; ++t) v += p.w[t] * (p.in[t] ? xp[p.off[t]] : 0.f);
          yn[ch * points] = v;
        }
      }
      return;
    }
    const float* dy = r.at<float>(dy_);
    float* dx = r.at<float>(out_);
    float* dgrid = r.at<float>(dgrid_);
    Point* at = reinterpret_cast<Point*>(r.scratch);  // every point's taps, computed once
#pragma omp parallel for
    for (int64_t q = 0; q < batch_ * points; ++q) at[q] = point(grid + k * q);
#pragma omp parallel for
    for (int64_t pl = 0; pl < batch_ * c; ++pl) {  // dx: one (n, c) plane per thread
      const Point* pts = at + (pl / c) * points;
      float* dxp = dx + pl * plane;
      const float* g = dy + pl * points;
      std::fill(dxp, dxp + plane, 0.f);
      for (int64_t j = 0; j < points; ++j) {  // point by point, its taps in order
        const Point& p = pts[j];
        for (int t = 0; t < p.taps; ++t)
          if (p.in[t]) dxp[p.off[t]] += p.w[t] * g[j];
      }
    }
#pragma omp parallel for
    for (int64_t q = 0; q < batch_ * points; ++q) {  // dgrid: one point per iteration
      float* out = dgrid + k * q;
      if (nearest_) {
        for (int64_t a = 0; a < k; ++a) out[a] = 0.f;
        continue;
      }
      const int64_t nn = q / points, j = q % points;
      const Point& p = at[q];
      const float* xn = x + nn * c * plane;
      const float* g = dy + nn * c * points + j;
      // per axis and tap, d weight / d position: the other axes' weights, signed by the bit
      float dw[3][8];
      for (int64_t a = 0; a < k; ++a)
        for (int t = 0; t < p.taps; ++t) {
          float others = 1.f;
          for (int64_t b = 0; b < k; ++b)
            if (b != a) others *= bit(t, b) ? p.f[b] : 1.f - p.f[b];
          dw[a][t] = bit(t, a) ? others : -others;
        }
      float sum[3] = {0.f, 0.f, 0.f};
      for (int64_t ch = 0; ch < c; ++ch) {
        const float* xp = xn + ch * plane;
        const float d = g[ch * points];
        for (int64_t a = 0; a < k; ++a) {
          float slope = 0.f;
          for (int t = 0; t < p.taps; ++t) slope += (p.in[t] ? xp[p.off[t]] : 0.f) * dw[a][t];
          sum[a] += d * slope;
        }
      }
      for (int64_t a = 0; a < k; ++a) out[k - 1 - a] = sum[a] * p.s[a];
    }
  }

 private:
  // Tap t's corner along spatial axis a (the first axis the slowest bit).
  bool bit(int t, int64_t a) const { return (t >> (k_ - 1 - a)) & 1; }

  Point point(const float* g) const {
    Point p{};
    float pos[3];
    for (int a = 0; a < k_; ++a) pos[a] = axes_[a].at(g[k_ - 1 - a], &p.s[a]);
    if (nearest_) {
      p.taps = 1;
      p.w[0] = 1.f;
      p.in[0] = true;
      int64_t off = 0;
      for (int a = 0; a < k_; ++a) {
        bool in;
        off = off * axes_[a].size + axes_[a].index(std::nearbyint(pos[a]), &in);
        p.in[0] = p.in[0] && in;
      }
      p.off[0] = off;
      return p;
    }
    float low[3];
    for (int a = 0; a < k_; ++a) {
      low[a] = std::floor(pos[a]);
      p.f[a] = pos[a] - low[a];
    }
    p.taps = 1 << k_;
    for (int t = 0; t < p.taps; ++t) {
      int64_t off = 0;
      bool inside = true;
      float w = 0.f;
      for (int a = 0; a < k_; ++a) {
        bool in;
        const bool b = bit(t, a);
        off = off * axes_[a].size + axes_[a].index(low[a] + (b ? 1.f : 0.f), &in);
        inside = inside && in;
        const float wa = b ? p.f[a] : 1.f - p.f[a];
        w = a == 0 ? wa : w * wa;
      }
      p.off[t] = off;
      p.w[t] = w;
      p.in[t] = inside;
    }
    return p;
  }

  bool grad_, nearest_ = false;
  int dy_, x_, grid_, out_, dgrid_;
  int k_ = 2;
  int64_t batch_ = 0, channels_ = 0, points_ = 0, plane_ = 1;
  Axis axes_[3] = {{1, false, GridPad::Zeros}, {1, false, GridPad::Zeros}, {1, false, GridPad::Zeros}};
};

KernelPtr grid_sample(const Node& n) { return std::make_unique<GridSample>(n); }

}  // namespace

PLANNER_REGISTER_KERNELS(grid_sample) {
  r["GridSample"] = grid_sample;
  r["GridSampleGrad"] = grid_sample;
}

}  // namespace planner
