// Shape ops on the GPU, following planner/ops/shape.py and Expand in elementwise.py:
//   Reshape, Flatten     a copy on the stream, or nothing when the plan gives y x's bytes
//   Transpose, Expand, Slice, Split (per output)   a strided gather: y[i] = x[base + sum i_k s_k]
//   Concat (per input)   the same mapping as a scatter: y[base + sum i_k s_k] = x_j[i]
//   SliceGrad            a gather over dx: dy's element where the slice selected it, else 0
// Slice attrs carry the normalised per-axis `begin` and `step` (codegen resolves numpy's
// clamping), so the kernels see plain arithmetic. Any dtype moves (only its size matters).
//
// Why it is built this way:
// - Every mapping is computed at load and passed by value as a small struct (rank <= 8):
//   nothing in device memory to set up, nothing allocated at run time.
// - At load the mapping is simplified: size-1 axes dropped, axes that are contiguous in the
//   view merged (a Slice of whole rows is one axis), and where the last axis is contiguous and
//   everything divides, elements are widened up to 16 bytes, so most copies move uint4s. The
//   wide form is used when both tensors' addresses are aligned to it (checked each run on the
//   host from the pointers alone), else the element-sized form.
// - Indices are 32-bit when every offset fits (integer division dominates these kernels).
// - SliceGrad writes dx once (a gather with a zero outside the slice) rather than a memset
//   then a scatter: one pass, no ordering between two launches to get wrong.
// - Transposes gather (writes coalesced, reads strided through L1/L2), not a shared-memory tile
//   transpose: simple and generic; a tiled path is the thing to add if profiles show them.
#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "../groups.cuh"
#include "shape.h"

