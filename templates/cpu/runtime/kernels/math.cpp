// Element-wise math as plain OpenMP loops, where oneDNN has no algorithm or where its answer for
// NaN or +-inf differs from the numpy reference: Relu and ReluGrad (oneDNN's relu maps NaN to 0,
// hiding a diverged run), LeakyReluGrad, Exp (oneDNN's gives inf for NaN), Log (oneDNN's is
// ~10x torch's float32 error), EluGrad, Sign, Selu,
// SeluGrad, Clip, ClipGrad, Erf, CausalMask. Each functor is the reference's formula element by
// element, in float. Relu and ReluGrad also take bfloat16 / float16 tensors (widened()); Relu,
// ReluGrad, Exp, Log, Sign and CausalMask float64 ones (the same rules in double).
#include <cmath>
#include <limits>
#include <stdexcept>
#include <type_traits>

#include "../dnnl_kernel.h"
#include "../fused_relu.h"
#include "../loops.h"

namespace planner {
namespace {

KernelPtr relu_f32(const Node& n) {
  // np.maximum(x, 0): NaN stays NaN (fused_relu.h). A lambda, not the function's address: the
  // loop inlines it.
  return map1(n, [](float x) { return relu_value(x); });
}

KernelPtr relu_grad_f32(const Node& n) {
  return map2(n, [](float dy, float y) { return relu_grad_value(dy, y); });
}

// bfloat16 / float16 (mixed precision's activations) where every operand has the one low type:
// on the bits, without widened copies. Exact: a Relu's result is its input or +0, ReluGrad's
// dy or +0, as the float32 loop on widened copies rounds them. A magnitude (the bits without
// the sign) from `nan` up is a NaN: 0x7f81 in bfloat16, 0x7c01 in float16 (planner/ops/
// activation.py plans no scratch for them: relu_scratch).
uint16_t low_nan(const Node& n) {
  for (const auto* side : {&n.in, &n.out})
    for (const TensorRef& t : *side)
      if (t.dtype != n.out[0].dtype) return 0;
  return n.out[0].dtype == BF16 ? 0x7f81 : n.out[0].dtype == F16 ? 0x7c01 : 0;
}

KernelPtr relu(const Node& n) {
  if (all_f64(n)) return map1_f64(n, [](double x) { return x > 0.0 || x != x ? x : 0.0; });
  if (const uint16_t nan = low_nan(n))  // x <= 0 (not NaN) -> +0
    return map1_bits(n, [nan](uint16_t x) -> uint16_t {
      return (x & 0x8000) && (x & 0x7fff) < nan ? 0 : x;
    });
  return widened(n, relu_f32);
}

KernelPtr relu_grad(const Node& n) {
  if (all_f64(n)) return map2_f64(n, [](double dy, double y) { return y <= 0.0 ? 0.0 : dy; });
  if (const uint16_t nan = low_nan(n))  // not y <= 0: a NaN, or sign clear and not zero
    return map2_bits(n, [nan](uint16_t dy, uint16_t y) -> uint16_t {
      return (y & 0x7fff) >= nan || (!(y & 0x8000) && y != 0) ? dy : 0;
    });
  return widened(n, relu_grad_f32);
}

KernelPtr leaky_relu_grad(const Node& n) {
  const float a = static_cast<float>(n.attrs.f("alpha"));
  return map2(n, [a](float dy, float x) { return x > 0.f ? dy : dy * a; });
}

KernelPtr exp_(const Node& n) {
  if (all_f64(n)) return map1_f64(n, [](double x) { return std::exp(x); });
  return map1(n, [](float x) { return std::exp(x); });
}
// libm's logf (under 1 ulp, as torch's): oneDNN's eltwise_log is ~10x torch's float32 error,
// which kl_div's t log t and its target gradient carried whole.
KernelPtr log_(const Node& n) {
  if (all_f64(n)) return map1_f64(n, [](double x) { return std::log(x); });
  return map1(n, [](float x) { return std::log(x); });
}

KernelPtr elu_grad(const Node& n) {
  const float a = static_cast<float>(n.attrs.f("alpha"));
  return map2(n, [a](float dy, float x) { return x > 0.f ? dy : dy * a * std::exp(x); });
}

// float64: the same rule in double (l1_loss's, huber_loss's and smooth_l1_loss's gradient
// through Abs).
KernelPtr sign(const Node& n) {
  if (all_f64(n)) return map1_f64(n, [](double x) { return x > 0 ? 1.0 : x < 0 ? -1.0 : x; });
  return map1(n, [](float x) { return x > 0.f ? 1.f : x < 0.f ? -1.f : x; });
}

// Selu's negative branch sees x <= 0 or NaN only, so exp(x) cannot overflow there.
KernelPtr selu(const Node& n) {
  const float a = static_cast<float>(n.attrs.f("alpha")), g = static_cast<float>(n.attrs.f("gamma"));
  return map1(n, [a, g](float x) { return g * (x > 0.f ? x : a * std::expm1(x)); });
}

KernelPtr selu_grad(const Node& n) {
  const float a = static_cast<float>(n.attrs.f("alpha")), g = static_cast<float>(n.attrs.f("gamma"));
  return map2(n, [a, g](float dy, float x) {
    return g * dy * (x > 0.f ? 1.f : a * std::exp(x));
  });
}

// An absent bound is no bound; the flags keep ClipGrad's NaN answer that of the reference
// (which compares only against bounds that exist).
struct Bounds {
  bool has_lo, has_hi;
  float lo, hi;
  explicit Bounds(const Node& n)
      : has_lo(n.attrs.has("min")), has_hi(n.attrs.has("max")),
        lo(has_lo ? static_cast<float>(n.attrs.f("min")) : 0.f),
        hi(has_hi ? static_cast<float>(n.attrs.f("max")) : 0.f) {}
};

KernelPtr clip(const Node& n) {
  const Bounds b(n);
  return map1(n, [b](float x) {
    if (b.has_lo && x < b.lo) return b.lo;
    if (b.has_hi && x > b.hi) return b.hi;
    return x;  // NaN too, as np.clip
  });
}

KernelPtr clip_grad(const Node& n) {
  const Bounds b(n);
  return map2(n, [b](float dy, float x) {
    const bool keep = (!b.has_lo || x >= b.lo) && (!b.has_hi || x <= b.hi);
    return keep ? dy : 0.f;
  });
}

KernelPtr erf_(const Node& n) { return map1(n, [](float x) { return std::erf(x); }); }

// y = x where column <= row over the last two axes, else `value` (absent: -inf). T: float, or
// double for a float64 node (a float64 model's causal attention scores, then Softmax's float64
// rows), the value kept in T.
template <class T>
class CausalMask : public Kernel {
 public:
  explicit CausalMask(const Node& n) : x_(n.in[0].id), y_(n.out[0].id) {
    if constexpr (std::is_same_v<T, double>) {
      if (!all_f64(n)) throw std::runtime_error("CausalMask: float64 input and output");
    } else {
      require_f32(n);
    }
    const Shape& s = n.in[0].shape;
    rows_ = s[s.size() - 2];
    cols_ = s[s.size() - 1];
    mats_ = rows_ * cols_ != 0 ? n.in[0].size() / (rows_ * cols_) : 0;
    value_ = n.attrs.has("value") ? static_cast<T>(n.attrs.f("value"))
                                  : -std::numeric_limits<T>::infinity();
  }
  void run(const Run& r) override {
    const T* x = r.at<T>(x_);
    T* y = r.at<T>(y_);
    const int64_t rows = rows_, cols = cols_, all = mats_ * rows_;
    const T value = value_;
#pragma omp parallel for
    for (int64_t m = 0; m < all; ++m) {
      const int64_t i = m % rows;
      const T* xr = x + m * cols;
      T* yr = y + m * cols;
      for (int64_t j = 0; j < cols; ++j) yr[j] = j <= i ? xr[j] : value;
    }
  }

 private:
  int x_, y_;
  int64_t rows_, cols_, mats_;
  T value_;
};

KernelPtr causal_mask(const Node& n) {
  if (n.in[0].dtype == F64) return std::make_unique<CausalMask<double>>(n);
  return std::make_unique<CausalMask<float>>(n);
}

}  // namespace

PLANNER_REGISTER_KERNELS(math) {
  r["Relu"] = {relu, "float32|float64"};
  r["ReluGrad"] = {relu_grad, "float32|float64"};
  r["LeakyReluGrad"] = leaky_relu_grad;
  r["Exp"] = {exp_, "float32|float64"};
  r["Log"] = {log_, "float32|float64"};
  r["EluGrad"] = elu_grad;
  r["Sign"] = {sign, "float32|float64"};
  r["Selu"] = selu;
  r["SeluGrad"] = selu_grad;
  r["Clip"] = clip;
  r["ClipGrad"] = clip_grad;
  r["Erf"] = erf_;
  r["CausalMask"] = {causal_mask, "float32|float64"};
}

}  // namespace planner
