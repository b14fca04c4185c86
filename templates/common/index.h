// Where IndexGather and IndexScatter (planner/ops/index.py) read and write, as both backends
// see it: x is (outer, n, inner) around `axis`; the gathered side (y, or src) is walked as
// `lines` lines of `m` elements, a line being one choice of every index coordinate but the
// axis.
//   rows:     line (o, c) for o < outer, c < inner; element j at (o * m + j) * inner + c of y,
//             at (o * n + index[j]) * inner + c of x (m = the index's elements)
//   elements: line (o, c) for o < prod(index.shape[:axis]), c < prod(index.shape[axis + 1:]);
//             element j at (o * m + j) * li + c of y and of the index (li: that inner product),
//             at base(line) + index * inner of x, base(line) the line's coordinates in x's
//             strides (the index may be smaller than x in any dim but the axis).
// An index is taken in [0, n), or [-n, n) with `wrap` (a negative one from the end).
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>

#include "runtime.h"

namespace planner {

enum class IndexReduce { kNone, kSum, kProd, kMean, kMax, kMin };

struct IndexGeometry {
  bool rows = true, wrap = false;
  int64_t outer = 1, n = 1, inner = 1;  // x around the axis
  int64_t m = 1, lines = 1, lo = 1, li = 1;  // the gathered side (lo * li = lines)
  int axis = 0;
  Shape ishape, xstride;  // elements mode: the index's shape, x's strides

  // The index value at an element, wrapped; -1 when out of range.
  int64_t take(int64_t v) const {
    if (v < 0 && wrap) v += n;
    return v >= 0 && v < n ? v : -1;
  }
  // elements mode: the offset in x of the line's element at index 0
  int64_t base(int64_t line) const {
    int64_t o = line / li, c = line % li, off = 0;
    for (int k = static_cast<int>(ishape.size()) - 1; k > axis; --k) {
      off += (c % ishape[k]) * xstride[k];
      c /= ishape[k];
    }
    for (int k = axis - 1; k >= 0; --k) {
      off += (o % ishape[k]) * xstride[k];
      o /= ishape[k];
    }
    return off;
  }
  std::string range() const {
    return "[" + std::to_string(wrap ? -n : 0) + ", " + std::to_string(n) + ") for dim " +
           std::to_string(axis) + " of size " + std::to_string(n);
  }
};

// N: a backend's kernel-factory Node; x is input 0, the index input 1.
template <class N>
IndexGeometry index_geometry(const N& node) {
  const Shape& x = node.in[0].shape;
  const Shape& index = node.in[1].shape;
  if (node.in[1].dtype != I64) throw std::runtime_error("the index must be int64");
  IndexGeometry g;
  const AxisSplit a = axis_split(node.attrs, x);
  g.axis = a.axis;
  g.outer = a.outer;
  g.n = a.extent;
  g.inner = a.inner;
  g.wrap = node.attrs.b("wrap");
  g.rows = node.attrs.s("mode") == "rows";
  if (g.rows) {
    g.m = numel(index);
    g.lo = g.outer;
    g.li = g.inner;
  } else {
    if (index.size() != x.size()) throw std::runtime_error("the index must have x's rank");
    g.ishape = index;
    g.xstride = Shape(x.size(), 1);
    for (int k = static_cast<int>(x.size()) - 2; k >= 0; --k) g.xstride[k] = g.xstride[k + 1] * x[k + 1];
    g.m = index[g.axis];
    g.lo = g.li = 1;
    for (int k = 0; k < static_cast<int>(index.size()); ++k) {
      if (k < g.axis) g.lo *= index[k];
      if (k > g.axis) g.li *= index[k];
    }
  }
  g.lines = g.lo * g.li;
  return g;
}

inline IndexReduce index_reduce(const std::string& name) {
  if (name == "none") return IndexReduce::kNone;
  if (name == "sum") return IndexReduce::kSum;
  if (name == "prod") return IndexReduce::kProd;
  if (name == "mean") return IndexReduce::kMean;
  if (name == "amax") return IndexReduce::kMax;
  if (name == "amin") return IndexReduce::kMin;
  throw std::runtime_error("IndexScatter: unknown reduce " + name);
}

}  // namespace planner
