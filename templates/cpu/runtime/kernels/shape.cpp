// Shape ops. Concat is a oneDNN concat; the rest are plain loops:
//   Reshape, Flatten     a copy, or nothing when the plan gives the output the input's bytes
//   Split                contiguous chunk copies
//   Transpose, Expand, Slice     a strided gather: out[i] = in[base + sum_k i_k stride_k]
//                        (a Transpose of the last two axes: tile by tile)
//   SliceGrad            zeros, then the same mapping as a scatter of dy into dx
// Slice attrs carry the normalised per-axis `begin` and `step` (codegen resolves numpy's
// clamping), so the loops see plain arithmetic.
#include <omp.h>

#include <algorithm>
#include <cstring>

#include "../dnnl_kernel.h"
#include "../loops.h"
#include "shape.h"

namespace planner {
namespace {

Shape row_major_strides(const Shape& s) {
  Shape st(s.size(), 1);
  for (int k = static_cast<int>(s.size()) - 2; k >= 0; --k) st[k] = st[k + 1] * s[k + 1];
  return st;
}

// Moves elements between a dense tensor of shape `shape` and a strided view of another tensor
// (gather: dense <- view; scatter: view <- dense).
class Strided : public Kernel {
 public:
  Strided(int view, int dense, Shape shape, Shape strides, int64_t base, int esize, bool scatter,
          int64_t zero_bytes)
      : view_(view), dense_(dense), shape_(std::move(shape)), strides_(std::move(strides)),
        base_(base), esize_(esize), scatter_(scatter), zero_bytes_(zero_bytes) {
    if (shape_.empty()) {
      shape_ = {1};
      strides_ = {0};
    }
  }
  void run(const Run& r) override {
    if (scatter_) std::memset(r.ptr[view_], 0, zero_bytes_);
    by_element_size(esize_, [&](auto element) { go<decltype(element)>(r); });
  }

 private:
  template <class T>
  void go(const Run& r) {
    T* view = r.at<T>(view_) + base_;
    T* dense = r.at<T>(dense_);
    const int rank = static_cast<int>(shape_.size());
    const int64_t inner = shape_[rank - 1], inner_stride = strides_[rank - 1];
    const int64_t rows = numel(shape_) / std::max<int64_t>(inner, 1);
    const bool scatter = scatter_;
#pragma omp parallel for
    for (int64_t row = 0; row < rows; ++row) {
      int64_t rest = row, off = 0;
      for (int k = rank - 2; k >= 0; --k) {
        off += (rest % shape_[k]) * strides_[k];
        rest /= shape_[k];
      }
      T* v = view + off;
      T* d = dense + row * inner;
      if (inner_stride == 1)  // whole rows (attention's head transposes keep the last axis)
        std::memcpy(scatter ? v : d, scatter ? d : v, sizeof(T) * inner);
      else if (scatter)
        for (int64_t i = 0; i < inner; ++i) v[i * inner_stride] = d[i];
      else
        for (int64_t i = 0; i < inner; ++i) d[i] = v[i * inner_stride];
    }
  }
  int view_, dense_;
  Shape shape_, strides_;
  int64_t base_;
  int esize_;
  bool scatter_;
  int64_t zero_bytes_;
};

KernelPtr reshape(const Node& n) {
  const TensorRef& y = n.out[0];
  return std::make_unique<Copy>(n.in[0].id, y.id, y.size() * dtype_bytes(y.dtype));
}

// Swap of the last two axes, (batch, rows, cols) -> (batch, cols, rows), in square tiles: the
// strided gather reads a column per output row, one cache line per element (a (512, 128)
// float32 weight took ~75 us that way, a tile at a time ~10x less).
class SwapLastTwo : public Kernel {
 public:
  SwapLastTwo(int x, int y, int64_t batch, int64_t rows, int64_t cols, int esize)
      : x_(x), y_(y), batch_(batch), rows_(rows), cols_(cols), esize_(esize) {}
  void run(const Run& r) override {
    by_element_size(esize_, [&](auto element) { go<decltype(element)>(r); });
  }

