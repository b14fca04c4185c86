// The reduction family's rows (planner/ops/reductions.py) as both backends compute them: x seen
// as kept and reduced dims (adjacent dims of one kind merged), each output the fold of its
// group of `count` elements, read through an accessor at(r) (r in [0, count)) that widens the
// element to double. Accumulation is in double; the rows' formulas are the reference's, NaN
// included. ReduceGrad's dx at one element is fold_slope of that element, its group's y and dy,
// and the group's statistics (fold_stats).
#pragma once
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "host_device.h"
#include "reduce.h"
#include "runtime.h"

namespace planner {

enum class Fold { Max, Min, Prod, NanSum, NanMean, LogSumExp, Norm, Any, All };

inline Fold fold_of(const std::string& op) {
  static const char* const names[] = {"ReduceMax",    "ReduceMin",       "ReduceProd",
                                      "ReduceNanSum", "ReduceNanMean",   "ReduceLogSumExp",
                                      "ReduceNorm",   "ReduceAny",       "ReduceAll"};
  for (int k = 0; k < 9; ++k)
    if (op == names[k]) return static_cast<Fold>(k);
  throw std::runtime_error("not a reduction of the family: " + op);
}

// The node's types: float32 in and out; ReduceAny and ReduceAll a float32, int64 or bool x and
// a bool y.
template <class N>
void check_fold_types(const N& n, Fold f) {
  const int x = n.in[0].dtype, y = n.out[0].dtype;
  const bool boolean = f == Fold::Any || f == Fold::All;
  if (boolean ? y != BOOL || (x != F32 && x != I64 && x != BOOL) : x != F32 || y != F32)
    throw std::runtime_error(std::string(n.spec->op) + ": float32 tensors (any and all: a "
                             "float32, int64 or bool x and a bool y)");
}

struct FoldDims {
  static constexpr int kRank = 8;
  int rank = 0;
  int64_t size[kRank] = {};
  int64_t stride[kRank] = {};
};

// The element offset of the index-th position of dims (row-major over them).
PLANNER_HOST_DEVICE inline int64_t fold_offset(int64_t index, const FoldDims& d) {
  int64_t off = 0;
  for (int k = d.rank - 1; k >= 0; --k) {
    off += (index % d.size[k]) * d.stride[k];
    index /= d.size[k];
  }
  return off;
}

struct FoldView {
  FoldDims kept, reduced;
  int64_t outputs = 1, count = 1;
};

// x's shape split by the node's axes (common/reduce.h: none is every axis).
template <class N>
FoldView fold_view(const N& n, const Shape& s) {
  const std::vector<bool> red = reduced_axes(n.attrs, s.size());
  FoldView v;
  int64_t stride = 1;
  int last = -1;  // the kind of the dim merged last (scanning from the innermost): 0 kept
  for (int k = static_cast<int>(s.size()) - 1; k >= 0; --k) {
    const int kind = red[k] ? 1 : 0;
    (kind ? v.count : v.outputs) *= s[k];
    if (s[k] != 1) {
      FoldDims& d = kind ? v.reduced : v.kept;
      if (kind == last) {  // contiguous with the dim of this kind just inside it
        d.size[0] *= s[k];
      } else {
        if (d.rank == FoldDims::kRank) throw std::runtime_error("reduction: more than 8 dims");
        for (int j = d.rank; j > 0; --j) d.size[j] = d.size[j - 1], d.stride[j] = d.stride[j - 1];
        d.size[0] = s[k];
        d.stride[0] = stride;
        ++d.rank;
      }
      last = kind;
    }
    stride *= s[k];
  }
  return v;
}

template <class At>
PLANNER_HOST_DEVICE double fold_group(Fold f, double p, int64_t count, At at) {
  double acc = f == Fold::Prod || f == Fold::All ? 1.0 : 0.0;
  if (f == Fold::Max || f == Fold::Min || f == Fold::LogSumExp) {
    double m = at(0);
    for (int64_t r = 1; r < count && m == m; ++r) {
      const double v = at(r);
      m = v != v ? v : (f == Fold::Min ? (v < m ? v : m) : (v > m ? v : m));
    }
    if (f != Fold::LogSumExp || m != m) return m;
    // torch's shift: 0 where the max is infinite (m - m is then NaN), so that -inf and inf
    // come out as themselves
    if (m - m != 0.0) m = 0.0;
    for (int64_t r = 0; r < count; ++r) acc += exp(at(r) - m);
    return log(acc) + m;
  }
  int64_t k = 0;
  for (int64_t r = 0; r < count; ++r) {
    const double v = at(r);
    switch (f) {
      case Fold::Prod: acc *= v; break;
      case Fold::NanSum:
      case Fold::NanMean:
        if (v == v) acc += v, ++k;
        break;
      case Fold::Norm:
        acc += p == 0.0 ? (v != 0.0 ? 1.0 : 0.0) : p == 1.0 ? fabs(v)
               : p == 2.0 ? v * v : pow(fabs(v), p);
        break;
      case Fold::Any: acc = acc != 0.0 || v != 0.0 ? 1.0 : 0.0; break;
      case Fold::All: acc = acc != 0.0 && v != 0.0 ? 1.0 : 0.0; break;
      default: break;
    }
  }
  if (f == Fold::NanMean) return acc / static_cast<double>(k);
  if (f == Fold::Norm && p != 0.0 && p != 1.0) return p == 2.0 ? sqrt(acc) : pow(acc, 1.0 / p);
  return acc;
}

// What dx needs of the whole group: Max/Min the count of elements equal to y; Prod the count of
// zeros and the product of the other elements; NanMean the count of non-NaN elements.
struct FoldStats {
  int64_t k = 0;
  double product = 1.0;
};

template <class At>
PLANNER_HOST_DEVICE FoldStats fold_stats(Fold f, int64_t count, double y, At at) {
  FoldStats s;
  if (f != Fold::Max && f != Fold::Min && f != Fold::Prod && f != Fold::NanMean) return s;
  for (int64_t r = 0; r < count; ++r) {
    const double v = at(r);
    if (f == Fold::Prod) {
      if (v == 0.0) ++s.k;
      else s.product *= v;
    } else if (f == Fold::NanMean) {
      if (v == v) ++s.k;
    } else if (v == y) {
      ++s.k;
    }
  }
  return s;
}

PLANNER_HOST_DEVICE inline double fold_sign(double x) { return x > 0 ? 1.0 : x < 0 ? -1.0 : x; }

PLANNER_HOST_DEVICE inline double fold_slope(Fold f, double p, double x, double y, double dy,
                                             const FoldStats& s) {
  switch (f) {
    case Fold::Max:
    case Fold::Min:  // torch's dy * (x == y) / k: a NaN dy (or y, where k = 0) gives NaN
      return dy * (x == y ? 1.0 : 0.0) / static_cast<double>(s.k);
    case Fold::Prod:
      if (s.k == 0) return dy * y / x;
      return s.k == 1 && x == 0.0 ? dy * s.product : 0.0;
    case Fold::NanSum: return x != x ? 0.0 : dy;
    case Fold::NanMean: return dy / static_cast<double>(s.k) * (x != x ? 0.0 : 1.0);
    case Fold::LogSumExp: return dy * exp(x - y);
    case Fold::Norm: {
      if (p == 0.0) return 0.0;
      if (p == 1.0) return fold_sign(x) * dy;
      if (p < 1.0) {
        const double scaled = x == 0.0 ? 0.0 : fold_sign(x) * pow(fabs(x), p - 1.0);
        return scaled * dy * pow(y, 1.0 - p);
      }
      const double scaled = p < 2.0 ? fold_sign(x) * pow(fabs(x), p - 1.0)
                                    : x * pow(fabs(x), p - 2.0);
      return scaled * (y == 0.0 ? 0.0 : dy / pow(y, p - 1.0));
    }
    default: return 0.0;
  }
}

// Output o of a fold: its group (the elements at x + kept offset + offset(k), k < count) folded
// in double, written as bool (ReduceAny, ReduceAll) or float32: both backends' body, one group
// per CPU iteration or GPU thread. offset(k): a table made at load on the CPU, computed on the GPU.
template <class T, class Offset>
PLANNER_HOST_DEVICE void fold_output(Fold f, double p, const FoldView& v, const T* x, void* y,
                                     int64_t o, Offset offset) {
  const T* g = x + fold_offset(o, v.kept);
  const double r = fold_group(f, p, v.count, [&](int64_t k) { return double(g[offset(k)]); });
  if (f == Fold::Any || f == Fold::All) static_cast<bool*>(y)[o] = r != 0.0;
  else static_cast<float*>(y)[o] = static_cast<float>(r);
}

// ReduceGrad of group o: its statistics, then each element's slope.
template <class Offset>
PLANNER_HOST_DEVICE void fold_output_slopes(Fold f, double p, const FoldView& v, const float* dy,
                                            const float* x, const float* y, float* dx, int64_t o,
                                            Offset offset) {
  const int64_t base = fold_offset(o, v.kept);
  const float* g = x + base;
  const FoldStats s = fold_stats(f, v.count, y[o], [&](int64_t k) { return double(g[offset(k)]); });
  for (int64_t k = 0; k < v.count; ++k)
    dx[base + offset(k)] = static_cast<float>(fold_slope(f, p, g[offset(k)], y[o], dy[o], s));
}

}  // namespace planner
