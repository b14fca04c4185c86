// Broadcasting binary ops (Add, Sub, Mul, Div), BiasAdd and AddN: oneDNN binary and sum
// primitives (a float32 AddN of 2 to 4 inputs, and an Add or AddN with a folded Relu or
// ReluGrad: a plain loop). oneDNN broadcasts only the second source, so an op whose first input
// is the broadcast one swaps its inputs when it commutes, and otherwise runs a plain loop.
// float64 (oneDNN 3.2's binary and sum have no f64): the broadcast rows in double, BiasAdd
// and AddN loops in double.
#include <omp.h>

#include <cstring>
#include <string>
#include <vector>

#include "../dnnl_kernel.h"
#include "../fused_relu.h"
#include "../loops.h"
#include "integer.h"

namespace planner {
namespace {

Shape padded(const Shape& s, size_t rank) {
  Shape d(rank - s.size(), 1);
  d.insert(d.end(), s.begin(), s.end());
  return d;
}

// y = a (op) b with numpy broadcasting, for what oneDNN's binary has no jit kernel for (its
// reference loop took ~60 ns an element: an attention mask's (8, 4, 32, 32) + (8, 4, 1, 32) add
// ran 2.1 ms, a sixth of a small encoder's step) and where neither operand has the output's
// shape. The output is walked in rows: its innermost axes, merged while each operand is either
// whole or broadcast along all of them, so that a row is one vectorised loop over contiguous
// (or one repeated) elements of each operand, with one offset computation per row. Each
// element is one IEEE operation on the same two values: the bits of any other order.
template <class T>
class RowBroadcastLoop : public Kernel {
 public:
  RowBroadcastLoop(const Node& n, char op) : op_(op), a_(n.in[0].id), b_(n.in[1].id), y_(n.out[0].id) {
    const Shape& y = n.out[0].shape;
    size_t r = y.size();
    Shape as = padded(n.in[0].shape, r), bs = padded(n.in[1].shape, r);
    // Axes of extent 1 in the output change nothing: dropped.
    Shape ya, aa, ba;
    for (size_t k = 0; k < r; ++k)
      if (y[k] != 1) ya.push_back(y[k]), aa.push_back(as[k]), ba.push_back(bs[k]);
    size_t m = ya.size(), inner_from = m;
    if (m > 0) {
      a_step_ = aa[m - 1] == 1 ? 0 : 1;
      b_step_ = ba[m - 1] == 1 ? 0 : 1;
      while (inner_from > 0 && (aa[inner_from - 1] == 1 ? 0 : 1) == a_step_ &&
             (ba[inner_from - 1] == 1 ? 0 : 1) == b_step_)
        --inner_from;
    }
    for (size_t k = inner_from; k < m; ++k) inner_ *= ya[k];
    // Row strides of the outer axes, in elements of each operand (0 where it broadcasts).
    int64_t ma = a_step_ ? inner_ : 1, mb = b_step_ ? inner_ : 1;
    outer_.assign(ya.begin(), ya.begin() + static_cast<std::ptrdiff_t>(inner_from));
    sa_.assign(inner_from, 0);
    sb_.assign(inner_from, 0);
    for (int k = static_cast<int>(inner_from) - 1; k >= 0; --k) {
      sa_[k] = aa[k] == 1 ? 0 : ma;
      sb_[k] = ba[k] == 1 ? 0 : mb;
      ma *= aa[k];
      mb *= ba[k];
    }
    rows_ = numel(outer_);
  }
  std::string impl() const override { return "direct:broadcast rows"; }
  void run(const Run& r) override {
    switch (op_) {
      case '+': return rows(r, [](T x, T z) { return x + z; });
      case '-': return rows(r, [](T x, T z) { return x - z; });
      case '*': return rows(r, [](T x, T z) { return x * z; });
      default: return rows(r, [](T x, T z) { return x / z; });
    }
  }

