// Integer kernels (kernels/integer.h): PyTorch's CPU integer semantics on int64, int32, int16,
// int8 and uint8.
// Add, Sub, Mul, Neg and the reductions wrap (arithmetic in uint64, the result's low bits);
// floor division and the remainder take the divisor's sign (Python's, PyTorch's); a shift by a
// negative count or by the type's width or more gives 0 (left) or the sign fill (right), as
// PyTorch's; the quotient of the most negative value by -1 wraps to itself (C's is undefined).
// Element-wise ops broadcast through loops.h's Broadcast; the ops own integer IR ops
// (planner/ops/integer.py) register here, the others' float kernels hand integer nodes over.
#include <cstdint>
#include <type_traits>

#include "../loops.h"
#include "integer.h"
#include "reductions.h"

namespace planner {
namespace {

template <class T>
T int_wrap(uint64_t v) {
  return static_cast<T>(static_cast<std::make_unsigned_t<T>>(v));
}

// b < 0, for a signed T (an unsigned one is never negative).
template <class T>
bool int_negative(T b) {
  if constexpr (std::is_signed_v<T>) return b < 0;
  else return false;
}

template <IntOp O, class T>
T int_apply(T a, T b) {
  [[maybe_unused]] constexpr int bits = 8 * sizeof(T);
  // PyTorch's right shift by this much or more: the sign fill of a signed type, 0 of an
  // unsigned one
  [[maybe_unused]] constexpr int top = std::is_signed_v<T> ? bits - 1 : bits;
  [[maybe_unused]] const uint64_t ua = static_cast<uint64_t>(a), ub = static_cast<uint64_t>(b);
  if constexpr (O == IntOp::Add) return int_wrap<T>(ua + ub);
  else if constexpr (O == IntOp::Sub) return int_wrap<T>(ua - ub);
  else if constexpr (O == IntOp::Mul) return int_wrap<T>(ua * ub);
  else if constexpr (O == IntOp::Max) return a > b ? a : b;
  else if constexpr (O == IntOp::Min) return a < b ? a : b;
  else if constexpr (O == IntOp::And) return static_cast<T>(a & b);
  else if constexpr (O == IntOp::Or) return static_cast<T>(a | b);
  else if constexpr (O == IntOp::Xor) return static_cast<T>(a ^ b);
  else if constexpr (O == IntOp::ShiftLeft)
    return int_negative(b) || ub >= static_cast<uint64_t>(bits) ? T(0) : int_wrap<T>(ua << b);
  else if constexpr (O == IntOp::ShiftRight) {
    if (!int_negative(b) && ub < static_cast<uint64_t>(top)) return T(a >> b);
    if constexpr (std::is_signed_v<T>) return T(a >> (bits - 1));
    else return T(0);
  }
  else if constexpr (O == IntOp::DivTrunc)
    return int_negative(b) && b == T(-1) ? int_wrap<T>(0 - ua) : T(a / b);
  else if constexpr (O == IntOp::DivFloor) {
    if (int_negative(b) && b == T(-1)) return int_wrap<T>(0 - ua);
    const T q = a / b, r = a % b;
    return r != 0 && (int_negative(r) != int_negative(b)) ? T(q - 1) : q;
  } else if constexpr (O == IntOp::Remainder) {
    if (int_negative(b) && b == T(-1)) return T(0);
    const T r = a % b;
    return r != 0 && (int_negative(r) != int_negative(b)) ? T(r + b) : r;
  } else if constexpr (O == IntOp::Neg) return int_wrap<T>(0 - ua);
  else if constexpr (O == IntOp::Abs) return int_negative(a) ? int_wrap<T>(0 - ua) : a;
  else return static_cast<T>(~a);  // Not
}

constexpr bool int_divides(IntOp op) {
  return op == IntOp::DivFloor || op == IntOp::DivTrunc || op == IntOp::Remainder;
}

template <class T>
void check_divisor(const T* b, int64_t size) {
  for (int64_t i = 0; i < size; ++i)
    if (b[i] == 0)
      throw StepError("integer division by zero (divisor element " + std::to_string(i) +
                      "; PyTorch raises ZeroDivisionError)");
}

template <class T>
class IntBinary : public Kernel {
 public:
  IntBinary(const Node& n, IntOp op)
      : op_(op), a_(n.in[0].id), b_(n.in[1].id), y_(n.out[0].id), b_size_(n.in[1].size()),
        bc_(n.out[0].shape, shapes_of(n.in)) {}
  void check_feeds(const Run& r, const std::vector<char>& fed) const override {
    if (int_divides(op_) && fed[b_]) check_divisor(r.at<T>(b_), b_size_);
  }
  void run(const Run& r) override {
    if (int_divides(op_)) check_divisor(r.at<T>(b_), b_size_);
    switch (op_) {
      case IntOp::Add: return loop<IntOp::Add>(r);
      case IntOp::Sub: return loop<IntOp::Sub>(r);
      case IntOp::Mul: return loop<IntOp::Mul>(r);
      case IntOp::Max: return loop<IntOp::Max>(r);
      case IntOp::Min: return loop<IntOp::Min>(r);
      case IntOp::And: return loop<IntOp::And>(r);
      case IntOp::Or: return loop<IntOp::Or>(r);
      case IntOp::Xor: return loop<IntOp::Xor>(r);
      case IntOp::ShiftLeft: return loop<IntOp::ShiftLeft>(r);
      case IntOp::ShiftRight: return loop<IntOp::ShiftRight>(r);
      case IntOp::DivFloor: return loop<IntOp::DivFloor>(r);
      case IntOp::DivTrunc: return loop<IntOp::DivTrunc>(r);
      case IntOp::Remainder: return loop<IntOp::Remainder>(r);
      default: throw std::runtime_error("not a two-operand integer op");
    }
  }

