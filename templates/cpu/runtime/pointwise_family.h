// The kernel template of the pointwise table's ops (planner/ops/pointwise_table.py): one loop
// for every row, instantiated with the row's functor, which codegen/pointwise_cpp.py renders
// from the row's scalar formula into kernels/pointwise_table_<k>.cpp (generated, checked in).
//
// y = f(x0, x1, ...) with numpy broadcasting of the inputs to the output. Inputs of the
// output's size are read at the output's index, in one flat loop the compiler vectorizes;
// otherwise the output is walked row by row (its last axis), each input at its row's offset
// with a step of 0 or 1 along the row (loops.h's Broadcast). Both loops run on the calling
// thread below kGrain elements and split over the team above it, as map1 / map2 do.
#pragma once
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <utility>

#include "loops.h"

namespace planner {

// lgamma without glibc's global signgam (written by every thread of the team): the table's
// lgamma rows call it (codegen/pointwise_cpp.py), from every share of the table.
inline float planner_lgamma(float x) {
  int sign;
  return ::lgammaf_r(x, &sign);
}

template <class F, class Y, class... X>
class PointwiseFamily : public Kernel {
  static constexpr size_t kArity = sizeof...(X);

 public:
  explicit PointwiseFamily(const Node& n)
      : f_(n), y_(n.out[0].id), size_(n.out[0].size()),
        geometry_(n.out[0].shape, shapes_of(n.in)) {
    for (size_t k = 0; k < kArity; ++k) {
      ids_[k] = n.in[k].id;
      flat_ = flat_ && n.in[k].size() == size_;
      scalar_[k] = n.in[k].size() == 1 && size_ != 1;
      scalars_ = scalars_ && (n.in[k].size() == size_ || scalar_[k]);
    }
  }
  void run(const Run& r) override { run_with(r, std::index_sequence_for<X...>{}); }

 private:
  template <size_t... K>
  void run_with(const Run& r, std::index_sequence<K...>) {
    Y* y = r.at<Y>(y_);
    const std::tuple<const X*...> xs{reinterpret_cast<const X*>(r.ptr[ids_[K]])...};
    const F f = f_;  // a private copy: a member read through `this` would block vectorizing
    const int64_t size = size_;
    if (flat_) {
#pragma omp parallel for simd firstprivate(f) if(parallel: size >= kGrain)
      for (int64_t i = 0; i < size; ++i) y[i] = f(std::get<K>(xs)[i]...);
      return;
    }
    // hardtanh's bounds, a scalar factor: every other input of y's size. One input of one
    // element has nothing to block: the row walk below gives it the same bits, and the
    // table's unary functors (a quarter of them) compile one loop fewer.
    if constexpr (kArity > 1) {
      if (scalars_) {
        run_scalars(y, xs, f, std::index_sequence<K...>{});
        return;
      }
    }
    const int64_t rows = geometry_.rows(), inner = geometry_.inner();
    const std::array<int64_t, kArity> steps{geometry_.step(K)...};
#pragma omp parallel for firstprivate(f) if(size >= kGrain)
    for (int64_t row = 0; row < rows; ++row) {
      const std::tuple<const X*...> at{std::get<K>(xs) + geometry_.offset(K, row)...};
      Y* out = y + row * inner;
      for (int64_t j = 0; j < inner; ++j) out[j] = f(std::get<K>(at)[j * steps[K]]...);
    }
  }

  // Inputs of y's size and single-element ones: blocks of y, each scalar input read from a
  // block-long array of its value, filled once per thread, so each block is one flat loop the
  // compiler vectorizes. The row walk's per-row offsets (an integer division per axis and
  // input) over NCHW rows of a few elements cost mobilenet_v2's relu6 (HardTanh [x, 0, 6]) and
  // its gradient more than the arithmetic. Every element is f of the same values: the same
  // bits as the row walk.
  template <size_t... K>
  void run_scalars(Y* y, const std::tuple<const X*...>& xs, const F f,
                   std::index_sequence<K...>) const {
    constexpr int64_t kBlock = 256;
    const int64_t size = size_;
    const std::array<bool, kArity> scalar = scalar_;
#pragma omp parallel firstprivate(f) if(size >= kGrain)
    {
      std::tuple<std::array<X, kBlock>...> filled;
      ((std::get<K>(scalar) ? std::get<K>(filled).fill(std::get<K>(xs)[0]) : void()), ...);
#pragma omp for schedule(static)
      for (int64_t b = 0; b < size; b += kBlock) {
        const int64_t n = std::min(kBlock, size - b);
        const std::tuple<const X*...> at{std::get<K>(scalar) ? std::get<K>(filled).data()
                                                            : std::get<K>(xs) + b...};
        Y* out = y + b;
#pragma omp simd
        for (int64_t j = 0; j < n; ++j) out[j] = f(std::get<K>(at)[j]...);
      }
    }
  }

  F f_;
  int y_;
  int64_t size_;
  Broadcast geometry_;
  std::array<int, kArity> ids_{};
  std::array<bool, kArity> scalar_{};
  bool flat_ = true;
  bool scalars_ = true;
};

// The kernel of `op` for the node's dtypes: `kinds` lists, per signature the op was generated
// for ("ff_b": float32, float32 -> bool; numpy's type characters), its factory.
struct PointwiseKind {
  const char* sig;
  KernelPtr (*make)(const Node&);
};

template <class F, class Y, class... X>
KernelPtr make_pointwise(const Node& n) {
  return std::make_unique<PointwiseFamily<F, Y, X...>>(n);
}

inline char pointwise_code(int dtype) {
  switch (dtype) {
    case F32: return 'f';
    case F64: return 'd';
    case I64: return 'l';
    case I32: return 'i';
    case BOOL: return '?';
    case BF16: return 'E';
    case F16: return 'e';
  }
  return '-';
}

template <size_t N>
KernelPtr pick_pointwise(const Node& n, const char* op, const PointwiseKind (&kinds)[N]) {
  std::string sig;
  for (const TensorRef& t : n.in) sig += pointwise_code(t.dtype);
  sig += '_';
  for (const TensorRef& t : n.out) sig += pointwise_code(t.dtype);
  for (const PointwiseKind& k : kinds)
    if (sig == k.sig) return k.make(n);
  std::string have;
  for (const PointwiseKind& k : kinds) have += std::string(have.empty() ? "" : ", ") + k.sig;
  throw std::runtime_error(std::string(op) + ": no CPU kernel for dtypes " + sig +
                           " (it has " + have + ")");
}

}  // namespace planner
