// IndexGather and IndexScatter (planner/ops/index.py), plain OpenMP loops over the lines of
// common/index.h, on float32 or float64 values (T; float64: torch.istft's overlap-add in a
// float64 model). IndexScatterGrad is float32's alone.
// - Every index is checked before anything is read or written: one out of range is a
//   StepError naming it and the range (the executor adds the node).
// - IndexScatter gives each thread whole lines (elements mode) or a column block of every
//   index row (rows mode): a place is only ever written by one thread, in index order, so
//   "none" keeps the last write and the reductions combine in index order (numpy's ufunc.at
//   order), whatever the thread count.
// - In elements mode a line is one column of the index: the gather and the scatter walk a
//   block of neighbouring lines (ColumnBlocks) index row by index row, each row's columns in
//   one pass, so the index and the gathered side are read along their rows. Line by line they
//   were read a row apart, one cache line per element: a GNN's (4096, 64) scatter_add took
//   1.35 ms, its gradient's gather 1.52 (2-core Xeon). A place still belongs to one line, so to
//   one thread, and gets its writes in index order: the same bits as line by line.
// - "mean" counts the values reaching each place of a line in the thread's part of the
//   scratch (n counters, zero between lines).
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "../loops.h"
#include "index.h"

namespace planner {
namespace {

void check_index(const int64_t* index, int64_t count, const IndexGeometry& g) {
  for (int64_t i = 0; i < count; ++i)
    if (g.take(index[i]) < 0)
      throw StepError("index " + std::to_string(index[i]) + " out of range " + g.range());
}

int64_t index_count(const IndexGeometry& g) { return g.rows ? g.m : g.lines * g.m; }

// The gather's and the scatter's operands: values of T (float32 or float64), int64 indices.
template <class T>
void require_index_operands(const Node& n) {
  if constexpr (sizeof(T) == sizeof(float)) {
    require_f32(n);
  } else {
    for (const auto* side : {&n.in, &n.out})
      for (const TensorRef& t : *side)
        if (t.dtype != F64 && t.dtype != I64)
          throw std::runtime_error("this kernel takes float64 values and int64 indices");
  }
}

// Elements mode's lines in blocks of neighbouring columns (lines of one index row's outer
// coordinates): block t is lines o * li + [c0, c1), its x offsets (IndexGeometry::base) in
// `base`. Blocks are sized for the team; the bits do not depend on them (the header).
struct ColumnBlocks {
  static constexpr int64_t kMax = 64;
  int64_t per_outer, width, count;
  ColumnBlocks(const IndexGeometry& g, int team)
      : per_outer(0), width(std::clamp<int64_t>((g.li + team - 1) / team, 1, kMax)), count(0) {
    per_outer = (g.li + width - 1) / width;
    count = g.lo * per_outer;
  }
  // Block t: its outer coordinate, first and end column; fills base[0, c1 - c0).
  void at(const IndexGeometry& g, int64_t t, int64_t& o, int64_t& c0, int64_t& c1,
          int64_t* base) const {
    o = t / per_outer;
    c0 = (t % per_outer) * width;
    c1 = std::min(g.li, c0 + width);
    for (int64_t c = c0; c < c1; ++c) base[c - c0] = g.base(o * g.li + c);
  }
};

template <class T>
class IndexGather : public Kernel {
 public:
  explicit IndexGather(const Node& n)
      : g_(index_geometry(n)), x_(n.in[0].id), i_(n.in[1].id), y_(n.out[0].id) {
    require_index_operands<T>(n);
  }
  void check_feeds(const Run& r, const std::vector<char>& fed) const override {
    if (fed[i_]) check_index(r.at<int64_t>(i_), index_count(g_), g_);
  }
  void run(const Run& r) override {
    const T* x = r.template at<T>(x_);
    const int64_t* idx = r.at<int64_t>(i_);
    T* y = r.template at<T>(y_);
    const IndexGeometry& g = g_;
    check_index(idx, index_count(g), g);
    const int64_t m = g.m, n = g.n, inner = g.inner;
    if (g.rows) {
      const int64_t rows = g.outer * m;
#pragma omp parallel for if(rows * inner >= kGrain)
      for (int64_t k = 0; k < rows; ++k) {
        const int64_t o = k / m, j = k % m;
        std::memcpy(y + k * inner, x + (o * n + g.take(idx[j])) * inner, inner * sizeof(T));
      }
      return;
    }
    const int64_t li = g.li;
    const ColumnBlocks blocks(g, std::max(1, r.threads));
#pragma omp parallel for if(g.lines * m >= kGrain)
    for (int64_t t = 0; t < blocks.count; ++t) {
      int64_t o, c0, c1, base[ColumnBlocks::kMax];
      blocks.at(g, t, o, c0, c1, base);
      for (int64_t j = 0; j < m; ++j) {
        const int64_t s = (o * m + j) * li;
        for (int64_t c = c0; c < c1; ++c)
          y[s + c] = x[base[c - c0] + g.take(idx[s + c]) * inner];
      }
    }
  }

