// The windows of MaxPoolND, AvgPoolND and AvgPoolNDGrad as both backends read them
// (planner/ops/pool_nd.py): x seen as planes (N * C) of up to three spatial axes (fewer are
// padded in front with axes of one element), each output's window the product of its axes'
// windows, adaptive or windowed by torch's rules.
#pragma once
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "host_device.h"
#include "runtime.h"

namespace planner {

struct PoolAxis {
  int64_t in = 1, out = 1, k = 1, s = 1, p = 0, d = 1;
  int64_t pe = 0;  // padding after the input: p, but for a 2-D pool's uneven pads (pool.h)
  bool adaptive = true, include_pad = true;
};

struct AxisTaps {
  int64_t first, count, step, divisor;
};

// Output o's window along axis a (planner/ops/pool_nd.py's axis_windows).
PLANNER_HOST_DEVICE inline AxisTaps axis_taps(const PoolAxis& a, int64_t o) {
  if (a.adaptive) {
    const int64_t first = o * a.in / a.out, end = ((o + 1) * a.in + a.out - 1) / a.out;
    return {first, end - first, 1, end - first};
  }
  const int64_t start = o * a.s - a.p;
  const int64_t t0 = start < 0 ? (-start + a.d - 1) / a.d : 0;
  int64_t t1 = (a.in - 1 - start) / a.d;
  if (t1 > a.k - 1) t1 = a.k - 1;
  const int64_t end = start + a.k < a.in + a.pe ? start + a.k : a.in + a.pe;
  const int64_t clipped = (end < a.in ? end : a.in) - (start > 0 ? start : 0);
  return {start + t0 * a.d, t1 >= t0 ? t1 - t0 + 1 : 0, a.d,
          a.include_pad ? end - start : clipped};
}

struct PoolGeometry {
  PoolAxis axis[3];
  int64_t planes = 1, in_plane = 1, out_plane = 1;
};

// x's shape (N, C, *S) and the node's window attrs; throws for what the op's rule refuses
// (and for tensors other than `dtype` ones, float32 unless the kernel says, and MaxPoolND's
// int64 indices).
template <class N>
PoolGeometry pool_geometry(const N& n, const Shape& x, const Shape& y, int dtype = F32) {
  const bool indices = n.out.size() > 1;
  if (n.in[0].dtype != dtype || n.out[0].dtype != dtype || (indices && n.out[1].dtype != I64))
    throw std::runtime_error(std::string(n.spec->op) + ": " +
                             (dtype == F64 ? "float64" : "float32") +
                             " tensors (int64 indices)");
  const size_t rank = x.size() - 2;
  if (x.size() < 3 || x.size() > 5 || y.size() != x.size())
    throw std::runtime_error(std::string(n.spec->op) + ": (N, C, 1 to 3 spatial axes)");
  const std::vector<int64_t> sizes = n.attrs.ints("output_size");
  auto per_axis = [&](const char* key, int64_t fallback) {
    std::vector<int64_t> v = n.attrs.ints(key);
    if (v.empty()) v.assign(rank, fallback);
    if (v.size() == 1) v.assign(rank, v[0]);
    if (v.size() != rank) throw std::runtime_error(std::string(n.spec->op) + ": " + key);
    return v;
  };
  const std::vector<int64_t> k = per_axis("kernel", 1);
  const std::vector<int64_t> s = n.attrs.ints("strides").empty() ? k : per_axis("strides", 1);
  const std::vector<int64_t> p = per_axis("pads", 0), d = per_axis("dilations", 1);
  PoolGeometry g;
  g.planes = x[0] * x[1];
  for (size_t j = 0; j < rank; ++j) {
    PoolAxis& a = g.axis[3 - rank + j];
    a.in = x[2 + j];
    a.out = y[2 + j];
    a.adaptive = !sizes.empty();
    a.k = k[j], a.s = s[j], a.p = p[j], a.pe = p[j], a.d = d[j];
    a.include_pad = n.attrs.b("count_include_pad");
    g.in_plane *= a.in;
    g.out_plane *= a.out;
  }
  return g;
}

// Calls f(flat index in the input plane) for each tap of output `o` of a plane, in row-major
// order; returns the window's divisor.
template <class F>
PLANNER_HOST_DEVICE int64_t pool_taps(const PoolGeometry& g, int64_t o, F f) {
  const int64_t ow = o % g.axis[2].out, oh = o / g.axis[2].out % g.axis[1].out,
                od = o / (g.axis[2].out * g.axis[1].out);
  const AxisTaps wd = axis_taps(g.axis[0], od), wh = axis_taps(g.axis[1], oh),
                   ww = axis_taps(g.axis[2], ow);
  for (int64_t i = 0; i < wd.count; ++i)
    for (int64_t j = 0; j < wh.count; ++j) {
      const int64_t row = ((wd.first + i * wd.step) * g.axis[1].in + wh.first + j * wh.step) *
                          g.axis[2].in;
      for (int64_t t = 0; t < ww.count; ++t) f(row + ww.first + t * ww.step);
    }
  return wd.divisor * wh.divisor * ww.divisor;
}

// Max of one window as torch takes it: the first maximum, a NaN winning (the last NaN); the
// index of the first tap when every value is -inf. Its value is the plane's type (float32 or
// float64).
template <class T>
struct PoolMax {
  T value;
  int64_t index;
};

template <class T>
PLANNER_HOST_DEVICE PoolMax<T> pool_max(const PoolGeometry& g, const T* plane, int64_t o) {
  PoolMax<T> m{static_cast<T>(-INFINITY), -1};
  pool_taps(g, o, [&](int64_t i) {
    const T v = plane[i];
    if (m.index < 0) m.index = i;
    if (v > m.value || v != v) m = {v, i};
  });
  return m;
}

// Output k (the outputs' flat order) of MaxPoolND, with its index in `idx`, or of AvgPoolND
// (idx null): both backends' body, one output per CPU iteration or GPU thread. T is float
// (both backends) or double (the CPU's float64 kernels); the average is summed in double.
template <class T>
PLANNER_HOST_DEVICE void pool_output(const PoolGeometry& g, const T* x, T* y, int64_t* idx,
                                     int64_t k) {
  const T* plane = x + k / g.out_plane * g.in_plane;
  const int64_t o = k % g.out_plane;
  if (idx) {
    const PoolMax<T> m = pool_max(g, plane, o);
    y[k] = m.value;
    idx[k] = m.index;
  } else {
    double sum = 0.0;
    const int64_t divisor = pool_taps(g, o, [&](int64_t i) { sum += plane[i]; });
    y[k] = static_cast<T>(sum / static_cast<double>(divisor));
  }
}

// AvgPoolNDGrad of plane p: its dx zeroed, then each output's dy shared over its window, the
// outputs in order (so the sums come out in one order on both backends; no atomics).
template <class T>
PLANNER_HOST_DEVICE void pool_plane_slopes(const PoolGeometry& g, const T* dy, T* dx,
                                           int64_t p) {
  T* out = dx + p * g.in_plane;
  for (int64_t i = 0; i < g.in_plane; ++i) out[i] = T(0);
  for (int64_t o = 0; o < g.out_plane; ++o) {
    // a first walk for the divisor (the window's own), as the reference shares dy
    const T share = dy[p * g.out_plane + o] / static_cast<T>(pool_taps(g, o, [](int64_t) {}));
    pool_taps(g, o, [&](int64_t i) { out[i] += share; });
  }
}

// PoolScatter [v, idx] -> y and PoolGather [x, idx] -> y: the (N * C) planes, the elements of a
// plane of the larger side, and the indices per plane.
struct PlaneIndexing {
  bool scatter, accumulate;
  int64_t planes = 0, plane = 0, per_plane = 0;
};

template <class N>
PlaneIndexing plane_indexing(const N& n, int dtype = F32) {
  const std::string op = n.spec->op;
  if (n.in[0].dtype != dtype || n.in[1].dtype != I64 || n.out[0].dtype != dtype)
    throw std::runtime_error(op + ": " + (dtype == F64 ? "float64" : "float32") +
                             " values and int64 indices");
  PlaneIndexing p{op == "PoolScatter", op == "PoolScatter" && n.attrs.b("accumulate")};
  const Shape& big = p.scatter ? n.out[0].shape : n.in[0].shape;
  p.planes = big[0] * big[1];
  p.plane = p.planes ? numel(big) / p.planes : 0;
  p.per_plane = p.planes ? n.in[1].size() / p.planes : 0;
  return p;
}

}  // namespace planner
