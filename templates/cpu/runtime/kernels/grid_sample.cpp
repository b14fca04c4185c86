// GridSample [x (N,C,H,W), grid (N,OH,OW,2)] -> y and GridSampleGrad [dy, x, grid] -> dx, dgrid
// (planner/ops/grid_sample.py): bilinear or nearest, zeros / border / reflection padding,
// align_corners. Each grid point's position, taps and weights are computed in float from the
// grid as the reference computes them, then applied to every channel. The forward runs over
// the points; the gradient scatters dy per (n, c) plane, each plane by one thread walking the
// points in order, each point's taps in order (the reference's order; no races, the same bits
// on any thread count), and sums dgrid per point over the channels in order.
#include <omp.h>

#include <cmath>
#include <string>

#include "../loops.h"

namespace planner {
namespace {

enum class Pad { Zeros, Border, Reflection };

struct Axis {
  int64_t size;
  bool align;
  Pad pad;
  // The position of grid value g along the axis and its derivative by g (the reference's
  // `source`: unnormalise, reflect, clamp).
  float at(float g, float* slope) const {
    const float scale = align ? static_cast<float>((size - 1) / 2.0) : static_cast<float>(size / 2.0);
    float x = align ? (g + 1.f) * scale : (g + 1.f) * scale - 0.5f;
    float d = scale;
    if (pad == Pad::Reflection) {
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
    if (pad != Pad::Zeros) {
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

// One grid point: up to 4 taps (offset into a plane, weight, inside), fractional parts and
// slopes for dgrid.
struct Point {
  int64_t off[4];
  float w[4];
  bool in[4];
  int taps;
  float fx, fy, sx, sy;
};
static_assert(sizeof(Point) == 72, "planner/ops/grid_sample.py's POINT_BYTES prices this");

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
    batch_ = xs[0], channels_ = xs[1], oh_ = gs[1], ow_ = gs[2];
    const std::string pad = n.attrs.s("padding_mode");
    const Pad p = pad == "zeros" ? Pad::Zeros : pad == "border" ? Pad::Border : Pad::Reflection;
    if (pad != "zeros" && pad != "border" && pad != "reflection")
      throw std::runtime_error("GridSample: padding_mode " + pad);
    const std::string mode = n.attrs.s("mode");
    if (mode != "bilinear" && mode != "nearest")
      throw std::runtime_error("GridSample: mode " + mode);
    nearest_ = mode == "nearest";
    const bool align = n.attrs.b("align_corners");
    h_ = Axis{xs[2], align, p};
    w_ = Axis{xs[3], align, p};
  }

  size_t scratch_bytes() const override {
    return grad_ ? sizeof(Point) * static_cast<size_t>(batch_ * oh_ * ow_) : 0;
  }

  void run(const Run& r) override {
    const float* x = r.at<float>(x_);
    const float* grid = r.at<float>(grid_);
    const int64_t points = oh_ * ow_, plane = h_.size * w_.size, c = channels_;
    if (!grad_) {
      float* y = r.at<float>(out_);
#pragma omp parallel for
      for (int64_t q = 0; q < batch_ * points; ++q) {
        const int64_t nn = q / points, k = q % points;
        const Point p = point(grid + 2 * q);
        const float* xn = x + nn * c * plane;
        float* yn = y + nn * c * points + k;
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
    for (int64_t q = 0; q < batch_ * points; ++q) at[q] = point(grid + 2 * q);
#pragma omp parallel for
    for (int64_t pl = 0; pl < batch_ * c; ++pl) {  // dx: one (n, c) plane per thread
      const Point* pts = at + (pl / c) * points;
      float* dxp = dx + pl * plane;
      const float* g = dy + pl * points;
      std::fill(dxp, dxp + plane, 0.f);
      for (int64_t k = 0; k < points; ++k) {  // point by point, its taps in order
        const Point& p = pts[k];
        for (int t = 0; t < p.taps; ++t)
          if (p.in[t]) dxp[p.off[t]] += p.w[t] * g[k];
      }
    }
#pragma omp parallel for
    for (int64_t q = 0; q < batch_ * points; ++q) {  // dgrid: one point per iteration
      float* out = dgrid + 2 * q;
      if (nearest_) {
        out[0] = out[1] = 0.f;
        continue;
      }
      const int64_t nn = q / points, k = q % points;
      const Point& p = at[q];
      const float* xn = x + nn * c * plane;
      const float* g = dy + nn * c * points + k;
      float gx = 0.f, gy = 0.f;
      for (int64_t ch = 0; ch < c; ++ch) {
        const float* xp = xn + ch * plane;
        float v[4];
        for (int t = 0; t < 4; ++t) v[t] = p.in[t] ? xp[p.off[t]] : 0.f;
        const float d = g[ch * points];
        gx += d * ((v[1] - v[0]) * (1.f - p.fy) + (v[3] - v[2]) * p.fy);
        gy += d * ((v[2] - v[0]) * (1.f - p.fx) + (v[3] - v[1]) * p.fx);
      }
      out[0] = gx * p.sx;
      out[1] = gy * p.sy;
    }
  }

 private:
  Point point(const float* g) const {
    Point p{};
    const float px = w_.at(g[0], &p.sx), py = h_.at(g[1], &p.sy);
    if (nearest_) {
      bool ri, ci;
      const int64_t row = h_.index(std::nearbyint(py), &ri), col = w_.index(std::nearbyint(px), &ci);
      p.taps = 1;
      p.off[0] = row * w_.size + col;
      p.w[0] = 1.f;
      p.in[0] = ri && ci;
      return p;
    }
    const float x0 = std::floor(px), y0 = std::floor(py);
    p.fx = px - x0, p.fy = py - y0;
    p.taps = 4;
    const float wy[2] = {1.f - p.fy, p.fy}, wx[2] = {1.f - p.fx, p.fx};
    for (int a = 0; a < 2; ++a)
      for (int b = 0; b < 2; ++b) {
        bool ri, ci;
        const int64_t row = h_.index(y0 + a, &ri), col = w_.index(x0 + b, &ci);
        const int t = 2 * a + b;  // nw, ne, sw, se
        p.off[t] = row * w_.size + col;
        p.w[t] = wy[a] * wx[b];
        p.in[t] = ri && ci;
      }
    return p;
  }

  bool grad_, nearest_ = false;
  int dy_, x_, grid_, out_, dgrid_;
  int64_t batch_ = 0, channels_ = 0, oh_ = 0, ow_ = 0;
  Axis h_{1, false, Pad::Zeros}, w_{1, false, Pad::Zeros};
};

KernelPtr grid_sample(const Node& n) { return std::make_unique<GridSample>(n); }

}  // namespace

PLANNER_REGISTER_KERNELS(grid_sample) {
  r["GridSample"] = grid_sample;
  r["GridSampleGrad"] = grid_sample;
}

}  // namespace planner