 private:
  template <class Op>
  void rows(const Run& r, Op f) const {
    const T* a = r.at<T>(a_);
    const T* b = r.at<T>(b_);
    T* y = r.at<T>(y_);
    const int64_t inner = inner_, rows = rows_;
    const int outer = static_cast<int>(outer_.size());
    const int64_t as = a_step_, bs = b_step_;
#pragma omp parallel for schedule(static) if(rows * inner >= kGrain)
    for (int64_t row = 0; row < rows; ++row) {
      int64_t rest = row, ia = 0, ib = 0;
      for (int k = outer - 1; k >= 0; --k) {
        int64_t i = rest % outer_[k];
        rest /= outer_[k];
        ia += i * sa_[k];
        ib += i * sb_[k];
      }
      const T* x = a + ia;
      const T* z = b + ib;
      T* out = y + row * inner;
      if (as && bs) {
#pragma omp simd
        for (int64_t i = 0; i < inner; ++i) out[i] = f(x[i], z[i]);
      } else if (as) {
        const T zs = z[0];
#pragma omp simd
        for (int64_t i = 0; i < inner; ++i) out[i] = f(x[i], zs);
      } else if (bs) {
        const T xs = x[0];
#pragma omp simd
        for (int64_t i = 0; i < inner; ++i) out[i] = f(xs, z[i]);
      } else {
        const T v = f(x[0], z[0]);
        for (int64_t i = 0; i < inner; ++i) out[i] = v;
      }
    }
  }

  char op_;
  int a_, b_, y_;
  int64_t a_step_ = 1, b_step_ = 1, inner_ = 1, rows_ = 1;
  Shape outer_, sa_, sb_;
};

// y = a (op) s, s constant over each run of `inner` trailing elements (a per-sample factor, as
// stochastic depth's [N, 1, 1, 1] mask): oneDNN's binary has no fast path for that pattern
// and took 43 ns an element (its reference loop); here one vectorised loop per run. `swapped`:
// the broadcast operand is the first (a commuting op).
class RunScalarLoop : public Kernel {
 public:
  RunScalarLoop(const Node& n, char op, int full, int runs, int64_t inner)
      : op_(op), full_(n.in[full].id), runs_(n.in[runs].id), y_(n.out[0].id),
        outer_(n.out[0].size() / inner), inner_(inner) {}
  void run(const Run& r) override {
    const float* a = r.at<float>(full_);
    const float* b = r.at<float>(runs_);
    float* y = r.at<float>(y_);
    const int64_t outer = outer_, inner = inner_;
    const char op = op_;
#pragma omp parallel for schedule(static) if(outer * inner >= kGrain)
    for (int64_t o = 0; o < outer; ++o) {
      const float s = b[o];
      const float* x = a + o * inner;
      float* z = y + o * inner;
      if (op == '+') {
#pragma omp simd
        for (int64_t i = 0; i < inner; ++i) z[i] = x[i] + s;
      } else if (op == '-') {
#pragma omp simd
        for (int64_t i = 0; i < inner; ++i) z[i] = x[i] - s;
      } else if (op == '*') {
#pragma omp simd
        for (int64_t i = 0; i < inner; ++i) z[i] = x[i] * s;
      } else {
#pragma omp simd
        for (int64_t i = 0; i < inner; ++i) z[i] = x[i] / s;
      }
    }
  }