 private:
  template <IntOp O>
  void loop(const Run& r) {
    const T* a = r.at<T>(a_);
    const T* b = r.at<T>(b_);
    T* y = r.at<T>(y_);
    const Broadcast& bc = bc_;
    const int64_t rows = bc.rows(), inner = bc.inner(), sa = bc.step(0), sb = bc.step(1);
#pragma omp parallel for if(rows * inner >= kGrain)
    for (int64_t row = 0; row < rows; ++row) {
      const T* pa = a + bc.offset(0, row);
      const T* pb = b + bc.offset(1, row);
      T* py = y + row * inner;
      for (int64_t i = 0; i < inner; ++i) py[i] = int_apply<O, T>(pa[i * sa], pb[i * sb]);
    }
  }

  IntOp op_;
  int a_, b_, y_;
  int64_t b_size_;
  Broadcast bc_;
};

template <class T>
class IntUnary : public Kernel {
 public:
  IntUnary(const Node& n, IntOp op)
      : op_(op), x_(n.in[0].id), y_(n.out[0].id), size_(n.out[0].size()) {}
  void run(const Run& r) override {
    if (op_ == IntOp::Neg) loop<IntOp::Neg>(r);
    else if (op_ == IntOp::Abs) loop<IntOp::Abs>(r);
    else loop<IntOp::Not>(r);
  }

 private:
  template <IntOp O>
  void loop(const Run& r) {
    const T* x = r.at<T>(x_);
    T* y = r.at<T>(y_);
    const int64_t size = size_;
#pragma omp parallel for simd if(parallel: size >= kGrain)
    for (int64_t i = 0; i < size; ++i) y[i] = int_apply<O, T>(x[i], T(0));
  }

  IntOp op_;
  int x_, y_;
  int64_t size_;
};

// Each output the fold of its group (common/reductions.h's FoldView), in uint64 for the sum
// and product (wrapping), in T for the extrema; threads split the outputs.
template <class T>
class IntFold : public Kernel {
 public:
  IntFold(const Node& n, IntOp op)
      : op_(op), x_(n.in[0].id), y_(n.out[0].id), view_(fold_view(n, n.in[0].shape)) {}
  void run(const Run& r) override {
    const T* x = r.at<T>(x_);
    T* y = r.at<T>(y_);
    const FoldView& v = view_;
    const IntOp op = op_;
#pragma omp parallel for if(v.outputs * v.count >= kGrain)
    for (int64_t o = 0; o < v.outputs; ++o) {
      const T* g = x + fold_offset(o, v.kept);
      if (op == IntOp::Sum || op == IntOp::Prod) {
        uint64_t acc = op == IntOp::Sum ? 0 : 1;
        for (int64_t k = 0; k < v.count; ++k) {
          const uint64_t e = static_cast<uint64_t>(g[fold_offset(k, v.reduced)]);
          acc = op == IntOp::Sum ? acc + e : acc * e;
        }
        y[o] = int_wrap<T>(acc);
      } else {
        T m = g[0];
        for (int64_t k = 1; k < v.count; ++k) {
          const T e = g[fold_offset(k, v.reduced)];
          m = op == IntOp::ReduceMax ? (e > m ? e : m) : (e < m ? e : m);
        }
        y[o] = m;
      }
    }
  }