 private:
  static constexpr int64_t kTile = 32;
  template <class T>
  void go(const Run& r) {
    const T* x = r.at<T>(x_);
    T* y = r.at<T>(y_);
    const int64_t rows = rows_, cols = cols_, row_tiles = (rows + kTile - 1) / kTile;
    const int64_t col_tiles = (cols + kTile - 1) / kTile;
#pragma omp parallel for collapse(2)
    for (int64_t b = 0; b < batch_; ++b)
      for (int64_t t = 0; t < row_tiles * col_tiles; ++t) {
        const int64_t i0 = (t / col_tiles) * kTile, j0 = (t % col_tiles) * kTile;
        const int64_t i1 = std::min(rows, i0 + kTile), j1 = std::min(cols, j0 + kTile);
        const T* in = x + b * rows * cols;
        T* out = y + b * rows * cols;
        for (int64_t j = j0; j < j1; ++j)
          for (int64_t i = i0; i < i1; ++i) out[j * rows + i] = in[i * cols + j];
      }
  }
  int x_, y_;
  int64_t batch_, rows_, cols_;
  int esize_;
};

KernelPtr transpose(const Node& n) {
  const TensorRef &x = n.in[0], &y = n.out[0];
  const int rank = static_cast<int>(x.shape.size());
  const std::vector<int64_t> perm = transpose_perm(n.attrs, x.shape.size());  // common/shape.h
  bool swap_last_two = rank >= 2;
  for (int k = 0; k < rank && swap_last_two; ++k)
    swap_last_two = perm[k] == (k < rank - 2 ? k : 2 * rank - 3 - k);
  if (swap_last_two) {
    int64_t batch = 1;
    for (int k = 0; k < rank - 2; ++k) batch *= x.shape[k];
    return std::make_unique<SwapLastTwo>(x.id, y.id, batch, x.shape[rank - 2], x.shape[rank - 1],
                                         dtype_bytes(x.dtype));
  }
  Shape in_strides = row_major_strides(x.shape), strides;
  for (int64_t p : perm) strides.push_back(in_strides[p]);
  return std::make_unique<Strided>(x.id, y.id, y.shape, strides, 0, dtype_bytes(x.dtype), false, 0);
}

KernelPtr expand(const Node& n) {
  const TensorRef &x = n.in[0], &y = n.out[0];
  Shape xs(y.shape.size() - x.shape.size(), 1);
  xs.insert(xs.end(), x.shape.begin(), x.shape.end());
  Shape st = row_major_strides(xs);
  for (size_t k = 0; k < xs.size(); ++k)
    if (xs[k] == 1) st[k] = 0;
  return std::make_unique<Strided>(x.id, y.id, y.shape, st, 0, dtype_bytes(x.dtype), false, 0);
}

// The view of a slice of `full` (begin/step per axis) with the sliced shape `part`.
KernelPtr slice_kernel(const Node& n, const Shape& full, int full_id, const Shape& part,
                       int part_id, bool scatter, int dtype) {
  const SliceWindow w = slice_window(n.attrs, full);  // common/shape.h
  const std::vector<int64_t>& begin = w.begin;
  const std::vector<int64_t>& step = w.step;
  Shape st = row_major_strides(full), strides(full.size());
  int64_t base = 0;
  for (size_t k = 0; k < full.size(); ++k) {
    base += begin[k] * st[k];
    strides[k] = st[k] * step[k];
  }
  int64_t bytes = numel(full) * dtype_bytes(dtype);
  return std::make_unique<Strided>(full_id, part_id, part, strides, base, dtype_bytes(dtype),
                                   scatter, bytes);
}

KernelPtr slice(const Node& n) {
  return slice_kernel(n, n.in[0].shape, n.in[0].id, n.out[0].shape, n.out[0].id, false,
                      n.in[0].dtype);
}

KernelPtr slice_grad(const Node& n) {
  return slice_kernel(n, n.out[0].shape, n.out[0].id, n.in[0].shape, n.in[0].id, true,
                      n.out[0].dtype);
}

// Split along `axis`: each output is `outer` chunks of its share of the axis.
class Split : public Kernel {
 public:
  explicit Split(const Node& n) : x_(n.in[0].id) {
    const Shape& x = n.in[0].shape;
    int axis = norm_axis(n.attrs.i("axis"), x.size());
    int64_t esize = dtype_bytes(n.in[0].dtype);
    outer_ = 1;
    for (int k = 0; k < axis; ++k) outer_ *= x[k];
    int64_t inner = esize;
    for (size_t k = axis + 1; k < x.size(); ++k) inner *= x[k];
    row_ = x[axis] * inner;
    int64_t at = 0;
    for (const TensorRef& y : n.out) {
      parts_.push_back(Part{y.id, at, y.shape[axis] * inner});
      at += y.shape[axis] * inner;
    }
  }
  void run(const Run& r) override {
    const char* x = r.ptr[x_];
    for (const Part& p : parts_) {
      char* y = r.ptr[p.id];
      const int64_t outer = outer_, row = row_;
#pragma omp parallel for
      for (int64_t o = 0; o < outer; ++o) std::memcpy(y + o * p.bytes, x + o * row + p.at, p.bytes);
    }
  }