 private:
  char op_;
  int full_, runs_, y_;
  int64_t outer_, inner_;
};

// The run length when `b` (padded to y's rank) is y's leading axes followed by ones only, at
// least two elements a run; else 0.
int64_t trailing_runs(const Shape& b, const Shape& y) {
  size_t k = b.size();
  while (k > 0 && b[k - 1] == 1) --k;
  for (size_t i = 0; i < k; ++i)
    if (b[i] != y[i]) return 0;
  int64_t inner = 1;
  for (size_t i = k; i < y.size(); ++i) inner *= y[i];
  return k > 0 && inner >= 2 ? inner : 0;
}

// oneDNN's reference implementation: a loop computing every element's offsets (tens of ns an
// element), chosen for a broadcast it has no jit kernel for.
bool reference_impl(const dnnl::primitive_desc_base& pd) {
  return std::string(pd.impl_info_str()).rfind("ref", 0) == 0;
}

// src0 has the output's shape; src1 broadcasts (both seen with the output's rank, >= 1). A
// float32 broadcast oneDNN would run by its reference loop runs as rows (RowBroadcastLoop).
KernelPtr binary_prim(const Node& n, dnnl::algorithm alg, int first, int second, char op) {
  const TensorRef& y = n.out[0];
  size_t r = std::max<size_t>(y.shape.size(), 1);
  auto y_md = view_md(padded(y.shape, r), y.dtype);
  auto b_md = view_md(padded(n.in[second].shape, r), n.in[second].dtype);
  dnnl::binary::primitive_desc pd(n.engine, alg, y_md, b_md, y_md, user_scratchpad());
  if (reference_impl(pd) && y.dtype == F32 && n.in[0].dtype == F32 && n.in[1].dtype == F32)
    return std::make_unique<RowBroadcastLoop<float>>(n, op);
  auto k = std::make_unique<DnnlKernel>();
  k->add(dnnl::binary(pd), pd, {{DNNL_ARG_SRC_0, n.in[first].id},
                                {DNNL_ARG_SRC_1, n.in[second].id}, {DNNL_ARG_DST, y.id}});
  return k;
}

KernelPtr binary(const Node& n, dnnl::algorithm alg, char op, bool commutes) {
  const Shape& y = n.out[0].shape;
  size_t r = y.size();
  if (is_integer(n.in[0].dtype) && op != '/')  // kernels/integer.cpp: wrapping arithmetic
    return int_elementwise(n, op == '+' ? IntOp::Add : op == '-' ? IntOp::Sub : IntOp::Mul);
  if (all_f64(n)) return std::make_unique<RowBroadcastLoop<double>>(n, op);
  const bool low = (n.in[0].dtype == BF16 || n.in[0].dtype == F16) &&
                   n.in[1].dtype == n.in[0].dtype && n.out[0].dtype == n.in[0].dtype;
  if (low && padded(n.in[0].shape, r) == y && padded(n.in[1].shape, r) == y)
    return binary_prim(n, alg, 0, 1, op);  // mixed precision's residual adds: float32 math inside
  if (n.in[0].dtype != F32 || n.in[1].dtype != F32)
    throw std::runtime_error("binary ops take float32 tensors (or int64 or int32, but for "
                             "Div; or two bfloat16 / float16 tensors of the output's shape)");
  if (padded(n.in[0].shape, r) == y) {
    if (int64_t inner = trailing_runs(padded(n.in[1].shape, r), y))
      return std::make_unique<RunScalarLoop>(n, op, 0, 1, inner);
    return binary_prim(n, alg, 0, 1, op);
  }
  if (commutes && padded(n.in[1].shape, r) == y) {
    if (int64_t inner = trailing_runs(padded(n.in[0].shape, r), y))
      return std::make_unique<RunScalarLoop>(n, op, 1, 0, inner);
    return binary_prim(n, alg, 1, 0, op);
  }
  return std::make_unique<RowBroadcastLoop<float>>(n, op);
}

// What a sum loop applies to each sum as it writes it: nothing, a folded Relu (an Add's,
// fused_relu.h relu_value) or a folded ReluGrad (an AddN's: relu_grad_value with the Relu's
// output r, the node's last input; planner/step/fold_sum_relu.py).
enum class SumEnd { kNone, kRelu, kReluGrad };

// Float32 tensors of one size summed element by element, y = x1 + x2 + ... in input order (the
// reference's rounding), then `SumEnd`'s rule: y may share bytes with any input. The AddN of 2
// to 4 unfolded gradients (oneDNN's sum took 41 us for two (8, 64, 128) gradients in a 1-thread
// step, this loop 18 us; PyTorch's add: 7 us, cache hot) and every folded sum.
class SumLoop : public Kernel {
 public:
  SumLoop(const Node& n, SumEnd end) : end_(end), y_(n.out[0].id), size_(n.out[0].size()) {
    const size_t terms = n.in.size() - (end == SumEnd::kReluGrad);
    for (size_t k = 0; k < terms; ++k) xs_.push_back(n.in[k].id);
    if (end == SumEnd::kReluGrad) r_ = n.in.back().id;
  }
  std::string impl() const override {
    return end_ == SumEnd::kNone ? "direct:sum" : end_ == SumEnd::kRelu ? "direct:sum + relu"
                                                                       : "direct:sum + relu grad";
  }
  void run(const Run& r) override {
    if (end_ == SumEnd::kRelu) return sums(r, [](float s, int64_t) { return relu_value(s); });
    if (end_ == SumEnd::kReluGrad) {
      const float* out = r.at<float>(r_);
      return sums(r, [out](float s, int64_t i) { return relu_grad_value(s, out[i]); });
    }
    sums(r, [](float s, int64_t) { return s; });
  }

