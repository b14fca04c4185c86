// Broadcasting ops as plain OpenMP loops, row by row over the output (see Broadcast in
// loops.h): Pow, Max, Min (NaN propagates, as numpy's maximum/minimum; oneDNN's binary max
// drops it), MaxGrad, MinGrad (torch's tie rule; these five in float64 too: the same loops on
// doubles, torch's formulas, so float64 matrix_rank and float_power run), Where (a bool,
// float32, float64, int64 or int32 condition; branches of those or int16, int8, uint8; float64
// branches under a bool or float64 condition), PRelu and PReluGrad.
#include <omp.h>

#include <cmath>

#include "../loops.h"
#include "integer.h"

namespace planner {
namespace {

// y = f(a, b), numpy broadcasting, float32 (T = double: every tensor float64).
template <class F, class T = float>
class Binary : public Kernel {
 public:
  Binary(const Node& n, F f)
      : a_(n.in[0].id), b_(n.in[1].id), y_(n.out[0].id), bc_(n.out[0].shape, shapes_of(n.in)), f_(f) {
    if constexpr (sizeof(T) == sizeof(float)) require_f32(n);
  }
  void run(const Run& r) override {
    const T* a = r.at<T>(a_);
    const T* b = r.at<T>(b_);
    T* y = r.at<T>(y_);
    const int64_t inner = bc_.inner(), sa = bc_.step(0), sb = bc_.step(1);
#pragma omp parallel for
    for (int64_t row = 0; row < bc_.rows(); ++row) {
      const T* pa = a + bc_.offset(0, row);
      const T* pb = b + bc_.offset(1, row);
      T* py = y + row * inner;
      for (int64_t i = 0; i < inner; ++i) py[i] = f_(pa[i * sa], pb[i * sb]);
    }
  }

 private:
  int a_, b_, y_;
  Broadcast bc_;
  F f_;
};

template <class F> KernelPtr binary(const Node& n, F f) { return std::make_unique<Binary<F>>(n, f); }

// f in T's precision: float64 where every tensor of the node is, else float32.
template <template <class> class Fn>
KernelPtr binary_of(const Node& n) {
  if (all_f64(n)) return std::make_unique<Binary<Fn<double>, double>>(n, Fn<double>{});
  return binary(n, Fn<float>{});
}

template <class T> struct PowOf { T operator()(T a, T b) const { return std::pow(a, b); } };
template <class T> struct MaxOf { T operator()(T a, T b) const { return a != a || a > b ? a : b; } };
template <class T> struct MinOf { T operator()(T a, T b) const { return a != a || a < b ? a : b; } };

KernelPtr pow_(const Node& n) { return binary_of<PowOf>(n); }
KernelPtr max_(const Node& n) {
  if (is_integer(n.in[0].dtype)) return int_elementwise(n, IntOp::Max);
  return binary_of<MaxOf>(n);
}
KernelPtr min_(const Node& n) {
  if (is_integer(n.in[0].dtype)) return int_elementwise(n, IntOp::Min);
  return binary_of<MinOf>(n);
}

// [dy, a, b] -> [da, db] in dy's shape: dy to the winner, half to each on a tie; a NaN compares
// neither way, so both get dy (torch.maximum's backward). T = double: every tensor float64.
template <class T>
class Extremum : public Kernel {
 public:
  Extremum(const Node& n, bool larger)
      : dy_(n.in[0].id), a_(n.in[1].id), b_(n.in[2].id), da_(n.out[0].id), db_(n.out[1].id),
        larger_(larger), bc_(n.out[0].shape, shapes_of(n.in)) {
    if constexpr (sizeof(T) == sizeof(float)) require_f32(n);
  }
  void run(const Run& r) override {
    const T* dy = r.at<T>(dy_);
    const T* a = r.at<T>(a_);
    const T* b = r.at<T>(b_);
    T* da = r.at<T>(da_);
    T* db = r.at<T>(db_);
    const int64_t inner = bc_.inner(), sa = bc_.step(1), sb = bc_.step(2);
    const bool larger = larger_;
#pragma omp parallel for
    for (int64_t row = 0; row < bc_.rows(); ++row) {
      const T* pa = a + bc_.offset(1, row);
      const T* pb = b + bc_.offset(2, row);
      const int64_t o = row * inner;
      for (int64_t i = 0; i < inner; ++i) {
        const T x = pa[i * sa], z = pb[i * sb], g = dy[o + i];
        const T shared = x == z ? g / T(2) : g;
        const bool a_loses = larger ? x < z : x > z, b_loses = larger ? x > z : x < z;
        da[o + i] = a_loses ? T(0) : shared;
        db[o + i] = b_loses ? T(0) : shared;
      }
    }
  }

 private:
  int dy_, a_, b_, da_, db_;
  bool larger_;
  Broadcast bc_;
};

KernelPtr extremum_grad(const Node& n, bool larger) {
  if (all_f64(n)) return std::make_unique<Extremum<double>>(n, larger);
  return std::make_unique<Extremum<float>>(n, larger);
}
KernelPtr max_grad(const Node& n) { return extremum_grad(n, true); }
KernelPtr min_grad(const Node& n) { return extremum_grad(n, false); }

// y = a where cond != 0 else b; T is the condition's element type, V the branches'.
template <class T, class V>
class Where : public Kernel {
 public:
  explicit Where(const Node& n)
      : c_(n.in[0].id), a_(n.in[1].id), b_(n.in[2].id), y_(n.out[0].id),
        bc_(n.out[0].shape, shapes_of(n.in)) {}
  void run(const Run& r) override {
    const T* c = r.at<T>(c_);
    const V* a = r.at<V>(a_);
    const V* b = r.at<V>(b_);
    V* y = r.at<V>(y_);
    const int64_t inner = bc_.inner(), sc = bc_.step(0), sa = bc_.step(1), sb = bc_.step(2);
#pragma omp parallel for
    for (int64_t row = 0; row < bc_.rows(); ++row) {
      const T* pc = c + bc_.offset(0, row);
      const V* pa = a + bc_.offset(1, row);
      const V* pb = b + bc_.offset(2, row);
      V* py = y + row * inner;
      for (int64_t i = 0; i < inner; ++i) py[i] = pc[i * sc] != T(0) ? pa[i * sa] : pb[i * sb];
    }
  }