 private:
  IndexGeometry g_;
  int x_, i_, y_;
};

template <IndexReduce R, class T>
inline T combine(T a, T s) {
  if constexpr (R == IndexReduce::kNone) {
    return s;
  } else if constexpr (R == IndexReduce::kSum || R == IndexReduce::kMean) {
    return a + s;
  } else if constexpr (R == IndexReduce::kProd) {
    return a * s;
  } else if constexpr (R == IndexReduce::kMax) {
    return std::isnan(s) || s > a ? s : a;  // NaN wins, as numpy's maximum
  } else {
    return std::isnan(s) || s < a ? s : a;
  }
}

template <IndexReduce R, class T>
constexpr T identity() {
  if constexpr (R == IndexReduce::kProd) return T(1);
  if constexpr (R == IndexReduce::kMax) return -std::numeric_limits<T>::infinity();
  if constexpr (R == IndexReduce::kMin) return std::numeric_limits<T>::infinity();
  return T(0);
}

// One line's writes: element j of the gathered side (src at sbase + j * sstep, its index at
// ibase + j * istep) goes to the `width` places from xbase + index * xstep.
struct Line {
  int64_t xbase, sbase, sstep, ibase, istep, width;
};

template <IndexReduce R, class T>
void scatter_line(const IndexGeometry& g, const Line& l, const int64_t* idx, const T* src,
                  T value, bool include_self, T* out, int64_t* count) {
  const int64_t m = g.m, xstep = g.inner, w = l.width;
  auto place = [&](int64_t j) { return l.xbase + g.take(idx[l.ibase + j * l.istep]) * xstep; };
  if constexpr (R != IndexReduce::kNone) {
    if (!include_self)
      for (int64_t j = 0; j < m; ++j) std::fill_n(out + place(j), w, identity<R, T>());
  }
  for (int64_t j = 0; j < m; ++j) {
    T* p = out + place(j);
    if (src) {
      const T* s = src + l.sbase + j * l.sstep;
      for (int64_t c = 0; c < w; ++c) p[c] = combine<R, T>(p[c], s[c]);
    } else {
      for (int64_t c = 0; c < w; ++c) p[c] = combine<R, T>(p[c], value);
    }
  }
  if constexpr (R == IndexReduce::kMean) {
    for (int64_t j = 0; j < m; ++j) ++count[g.take(idx[l.ibase + j * l.istep])];
    for (int64_t j = 0; j < m; ++j) {
      const int64_t v = g.take(idx[l.ibase + j * l.istep]);
      if (count[v] == 0) continue;  // divided already
      const T d = static_cast<T>(count[v] + (include_self ? 1 : 0));
      T* p = out + l.xbase + v * xstep;
      for (int64_t c = 0; c < w; ++c) p[c] /= d;
      count[v] = 0;
    }
  }
}

template <class T>
class IndexScatter : public Kernel {
 public:
  explicit IndexScatter(const Node& n)
      : g_(index_geometry(n)), x_(n.in[0].id), i_(n.in[1].id),
        src_(n.in.size() > 2 ? n.in[2].id : -1), out_(n.out[0].id), size_(n.out[0].size()),
        value_(n.attrs.has("value") ? static_cast<T>(n.attrs.f("value")) : T(0)),
        reduce_(index_reduce(n.attrs.s("reduce"))), include_self_(n.attrs.b("include_self")),
        team_(std::max(1, n.threads)) {
    require_index_operands<T>(n);
  }
  size_t scratch_bytes() const override {
    return reduce_ == IndexReduce::kMean ? sizeof(int64_t) * team_ * g_.n : 0;
  }
  void check_feeds(const Run& r, const std::vector<char>& fed) const override {
    if (fed[i_]) check_index(r.at<int64_t>(i_), index_count(g_), g_);
  }
  void run(const Run& r) override {
    const int64_t* idx = r.at<int64_t>(i_);
    check_index(idx, index_count(g_), g_);
    T* out = r.template at<T>(out_);
    if (r.ptr[x_] != r.ptr[out_]) std::memcpy(out, r.template at<T>(x_), size_ * sizeof(T));
    switch (reduce_) {
      case IndexReduce::kNone: return scatter<IndexReduce::kNone>(r, idx, out);
      case IndexReduce::kSum: return scatter<IndexReduce::kSum>(r, idx, out);
      case IndexReduce::kProd: return scatter<IndexReduce::kProd>(r, idx, out);
      case IndexReduce::kMean: return scatter<IndexReduce::kMean>(r, idx, out);
      case IndexReduce::kMax: return scatter<IndexReduce::kMax>(r, idx, out);
      case IndexReduce::kMin: return scatter<IndexReduce::kMin>(r, idx, out);
    }
  }