 private:
  // y[i] = end(the terms' sum at i, i): up to four terms in one vectorised loop each, more
  // through a running sum in y (the same order, so the same bits).
  template <class End>
  void sums(const Run& r, End end) const {
    std::vector<const float*> x;
    for (int id : xs_) x.push_back(r.at<float>(id));
    float* y = r.at<float>(y_);
    const int64_t size = size_;
    const float *a = x[0], *b = x.size() > 1 ? x[1] : nullptr, *c = x.size() > 2 ? x[2] : nullptr,
                *d = x.size() > 3 ? x[3] : nullptr;
    switch (x.size()) {
      case 1:
#pragma omp parallel for simd schedule(static) if(parallel: size >= kGrain)
        for (int64_t i = 0; i < size; ++i) y[i] = end(a[i], i);
        return;
      case 2:
#pragma omp parallel for simd schedule(static) if(parallel: size >= kGrain)
        for (int64_t i = 0; i < size; ++i) y[i] = end(a[i] + b[i], i);
        return;
      case 3:
#pragma omp parallel for simd schedule(static) if(parallel: size >= kGrain)
        for (int64_t i = 0; i < size; ++i) y[i] = end(a[i] + b[i] + c[i], i);
        return;
      case 4:
#pragma omp parallel for simd schedule(static) if(parallel: size >= kGrain)
        for (int64_t i = 0; i < size; ++i) y[i] = end(a[i] + b[i] + c[i] + d[i], i);
        return;
      default: {
        const size_t terms = x.size();
#pragma omp parallel for schedule(static) if(size >= kGrain)
        for (int64_t i = 0; i < size; ++i) {
          float s = a[i];
          for (size_t k = 1; k < terms; ++k) s += x[k][i];
          y[i] = end(s, i);
        }
      }
    }
  }

  SumEnd end_;
  std::vector<int> xs_;
  int y_, r_ = -1;
  int64_t size_;
};

// Every tensor float32 and of the output's size (nothing broadcast).
bool same_size_f32(const Node& n) {
  bool ok = n.out[0].dtype == F32;
  for (const TensorRef& t : n.in) ok = ok && t.dtype == F32 && t.size() == n.out[0].size();
  return ok;
}

// An Add's or AddN's folded activation: the sum loop's, on float32 operands of one size (what
// the fold makes; a hostile plan's other operands are refused, not summed without it).
KernelPtr folded_sum(const Node& n, const std::string& op, SumEnd end) {
  if (!same_size_f32(n))
    throw std::runtime_error(op + ": a folded " + (end == SumEnd::kRelu ? "Relu" : "ReluGrad") +
                             " needs float32 operands of the output's size");
  return std::make_unique<SumLoop>(n, end);
}

KernelPtr add_any(const Node& n) { return binary(n, dnnl::algorithm::binary_add, '+', true); }
// bfloat16 / float16 operands: oneDNN's low-type binary, or float32 on widened copies. (AddN's
// loop for two float32 tensors of one size measured no faster in a 1-thread step than oneDNN's
// binary: 14-21 us either way for (8, 64, 128) under load 5.)
KernelPtr add(const Node& n) {
  if (relu_activation(n.attrs, "Add") != kActNone) return folded_sum(n, "Add", SumEnd::kRelu);
  return native_or_widened(n, add_any);
}
KernelPtr sub(const Node& n) { return binary(n, dnnl::algorithm::binary_sub, '-', false); }
KernelPtr mul(const Node& n) { return binary(n, dnnl::algorithm::binary_mul, '*', true); }
KernelPtr div(const Node& n) { return binary(n, dnnl::algorithm::binary_div, '/', false); }

// float64: y[o, c, i] = x[o, c, i] + b[c] along `axis`.
class BiasAddF64 : public Kernel {
 public:
  explicit BiasAddF64(const Node& n) : x_(n.in[0].id), b_(n.in[1].id), y_(n.out[0].id) {
    const AxisSplit a = axis_split(n.attrs, n.in[0].shape);
    outer_ = a.outer;
    channels_ = a.extent;
    inner_ = a.inner;
  }
  void run(const Run& r) override {
    const double* x = r.at<double>(x_);
    const double* b = r.at<double>(b_);
    double* y = r.at<double>(y_);
    const int64_t rows = outer_ * channels_, c = channels_, inner = inner_;
#pragma omp parallel for schedule(static) if(rows * inner >= kGrain)
    for (int64_t row = 0; row < rows; ++row) {
      const double bias = b[row % c];
#pragma omp simd
      for (int64_t i = 0; i < inner; ++i) y[row * inner + i] = x[row * inner + i] + bias;
    }
  }

