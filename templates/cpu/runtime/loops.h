// Small pieces shared by the plain-loop kernels.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <stdexcept>

#include "kernel.h"

namespace planner {

// Loops over fewer elements than this run on the calling thread alone (`if(n >= kGrain)`):
// waking a team's sleeping worker costs 10-40 us, more than splitting a small loop saves (a
// 128-float SGD took 40 us on 2 threads, 0.8 on one: resnet-50's 161 parameter updates were
// 8% of its step). PyTorch's at::parallel_for uses the same grain. On a `parallel for simd`
// the clause is `if(parallel: n >= kGrain)`: a bare `if` applies to the simd construct too
// (OpenMP 5.0), and GCC then ran every loop under the grain scalar, branches and all (a folded
// Relu over 16K floats: 68 us against 2 us vectorised).
constexpr int64_t kGrain = 32768;

// The sum of f(i) over i in [0, n) in double, the same bits on any thread count (a plan's
// variants compute the main schedule's bits: docs/executor.md, "Busy machines"): kSumParts
// contiguous parts (n when fewer), each summed in index order, the team sharing the parts
// out, then the parts added in order. An OpenMP reduction splits by the team instead.
constexpr int64_t kSumParts = 16;
template <class F>
double sum_in_parts(int64_t n, F f, bool parallel = true) {
  const int64_t parts = std::max<int64_t>(1, std::min(kSumParts, n));
  double part[kSumParts] = {};
#pragma omp parallel for schedule(static) if(parallel && parts > 1)
  for (int64_t k = 0; k < parts; ++k) {
    double s = 0;
    for (int64_t i = n * k / parts, end = n * (k + 1) / parts; i < end; ++i) s += f(i);
    part[k] = s;
  }
  double total = 0;
  for (int64_t k = 0; k < parts; ++k) total += part[k];
  return total;
}

// Copies `bytes` from one tensor to another; nothing when they share bytes (an alias).
class Copy : public Kernel {
 public:
  Copy(int from, int to, int64_t bytes) : from_(from), to_(to), bytes_(bytes) {}
  void run(const Run& r) override {
    if (r.ptr[from_] != r.ptr[to_]) std::memcpy(r.ptr[to_], r.ptr[from_], bytes_);
  }

 private:
  int from_, to_;
  int64_t bytes_;
};

// Calls f(T{}) with T the unsigned integer of `bytes` bytes: kernels that only move elements
// (copies, transposes) need one instantiation per element size, not per dtype.
template <class F>
void by_element_size(int bytes, F&& f) {
  switch (bytes) {
    case 1: f(uint8_t{}); break;
    case 2: f(uint16_t{}); break;
    case 4: f(uint32_t{}); break;
    case 8: f(uint64_t{}); break;
    default: throw std::runtime_error("unsupported element size");
  }
}

}  // namespace planner

namespace planner {

// y[i] = f(x[i]): a float32 element-wise loop. The functors here follow the numpy reference
// element by element, NaN and infinities included (what oneDNN's eltwise does not promise).
// With T = uint16_t the loop runs on the 16-bit words of bfloat16 / float16 tensors (map1_bits:
// functors on the bits, the caller checks the dtypes).
template <class F, class T = float>
class Map1 : public Kernel {
 public:
  Map1(const Node& n, F f) : x_(n.in[0].id), y_(n.out[0].id), size_(n.out[0].size()), f_(f) {
    if constexpr (sizeof(T) == sizeof(float)) require_f32(n);
  }
  void run(const Run& r) override {
    const T* x = r.at<T>(x_);
    T* y = r.at<T>(y_);
    const int64_t size = size_;
    const F f = f_;  // a private copy: a member read through `this` would block vectorizing
#pragma omp parallel for firstprivate(f) if(size >= kGrain)
    for (int64_t i = 0; i < size; ++i) y[i] = f(x[i]);
  }