 private:
  IntOp op_;
  int x_, y_;
  FoldView view_;
};

// CumSum of an integer x along the node's axis: each of the outer * inner lines walked alone.
template <class T>
class IntRunningSum : public Kernel {
 public:
  explicit IntRunningSum(const Node& n)
      : x_(n.in[0].id), y_(n.out[0].id), lines_(axis_split(n.attrs, n.in[0].shape)),
        exclusive_(n.attrs.b("exclusive")), reverse_(n.attrs.b("reverse")) {}
  void run(const Run& r) override {
    const T* x = r.at<T>(x_);
    T* y = r.at<T>(y_);
    const int64_t outer = lines_.outer, n = lines_.extent, inner = lines_.inner;
    const bool exclusive = exclusive_, reverse = reverse_;
#pragma omp parallel for if(outer * n * inner >= kGrain)
    for (int64_t line = 0; line < outer * inner; ++line) {
      const int64_t base = (line / inner) * n * inner + line % inner;
      uint64_t acc = 0;
      for (int64_t step = 0; step < n; ++step) {
        const int64_t at = base + (reverse ? n - 1 - step : step) * inner;
        const uint64_t e = static_cast<uint64_t>(x[at]);
        if (!exclusive) acc += e;
        y[at] = int_wrap<T>(acc);
        if (exclusive) acc += e;
      }
    }
  }

 private:
  int x_, y_;
  AxisSplit lines_;
  bool exclusive_, reverse_;
};

template <template <class> class K, class... A>
KernelPtr for_int_type(const Node& n, A... args) {
  const int t = n.in[0].dtype;
  if (t != n.out[0].dtype) throw std::runtime_error("integer kernels keep x's dtype");
  for (const TensorRef& x : n.in)
    if (x.dtype != t) throw std::runtime_error("integer kernels take operands of one dtype");
  switch (t) {
    case I64: return std::make_unique<K<int64_t>>(n, args...);
    case I32: return std::make_unique<K<int32_t>>(n, args...);
    case I16: return std::make_unique<K<int16_t>>(n, args...);
    case I8: return std::make_unique<K<int8_t>>(n, args...);
    case U8: return std::make_unique<K<uint8_t>>(n, args...);
  }
  throw std::runtime_error("integer kernels take int64, int32, int16, int8 or uint8 tensors");
}

KernelPtr bitwise_and(const Node& n) { return int_elementwise(n, IntOp::And); }
KernelPtr bitwise_or(const Node& n) { return int_elementwise(n, IntOp::Or); }
KernelPtr bitwise_xor(const Node& n) { return int_elementwise(n, IntOp::Xor); }
KernelPtr bitwise_not(const Node& n) { return int_elementwise(n, IntOp::Not); }
KernelPtr shift_left(const Node& n) { return int_elementwise(n, IntOp::ShiftLeft); }
KernelPtr shift_right(const Node& n) { return int_elementwise(n, IntOp::ShiftRight); }
KernelPtr int_div_floor(const Node& n) { return int_elementwise(n, IntOp::DivFloor); }
KernelPtr int_div_trunc(const Node& n) { return int_elementwise(n, IntOp::DivTrunc); }
KernelPtr int_remainder(const Node& n) { return int_elementwise(n, IntOp::Remainder); }

}  // namespace

KernelPtr int_elementwise(const Node& n, IntOp op) {
  if (op == IntOp::Neg || op == IntOp::Abs || op == IntOp::Not)
    return for_int_type<IntUnary>(n, op);
  return for_int_type<IntBinary>(n, op);
}

KernelPtr int_reduction(const Node& n, IntOp op) { return for_int_type<IntFold>(n, op); }

KernelPtr int_running_sum(const Node& n) { return for_int_type<IntRunningSum>(n); }

PLANNER_REGISTER_KERNELS(integer) {
  r["BitwiseAnd"] = {bitwise_and, "int64|int32|int16|int8|uint8"};
  r["BitwiseOr"] = {bitwise_or, "int64|int32|int16|int8|uint8"};
  r["BitwiseXor"] = {bitwise_xor, "int64|int32|int16|int8|uint8"};
  r["BitwiseNot"] = {bitwise_not, "int64|int32|int16|int8|uint8"};
  r["ShiftLeft"] = {shift_left, "int64|int32|int16|int8|uint8"};
  r["ShiftRight"] = {shift_right, "int64|int32|int16|int8|uint8"};
  r["IntDivFloor"] = {int_div_floor, "int64|int32|int16|int8|uint8"};
  r["IntDivTrunc"] = {int_div_trunc, "int64|int32|int16|int8|uint8"};
  r["IntRemainder"] = {int_remainder, "int64|int32|int16|int8|uint8"};
}

}  // namespace planner