 private:
  int c_, a_, b_, y_;
  Broadcast bc_;
};

template <class V>
KernelPtr where_of(const Node& n) {
  switch (n.in[0].dtype) {
    case BOOL: return std::make_unique<Where<bool, V>>(n);
    case F32: return std::make_unique<Where<float, V>>(n);
    case F64: return std::make_unique<Where<double, V>>(n);
    case I64: return std::make_unique<Where<int64_t, V>>(n);
    case I32: return std::make_unique<Where<int32_t, V>>(n);
  }
  throw std::runtime_error("Where: the condition must be bool, float32, float64, int64 or int32");
}

KernelPtr where(const Node& n) {
  if (n.in[1].dtype == F32) return where_of<float>(n);
  // float64 branches under a bool or float64 condition: kl_div's t log t where t != 0
  if (n.in[1].dtype == F64) return where_of<double>(n);
  if (n.in[1].dtype == I64) return where_of<int64_t>(n);
  if (n.in[1].dtype == I32) return where_of<int32_t>(n);
  if (n.in[1].dtype == BOOL) return where_of<bool>(n);
  if (n.in[1].dtype == I16) return where_of<int16_t>(n);
  if (n.in[1].dtype == I8) return where_of<int8_t>(n);
  if (n.in[1].dtype == U8) return where_of<uint8_t>(n);
  throw std::runtime_error("Where: the branches must be float32, float64, an integer or bool");
}

KernelPtr prelu(const Node& n) {
  return binary(n, [](float x, float slope) { return x < 0.f ? slope * x : x; });
}

// [dy, x, slope] -> [dx, dslope], torch's convention (planner/ops/kinks.py): dy where x > 0,
// else slope * dy (x == 0 and NaN too). dslope sums dy * x where not x > 0 over the elements each slope
// value covers: one pass in double in the scratch area, serial (a few parameters, summed in a
// fixed order), then dx in parallel.
class PReluGrad : public Kernel {
 public:
  explicit PReluGrad(const Node& n)
      : dy_(n.in[0].id), x_(n.in[1].id), s_(n.in[2].id), dx_(n.out[0].id), ds_(n.out[1].id),
        slopes_(n.in[2].size()), bc_(n.in[1].shape, {n.in[1].shape, n.in[2].shape}) {
    require_f32(n);
  }
  size_t scratch_bytes() const override { return sizeof(double) * slopes_; }
  void run(const Run& r) override {
    const float* dy = r.at<float>(dy_);
    const float* x = r.at<float>(x_);
    const float* s = r.at<float>(s_);
    float* dx = r.at<float>(dx_);
    float* ds = r.at<float>(ds_);
    double* acc = reinterpret_cast<double*>(r.scratch);
    std::fill(acc, acc + slopes_, 0.0);
    const int64_t inner = bc_.inner(), ss = bc_.step(1);
    for (int64_t row = 0; row < bc_.rows(); ++row) {
      const int64_t o = row * inner, so = bc_.offset(1, row);
      for (int64_t i = 0; i < inner; ++i)
        if (!(x[o + i] > 0.f)) acc[so + i * ss] += static_cast<double>(dy[o + i]) * x[o + i];
    }
    for (int64_t k = 0; k < slopes_; ++k) ds[k] = static_cast<float>(acc[k]);
#pragma omp parallel for
    for (int64_t row = 0; row < bc_.rows(); ++row) {
      const int64_t o = row * inner, so = bc_.offset(1, row);
      for (int64_t i = 0; i < inner; ++i)
        dx[o + i] = x[o + i] > 0.f ? dy[o + i] : s[so + i * ss] * dy[o + i];
    }
  }

 private:
  int dy_, x_, s_, dx_, ds_;
  int64_t slopes_;
  Broadcast bc_;
};

KernelPtr prelu_grad(const Node& n) { return std::make_unique<PReluGrad>(n); }

}  // namespace

PLANNER_REGISTER_KERNELS(broadcast) {
  r["Pow"] = {pow_, "float32|float64"};
  r["Max"] = {max_, "float32|float64|int64|int32|int16|int8|uint8"};
  r["Min"] = {min_, "float32|float64|int64|int32|int16|int8|uint8"};
  r["MaxGrad"] = {max_grad, "float32|float64"};
  r["MinGrad"] = {min_grad, "float32|float64"};
  r["Where"] = {where, "bool|bool,float32|bool,float64|float64|bool,int64|bool,int32|bool,int16|bool,int8|bool,uint8|float32|float32,int64|float32,int32|float32,int16|float32,int8|float32,uint8|int64|int32,int64|int16,int64|int64,int8|int64,uint8|int32|int16,int32|int32,int8|int32,uint8"};
  r["PRelu"] = prelu;
  r["PReluGrad"] = prelu_grad;
}

}  // namespace planner