 private:
  template <IndexReduce R>
  void scatter(const Run& r, const int64_t* idx, T* out) const {
    const IndexGeometry& g = g_;
    const T* src = src_ >= 0 ? r.template at<T>(src_) : nullptr;
    const T value = value_;
    const bool self = include_self_;
    const int team = std::min(team_, std::max(1, r.threads));
    int64_t* counts = reinterpret_cast<int64_t*>(r.scratch);
    if (R == IndexReduce::kMean) std::fill_n(counts, team * g.n, 0);
    const int64_t work = g.lines * g.m;
    if (g.rows) {
      // outer rows first; a row split into column blocks when there are fewer rows than threads
      const int64_t blocks = g.outer >= team ? 1 : std::min<int64_t>(team, g.inner);
      const int64_t tasks = g.outer * blocks, inner = g.inner, n = g.n, m = g.m;
#pragma omp parallel for num_threads(team) if(work >= kGrain)
      for (int64_t t = 0; t < tasks; ++t) {
        const int64_t o = t / blocks, b = t % blocks;
        const int64_t c0 = inner * b / blocks, c1 = inner * (b + 1) / blocks;
        const Line l{o * n * inner + c0, o * m * inner + c0, inner, 0, 1, c1 - c0};
        scatter_line<R, T>(g, l, idx, src, value, self, out, counts + omp_get_thread_num() * n);
      }
      return;
    }
    const int64_t li = g.li, m = g.m, n = g.n;
    if constexpr (R == IndexReduce::kMean) {  // counts per place of one line: line by line
#pragma omp parallel for num_threads(team) if(work >= kGrain)
      for (int64_t line = 0; line < g.lines; ++line) {
        const int64_t s = (line / li) * m * li + line % li;
        const Line l{g.base(line), s, li, s, li, 1};
        scatter_line<R, T>(g, l, idx, src, value, self, out, counts + omp_get_thread_num() * n);
      }
    } else {
      const ColumnBlocks blocks(g, team);
      const int64_t inner = g.inner;
#pragma omp parallel for num_threads(team) if(work >= kGrain)
      for (int64_t t = 0; t < blocks.count; ++t) {
        int64_t o, c0, c1, base[ColumnBlocks::kMax];
        blocks.at(g, t, o, c0, c1, base);
        auto place = [&](int64_t s, int64_t c) {
          return out + base[c - c0] + g.take(idx[s + c]) * inner;
        };
        if (R != IndexReduce::kNone && !self)
          for (int64_t j = 0; j < m; ++j)
            for (int64_t c = c0; c < c1; ++c) *place((o * m + j) * li, c) = identity<R, T>();
        for (int64_t j = 0; j < m; ++j) {
          const int64_t s = (o * m + j) * li;
          for (int64_t c = c0; c < c1; ++c) {
            T* p = place(s, c);
            *p = combine<R, T>(*p, src ? src[s + c] : value);
          }
        }
      }
    }
  }