namespace planner {
namespace {

// dense element k (row-major over dims) <-> view element base + sum_a coord_a * stride[a].
struct Geom {
  int rank = 0;
  int64_t dims[kMaxRank] = {};
  int64_t stride[kMaxRank] = {};
  int64_t base = 0;
};

template <class T, class I, bool kScatter>
__global__ void strided_copy(T* __restrict__ view, T* __restrict__ dense, I total, Geom g) {
  for (I k = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; k < total;
       k += static_cast<I>(gridDim.x) * blockDim.x) {
    I rest = k, off = static_cast<I>(g.base);
    for (int a = g.rank - 1; a > 0; --a) {
      const I n = static_cast<I>(g.dims[a]);
      const I q = rest / n;
      off += (rest - q * n) * static_cast<I>(g.stride[a]);
      rest = q;
    }
    off += rest * static_cast<I>(g.stride[0]);
    if (kScatter)
      view[off] = dense[k];
    else
      dense[k] = view[off];
  }
}

Shape row_major_strides(const Shape& s) {
  Shape st(s.size(), 1);
  for (int k = static_cast<int>(s.size()) - 2; k >= 0; --k) st[k] = st[k + 1] * s[k + 1];
  return st;
}

// The simplified mapping of a dense tensor of shape `dims` onto a view (strides, base), in
// elements of `esize` bytes.
Geom simplify(const Shape& dims, const Shape& strides, int64_t base) {
  std::vector<int64_t> d, s;
  for (size_t a = 0; a < dims.size(); ++a) {
    if (dims[a] == 1) continue;
    if (!d.empty() && s.back() == strides[a] * dims[a]) {
      d.back() *= dims[a];
      s.back() = strides[a];
      continue;
    }
    d.push_back(dims[a]);
    s.push_back(strides[a]);
  }
  if (d.empty()) {
    d.push_back(1);
    s.push_back(0);
  }
  if (d.size() > static_cast<size_t>(kMaxRank)) throw std::runtime_error("rank above 8");
  Geom g;
  g.rank = static_cast<int>(d.size());
  for (int a = 0; a < g.rank; ++a) {
    g.dims[a] = d[a];
    g.stride[a] = s[a];
  }
  g.base = base;
  return g;
}

// Halves the element count while the last axis is contiguous and everything divides by two.
int widen(Geom& g, int esize) {
  while (esize < 16) {
    const int last = g.rank - 1;
    if (g.stride[last] != 1 || g.dims[last] % 2 || g.base % 2) break;
    bool even = true;
    for (int a = 0; a < last; ++a) even = even && g.stride[a] % 2 == 0;
    if (!even) break;
    g.dims[last] /= 2;
    for (int a = 0; a < last; ++a) g.stride[a] /= 2;
    g.base /= 2;
    esize *= 2;
  }
  return esize;
}

int64_t total_of(const Geom& g) {
  int64_t t = 1;
  for (int a = 0; a < g.rank; ++a) t *= g.dims[a];
  return t;
}

// Largest view offset + 1 (a flip's Slice walks an axis with a negative stride from its end).
int64_t view_extent(const Geom& g) {
  int64_t e = g.base + 1;
  for (int a = 0; a < g.rank; ++a) e += (g.dims[a] - 1) * std::max<int64_t>(g.stride[a], 0);
  return e;
}

bool aligned(const void* p, int bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

// One strided move between a view tensor and a dense one, in two forms (element-sized, wide).
class Move {
 public:
  Move(int view, int dense, const Shape& dims, const Shape& strides, int64_t base, int esize,
       bool scatter, int threads)
      : view_(view), dense_(dense), scatter_(scatter), threads_(threads), esize_(esize) {
    if (esize != 1 && esize != 2 && esize != 4 && esize != 8)
      throw std::runtime_error("unsupported element size " + std::to_string(esize));
    narrow_ = simplify(dims, strides, base);
    wide_ = narrow_;
    wide_esize_ = widen(wide_, esize);
    total_ = total_of(narrow_);
    for (int a = 0; a < narrow_.rank; ++a)
      if (narrow_.dims[a] == 0) total_ = 0;
  }
  void run(const Run& r, const char* what) const {
    if (total_ == 0) return;
    char* view = r.ptr[view_];
    char* dense = r.ptr[dense_];
    if (wide_esize_ > esize_ && aligned(view, wide_esize_) && aligned(dense, wide_esize_))
      go(r, wide_, wide_esize_, view, dense);
    else
      go(r, narrow_, esize_, view, dense);
    PLANNER_LAUNCHED(what);
  }

 private:
  void go(const Run& r, const Geom& g, int esize, char* view, char* dense) const {
    switch (esize) {
      case 1: pick<uint8_t>(r, g, view, dense); break;
      case 2: pick<uint16_t>(r, g, view, dense); break;
      case 4: pick<uint32_t>(r, g, view, dense); break;
      case 8: pick<uint64_t>(r, g, view, dense); break;
      default: pick<uint4>(r, g, view, dense); break;
    }
  }
  template <class T>
  void pick(const Run& r, const Geom& g, char* view, char* dense) const {
    const int64_t total = total_of(g);
    const bool small = index32(total, blocks_for(total, threads_), threads_) &&
                       view_extent(g) < (int64_t{1} << 31);
    if (small)
      launch<T, int32_t>(r, g, total, view, dense);
    else
      launch<T, int64_t>(r, g, total, view, dense);
  }
  template <class T, class I>
  void launch(const Run& r, const Geom& g, int64_t total, char* view, char* dense) const {
    const unsigned blocks = blocks_for(total, threads_);
    T* v = reinterpret_cast<T*>(view);
    T* d = reinterpret_cast<T*>(dense);
    if (scatter_)
      strided_copy<T, I, true><<<blocks, threads_, 0, r.stream>>>(v, d, static_cast<I>(total), g);
    else
      strided_copy<T, I, false><<<blocks, threads_, 0, r.stream>>>(v, d, static_cast<I>(total), g);
  }

  int view_, dense_;
  bool scatter_;
  int threads_, esize_, wide_esize_ = 1;
  Geom narrow_, wide_;
  int64_t total_ = 0;
};

// Runs its moves in order on the stream (Split: one per output; Concat: one per input).
class Moves : public Kernel {
 public:
  explicit Moves(const char* what) : what_(what) {}
  void run(const Run& r) override {
    for (const Move& m : moves_) m.run(r, what_);
  }
  std::vector<Move> moves_;

 private:
  const char* what_;
};

KernelPtr reshape(const Node& n) {
  const TensorRef& y = n.out[0];
  if (n.in[0].size() != y.size() || n.in[0].dtype != y.dtype)
    throw std::runtime_error("Reshape: input and output differ in size or dtype");
  return std::make_unique<Copy>(n.in[0].id, y.id, y.size() * dtype_bytes(y.dtype));
}

KernelPtr transpose(const Node& n) {
  const TensorRef &x = n.in[0], &y = n.out[0];
  const std::vector<int64_t> perm = transpose_perm(n.attrs, x.shape.size());  // common/shape.h
  const Shape in_strides = row_major_strides(x.shape);
  Shape strides;
  for (int64_t p : perm) strides.push_back(in_strides[p]);
  auto k = std::make_unique<Moves>("Transpose");
  k->moves_.emplace_back(x.id, y.id, y.shape, strides, 0, dtype_bytes(x.dtype), false,
                         block_threads(n));
  return k;
}

KernelPtr expand(const Node& n) {
  const TensorRef &x = n.in[0], &y = n.out[0];
  if (x.shape.size() > y.shape.size()) throw std::runtime_error("Expand: x has a higher rank");
  Shape xs(y.shape.size() - x.shape.size(), 1);
  xs.insert(xs.end(), x.shape.begin(), x.shape.end());
  Shape st = row_major_strides(xs);
  for (size_t k = 0; k < xs.size(); ++k) {
    if (xs[k] == 1) st[k] = 0;
    else if (xs[k] != y.shape[k]) throw std::runtime_error("Expand: shapes do not broadcast");
  }
  auto k = std::make_unique<Moves>("Expand");
  k->moves_.emplace_back(x.id, y.id, y.shape, st, 0, dtype_bytes(x.dtype), false,
                         block_threads(n));
  return k;
}

// Per-axis begin and step of a slice of a tensor of shape `full` (the kernel_attrs).
void slice_attrs(const Node& n, const Shape& full, std::vector<int64_t>& begin,
                 std::vector<int64_t>& step) {
  SliceWindow w = slice_window(n.attrs, full);  // common/shape.h
  begin = std::move(w.begin);
  step = std::move(w.step);
}

KernelPtr slice(const Node& n) {
  const TensorRef &x = n.in[0], &y = n.out[0];
  std::vector<int64_t> begin, step;
  slice_attrs(n, x.shape, begin, step);
  const Shape st = row_major_strides(x.shape);
  Shape strides(x.shape.size());
  int64_t base = 0;
  bool empty = false;
  for (size_t k = 0; k < x.shape.size(); ++k) {
    base += begin[k] * st[k];
    strides[k] = st[k] * step[k];
    empty = empty || y.shape[k] == 0;
  }
  if (empty) base = 0;  // nothing is read; begin may sit at the end of the axis
  auto k = std::make_unique<Moves>("Slice");
  k->moves_.emplace_back(x.id, y.id, y.shape, strides, base, dtype_bytes(x.dtype), false,
                         block_threads(n));
  return k;
}

// SliceGrad over dx (shape full): where every axis's coordinate c is begin + step * j with
// 0 <= j < part, dy's element j (row-major over part), else zero. A negative step (a flip)
// gives d and s of equal signs inside the slice; truncating division makes j < 0 outside.
struct SliceGradGeom {
  int rank = 0;
  int64_t full[kMaxRank] = {}, begin[kMaxRank] = {}, step[kMaxRank] = {}, part[kMaxRank] = {},
          pstride[kMaxRank] = {};
};

template <class T, class I>
__global__ void slice_grad(const T* __restrict__ dy, T* __restrict__ dx, I total,
                           SliceGradGeom g) {
  for (I k = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; k < total;
       k += static_cast<I>(gridDim.x) * blockDim.x) {
    I rest = k, off = 0;
    bool inside = true;
    for (int a = g.rank - 1; a >= 0; --a) {
      const I n = static_cast<I>(g.full[a]);
      const I q = rest / n;
      const I d = rest - q * n - static_cast<I>(g.begin[a]);
      rest = q;
      const I s = static_cast<I>(g.step[a]);
      const I j = d / s;
      if (j < 0 || d - j * s != 0 || j >= static_cast<I>(g.part[a])) inside = false;
      else off += j * static_cast<I>(g.pstride[a]);
    }
    dx[k] = inside ? dy[off] : T{};
  }
}

class SliceGrad : public Kernel {
 public:
  explicit SliceGrad(const Node& n)
      : threads_(block_threads(n)), dy_(n.in[0].id), dx_(n.out[0].id),
        esize_(dtype_bytes(n.out[0].dtype)) {
    const Shape& full = n.out[0].shape;
    const Shape& part = n.in[0].shape;
    if (esize_ != 1 && esize_ != 2 && esize_ != 4 && esize_ != 8)
      throw std::runtime_error("SliceGrad: unsupported element size");
    if (part.size() != full.size()) throw std::runtime_error("SliceGrad: dy's rank differs");
    std::vector<int64_t> begin, step;
    slice_attrs(n, full, begin, step);
    // Merge runs of axes the slice takes whole (begin 0, step 1, all of it).
    int r = 0;
    auto whole = [&](int a) { return g_.begin[a] == 0 && g_.step[a] == 1 && g_.part[a] == g_.full[a]; };
    for (size_t a = 0; a < full.size(); ++a) {
      if (r > 0 && whole(r - 1) && begin[a] == 0 && step[a] == 1 && part[a] == full[a]) {
        g_.full[r - 1] *= full[a];
        g_.part[r - 1] *= full[a];
        continue;
      }
      if (r == kMaxRank) throw std::runtime_error("SliceGrad: rank above 8");
      g_.full[r] = full[a];
      g_.part[r] = part[a];
      g_.begin[r] = begin[a];
      g_.step[r] = step[a];
      ++r;
    }
    if (r == 0) {
      g_.full[0] = g_.part[0] = g_.step[0] = 1;
      r = 1;
    }
    g_.rank = r;
    int64_t ps = 1, fs = 1;
    for (int a = r - 1; a >= 0; --a) {
      g_.pstride[a] = ps;
      ps *= g_.part[a];
      fs *= g_.full[a];
    }
    total_ = fs;
    blocks_ = blocks_for(fs, threads_);
    small_ = index32(fs, blocks_, threads_);
  }
  void run(const Run& r) override {
    if (total_ == 0) return;
    switch (esize_) {
      case 1: go<uint8_t>(r); break;
      case 2: go<uint16_t>(r); break;
      case 4: go<uint32_t>(r); break;
      default: go<uint64_t>(r); break;
    }
    PLANNER_LAUNCHED("SliceGrad");
  }

 private:
  template <class T>
  void go(const Run& r) {
    const T* dy = r.at<T>(dy_);
    T* dx = r.at<T>(dx_);
    if (small_)
      slice_grad<T, int32_t><<<blocks_, threads_, 0, r.stream>>>(dy, dx,
                                                                 static_cast<int32_t>(total_), g_);
    else
      slice_grad<T, int64_t><<<blocks_, threads_, 0, r.stream>>>(dy, dx, total_, g_);
  }

  int threads_, dy_, dx_, esize_;
  SliceGradGeom g_;
  int64_t total_ = 0;
  bool small_ = true;
  unsigned blocks_ = 1;
};

KernelPtr slice_grad_kernel(const Node& n) { return std::make_unique<SliceGrad>(n); }

// Split: output j is the view of x from offset at_j along `axis`, x's strides.
KernelPtr split(const Node& n) {
  const TensorRef& x = n.in[0];
  if (x.shape.empty()) throw std::runtime_error("Split: x must have rank >= 1");
  const int axis = norm_axis(n.attrs.i("axis"), x.shape.size());
  const Shape st = row_major_strides(x.shape);
  auto k = std::make_unique<Moves>("Split");
  int64_t at = 0;
  for (const TensorRef& y : n.out) {
    if (y.dtype != x.dtype) throw std::runtime_error("Split: outputs must keep x's dtype");
    const int64_t base = at < x.shape[axis] ? at * st[axis] : 0;
    k->moves_.emplace_back(x.id, y.id, y.shape, st, base, dtype_bytes(x.dtype), false,
                           block_threads(n));
    at += y.shape[axis];
  }
  return k;
}

// Concat: input j scatters into the view of y from offset at_j along `axis`, y's strides.
KernelPtr concat(const Node& n) {
  const TensorRef& y = n.out[0];
  if (y.shape.empty()) throw std::runtime_error("Concat: inputs must have rank >= 1");
  if (n.in.size() == 1) return std::make_unique<Copy>(n.in[0].id, y.id, y.size() * dtype_bytes(y.dtype));
  const int axis = norm_axis(n.attrs.i("axis"), y.shape.size());
  const Shape st = row_major_strides(y.shape);
  auto k = std::make_unique<Moves>("Concat");
  int64_t at = 0;
  for (const TensorRef& x : n.in) {
    if (x.dtype != y.dtype) throw std::runtime_error("Concat: inputs must share y's dtype");
    const int64_t base = at < y.shape[axis] ? at * st[axis] : 0;
    k->moves_.emplace_back(y.id, x.id, x.shape, st, base, dtype_bytes(y.dtype), true,
                           block_threads(n));
    at += x.shape[axis];
  }
  return k;
}

}  // namespace

PLANNER_REGISTER_KERNELS(shape) {
  r["Reshape"] = reshape;
  r["Flatten"] = reshape;
  r["StopGradient"] = reshape;  // a view: the same bytes, no gradient (planner/ops/shape.py)
  r["Transpose"] = transpose;
  r["Expand"] = expand;
  r["Slice"] = slice;
  r["SliceGrad"] = slice_grad_kernel;
  r["Split"] = split;
  r["Concat"] = concat;
}

}  // namespace planner