 private:
  int x_, y_;
  int64_t size_;
  F f_;
};

// dx[i] = f(dy[i], x[i]) for two inputs of one shape (the gradient ops taking [dy, x]).
template <class F, class T = float>
class Map2 : public Kernel {
 public:
  Map2(const Node& n, F f)
      : a_(n.in[0].id), b_(n.in[1].id), y_(n.out[0].id), size_(n.out[0].size()), f_(f) {
    if constexpr (sizeof(T) == sizeof(float)) require_f32(n);
  }
  void run(const Run& r) override {
    const T* a = r.at<T>(a_);
    const T* b = r.at<T>(b_);
    T* y = r.at<T>(y_);
    const int64_t size = size_;
    const F f = f_;
#pragma omp parallel for firstprivate(f) if(size >= kGrain)
    for (int64_t i = 0; i < size; ++i) y[i] = f(a[i], b[i]);
  }

 private:
  int a_, b_, y_;
  int64_t size_;
  F f_;
};

template <class F> KernelPtr map1(const Node& n, F f) { return std::make_unique<Map1<F>>(n, f); }
template <class F> KernelPtr map2(const Node& n, F f) { return std::make_unique<Map2<F>>(n, f); }
// float64 (every tensor of the node): the same loops on doubles, for the float64 kernels.
inline bool all_f64(const Node& n) {
  for (const auto* side : {&n.in, &n.out})
    for (const TensorRef& t : *side)
      if (t.dtype != F64) return false;
  return true;
}
template <class F> KernelPtr map1_f64(const Node& n, F f) {
  return std::make_unique<Map1<F, double>>(n, f);
}
template <class F> KernelPtr map2_f64(const Node& n, F f) {
  return std::make_unique<Map2<F, double>>(n, f);
}
template <class F> KernelPtr map1_bits(const Node& n, F f) {
  return std::make_unique<Map1<F, uint16_t>>(n, f);
}
template <class F> KernelPtr map2_bits(const Node& n, F f) {
  return std::make_unique<Map2<F, uint16_t>>(n, f);
}

// numpy broadcasting of several inputs to one output shape, walked row by row: the output is
// `rows` rows of `inner` elements (its last axis); per input, the element offset of a row's
// start and the step along the row (0 where that input broadcasts along the last axis).
class Broadcast {
 public:
  Broadcast(const Shape& out, const std::vector<Shape>& ins) : out_(out.empty() ? Shape{1} : out) {
    const size_t rank = out_.size();
    for (const Shape& s : ins) {
      Shape padded(rank - std::min(rank, s.size()), 1);
      padded.insert(padded.end(), s.begin(), s.end());
      Shape strides(rank, 0);
      int64_t m = 1;
      for (int k = static_cast<int>(rank) - 1; k >= 0; --k) {
        strides[k] = padded[k] == 1 ? 0 : m;
        m *= padded[k];
      }
      strides_.push_back(strides);
    }
    inner_ = out_.back();
    rows_ = inner_ ? numel(out_) / inner_ : 0;
  }
  int64_t rows() const { return rows_; }
  int64_t inner() const { return inner_; }
  // Step along the last axis of input k: 0 or 1.
  int64_t step(size_t k) const { return strides_[k].back(); }
  // Offset of input k's element at the start of output row `row`.
  int64_t offset(size_t k, int64_t row) const {
    int64_t off = 0;
    for (int a = static_cast<int>(out_.size()) - 2; a >= 0; --a) {
      off += (row % out_[a]) * strides_[k][a];
      row /= out_[a];
    }
    return off;
  }

 private:
  Shape out_;
  std::vector<Shape> strides_;
  int64_t rows_ = 0, inner_ = 1;
};

inline std::vector<Shape> shapes_of(const std::vector<TensorRef>& ts) {
  std::vector<Shape> out;
  for (const TensorRef& t : ts) out.push_back(t.shape);
  return out;
}

}  // namespace planner