  IndexGeometry g_;
  int x_, i_, src_, out_;
  int64_t size_;
  T value_;
  IndexReduce reduce_;
  bool include_self_;
  int team_;
};

// The gradient of an amax / amin IndexScatter (planner/ops/index.py): x's places hold dy where
// x is the result, the written places dy split between x and the src values equal to the
// result; of a prod one, product_line. Lines as IndexGather's, one column each; the counts
// (the running products) of a line's places in the thread's part of the scratch.
class IndexScatterGrad : public Kernel {
 public:
  explicit IndexScatterGrad(const Node& n)
      : g_(index_geometry(n)), x_(n.in[0].id), i_(n.in[1].id), src_(n.in[2].id),
        out_(n.in[3].id), dy_(n.in[4].id), dx_(n.out[0].id), dsrc_(n.out[1].id),
        size_(n.out[0].size()), include_self_(n.attrs.b("include_self")),
        prod_(n.attrs.s("reduce") == "prod"), team_(std::max(1, n.threads)) {
    require_f32(n);
  }
  size_t scratch_bytes() const override { return sizeof(float) * team_ * g_.n; }
  void check_feeds(const Run& r, const std::vector<char>& fed) const override {
    if (fed[i_]) check_index(r.at<int64_t>(i_), index_count(g_), g_);
  }
  void run(const Run& r) override {
    const IndexGeometry& g = g_;
    const int64_t* idx = r.at<int64_t>(i_);
    check_index(idx, index_count(g), g);
    const float* x = r.at<float>(x_);
    const float* src = r.at<float>(src_);
    const float* out = r.at<float>(out_);
    const float* dy = r.at<float>(dy_);
    float* dx = r.at<float>(dx_);
    float* dsrc = r.at<float>(dsrc_);
    const int64_t size = size_;
    const bool prod = prod_;
#pragma omp parallel for if(size >= kGrain)
    for (int64_t k = 0; k < size; ++k) dx[k] = prod || x[k] == out[k] ? dy[k] : 0.0f;
    const int team = std::min(team_, std::max(1, r.threads));
    const int64_t n = g.n, m = g.m, inner = g.inner, li = g.li;
    // rows mode: a line per (outer, column); elements mode: IndexGather's lines
    const int64_t lines = g.rows ? g.outer * inner : g.lines;
    const bool self = include_self_;
#pragma omp parallel for num_threads(team) if(lines * m >= kGrain)
    for (int64_t line = 0; line < lines; ++line) {
      float* count = reinterpret_cast<float*>(r.scratch) + omp_get_thread_num() * n;
      const int64_t xb = g.rows ? (line / inner) * n * inner + line % inner : g.base(line);
      const int64_t sb = (line / li) * m * li + line % li;
      auto at = [&](int64_t j) { return g.take(idx[g.rows ? j : sb + j * li]); };
      if (prod) {
        product_line(xb, sb, at, x, src, dy, self, count, dx, dsrc);
        continue;
      }
      for (int64_t j = 0; j < m; ++j) {
        const int64_t p = xb + at(j) * inner;
        count[at(j)] = x[p] == out[p] ? 1.0f : 0.0f;
      }
      for (int64_t j = 0; j < m; ++j)
        if (src[sb + j * li] == out[xb + at(j) * inner]) count[at(j)] += 1.0f;
      for (int64_t j = 0; j < m; ++j) {
        const int64_t v = at(j), p = xb + v * inner;
        const float share = count[v] > 0.0f ? dy[p] / count[v] : 0.0f;
        dx[p] = x[p] == out[p] ? share : 0.0f;
        dsrc[sb + j * li] = src[sb + j * li] == out[p] ? share : 0.0f;
      }
      if (!self)
        for (int64_t j = 0; j < m; ++j) dx[xb + at(j) * inner] = 0.0f;
    }
  }

 private:
  // prod: each factor of a place gets dy times the product of the others, as the prefix
  // product before it times the suffix product after it (index order, x first)
  template <class At>
  void product_line(int64_t xb, int64_t sb, const At& at, const float* x, const float* src,
                    const float* dy, bool self, float* run, float* dx, float* dsrc) const {
    const int64_t m = g_.m, inner = g_.inner, li = g_.li;
    for (int64_t j = 0; j < m; ++j) run[at(j)] = self ? x[xb + at(j) * inner] : 1.0f;
    for (int64_t j = 0; j < m; ++j) {
      dsrc[sb + j * li] = run[at(j)];
      run[at(j)] *= src[sb + j * li];
    }
    for (int64_t j = 0; j < m; ++j) run[at(j)] = 1.0f;
    for (int64_t j = m - 1; j >= 0; --j) {
      const int64_t v = at(j);
      dsrc[sb + j * li] = dsrc[sb + j * li] * run[v] * dy[xb + v * inner];
      run[v] *= src[sb + j * li];
    }
    for (int64_t j = 0; j < m; ++j) {
      const int64_t p = xb + at(j) * inner;
      dx[p] = self ? run[at(j)] * dy[p] : 0.0f;
    }
  }

  IndexGeometry g_;
  int x_, i_, src_, out_, dy_, dx_, dsrc_;
  int64_t size_;
  bool include_self_, prod_;
  int team_;
};

KernelPtr index_gather(const Node& n) {
  if (n.out[0].dtype == F64) return std::make_unique<IndexGather<double>>(n);
  return std::make_unique<IndexGather<float>>(n);
}
KernelPtr index_scatter(const Node& n) {
  if (n.out[0].dtype == F64) return std::make_unique<IndexScatter<double>>(n);
  return std::make_unique<IndexScatter<float>>(n);
}
KernelPtr index_scatter_grad(const Node& n) { return std::make_unique<IndexScatterGrad>(n); }

}  // namespace

PLANNER_REGISTER_KERNELS(index) {
  r["IndexGather"] = {index_gather, "float32,int64|float64,int64"};
  r["IndexScatter"] = {index_scatter, "float32,int64|float64,int64"};
  r["IndexScatterGrad"] = index_scatter_grad;
}

}  // namespace planner