 private:
  int x_, b_, y_;
  int64_t outer_ = 1, channels_ = 1, inner_ = 1;
};

// float64 AddN: y = x1 + x2 + ... in input order (the reference's rounding).
class AddNF64 : public Kernel {
 public:
  explicit AddNF64(const Node& n) : y_(n.out[0].id), size_(n.out[0].size()) {
    for (const TensorRef& t : n.in) xs_.push_back(t.id);
  }
  void run(const Run& r) override {
    std::vector<const double*> x;
    for (int id : xs_) x.push_back(r.at<double>(id));
    double* y = r.at<double>(y_);
    const int64_t size = size_;
    const size_t terms = x.size();
#pragma omp parallel for schedule(static) if(size >= kGrain)
    for (int64_t i = 0; i < size; ++i) {
      double s = x[0][i];
      for (size_t k = 1; k < terms; ++k) s += x[k][i];
      y[i] = s;
    }
  }

 private:
  int y_;
  int64_t size_;
  std::vector<int> xs_;
};

// y = x + b along `axis`: a binary add whose second source is b viewed as [1, .., C, .., 1].
KernelPtr bias_add_any(const Node& n) {
  const Shape& x = n.in[0].shape;
  int rank = static_cast<int>(x.size());
  int axis = static_cast<int>((n.attrs.i("axis") % rank + rank) % rank);
  Shape bdims(rank, 1);
  bdims[axis] = x[axis];
  auto x_md = plain_md(x, n.in[0].dtype);
  auto b_md = view_md(bdims, n.in[1].dtype);
  dnnl::binary::primitive_desc pd(n.engine, dnnl::algorithm::binary_add, x_md, b_md, x_md,
                                  user_scratchpad());
  auto k = std::make_unique<DnnlKernel>();
  k->add(dnnl::binary(pd), pd, {{DNNL_ARG_SRC_0, n.in[0].id}, {DNNL_ARG_SRC_1, n.in[1].id},
                                {DNNL_ARG_DST, n.out[0].id}});
  return k;
}

// AddN: a oneDNN sum with unit scales (one input: a copy).
KernelPtr add_n_any(const Node& n) {
  const TensorRef& y = n.out[0];
  if (n.in.size() == 1) return std::make_unique<Copy>(n.in[0].id, y.id, y.size() * dtype_bytes(y.dtype));
  std::vector<memory::desc> srcs;
  for (const TensorRef& t : n.in) srcs.push_back(plain_md(t.shape, t.dtype));
  auto y_md = plain_md(y.shape, y.dtype);
  dnnl::sum::primitive_desc pd(n.engine, y_md, std::vector<float>(n.in.size(), 1.0f), srcs,
                               user_scratchpad());
  std::vector<DnnlKernel::Arg> args;
  for (size_t k = 0; k < n.in.size(); ++k) args.push_back({DNNL_ARG_MULTIPLE_SRC + static_cast<int>(k), n.in[k].id});
  args.push_back({DNNL_ARG_DST, y.id});
  auto k = std::make_unique<DnnlKernel>();
  k->add(dnnl::sum(pd), pd, args);
  return k;
}

KernelPtr add_n(const Node& n) {
  if (relu_activation(n.attrs, "AddN") != kActNone) {
    if (n.in.size() < 2) throw std::runtime_error("AddN: a folded ReluGrad needs a term and r");
    return folded_sum(n, "AddN", SumEnd::kReluGrad);
  }
  if (same_size_f32(n) && n.in.size() > 1 && n.in.size() <= 4)
    return std::make_unique<SumLoop>(n, SumEnd::kNone);
  if (all_f64(n)) return std::make_unique<AddNF64>(n);
  return native_or_widened(n, add_n_any);
}
KernelPtr bias_add(const Node& n) {
  if (all_f64(n)) return std::make_unique<BiasAddF64>(n);
  return native_or_widened(n, bias_add_any);
}

}  // namespace

PLANNER_REGISTER_KERNELS(binary) {
  r["Add"] = {add, "float32|float64|int64|int32|int16|int8|uint8"};
  r["Sub"] = {sub, "float32|float64|int64|int32|int16|int8|uint8"};
  r["Mul"] = {mul, "float32|float64|int64|int32|int16|int8|uint8"};
  r["Div"] = {div, "float32|float64"};
  r["BiasAdd"] = {bias_add, "float32|float64"};
  r["AddN"] = {add_n, "float32|float64"};
}

}  // namespace planner