 private:
  struct Part {
    int id;
    int64_t at, bytes;
  };
  int x_;
  int64_t outer_, row_;
  std::vector<Part> parts_;
};

KernelPtr split(const Node& n) { return std::make_unique<Split>(n); }

// Concat of any dtype (oneDNN's concat takes float32 only): Split backwards, each input's
// share of every `outer` row copied into place.
class ConcatBytes : public Kernel {
 public:
  explicit ConcatBytes(const Node& n) : y_(n.out[0].id) {
    const Shape& y = n.out[0].shape;
    int axis = norm_axis(n.attrs.i("axis"), y.size());
    int64_t inner = dtype_bytes(n.out[0].dtype);
    for (size_t k = axis + 1; k < y.size(); ++k) inner *= y[k];
    outer_ = 1;
    for (int k = 0; k < axis; ++k) outer_ *= y[k];
    row_ = y[axis] * inner;
    int64_t at = 0;
    for (const TensorRef& x : n.in) {
      parts_.push_back(Part{x.id, at, x.shape[axis] * inner});
      at += x.shape[axis] * inner;
    }
  }
  void run(const Run& r) override {
    char* y = r.ptr[y_];
    for (const Part& p : parts_) {
      const char* x = r.ptr[p.id];
      const int64_t outer = outer_, row = row_;
#pragma omp parallel for
      for (int64_t o = 0; o < outer; ++o) std::memcpy(y + o * row + p.at, x + o * p.bytes, p.bytes);
    }
  }

 private:
  struct Part {
    int id;
    int64_t at, bytes;
  };
  int y_;
  int64_t outer_, row_;
  std::vector<Part> parts_;
};

KernelPtr concat(const Node& n) {
  const TensorRef& y = n.out[0];
  int axis = norm_axis(n.attrs.i("axis"), y.shape.size());
  if (y.dtype != F32) return std::make_unique<ConcatBytes>(n);
  if (n.in.size() == 1) return std::make_unique<Copy>(n.in[0].id, y.id, y.size() * 4);
  std::vector<memory::desc> srcs;
  for (const TensorRef& t : n.in) srcs.push_back(plain_md(t.shape, t.dtype));
  dnnl::concat::primitive_desc pd(n.engine, plain_md(y.shape, y.dtype), axis, srcs,
                                  user_scratchpad());
  std::vector<DnnlKernel::Arg> args;
  for (size_t k = 0; k < n.in.size(); ++k)
    args.push_back({DNNL_ARG_MULTIPLE_SRC + static_cast<int>(k), n.in[k].id});
  args.push_back({DNNL_ARG_DST, y.id});
  auto k = std::make_unique<DnnlKernel>();
  k->add(dnnl::concat(pd), pd, args);
  return k;
}

}  // namespace

PLANNER_REGISTER_KERNELS(shape) {
  r["Reshape"] = {reshape, "*"};
  r["Flatten"] = {reshape, "*"};
  r["StopGradient"] = {reshape, "*"};  // a view: the same bytes, no gradient (planner/ops/shape.py)
  r["Transpose"] = {transpose, "*"};
  r["Expand"] = {expand, "*"};
  r["Slice"] = {slice, "*"};
  r["SliceGrad"] = {slice_grad, "*"};
  r["Split"] = {split, "*"};
  r["Concat"] = {concat, "*"};
}

}  // namespace planner
