// Activations and their gradients, Neg, Scale and unary math with oneDNN eltwise forward /
// backward (Log, Sqrt, Abs, Softplus = soft_relu with alpha 1, Elu), SoftmaxGrad with oneDNN's
// softmax backward. Gradients that take the forward output y use oneDNN's *_use_dst_for_bwd
// algorithms, which read exactly what the graph keeps.
// Gelu and GeluGrad (erf or tanh form) read x. In float32 each is one vectorized pass (oneDNN's
// Gelu plus a pass fixing its non-finite answers took 2.5x PyTorch's time, its GeluGrad 1.5x):
// Phi(x) = erfc(-x / sqrt 2) / 2 by vmath.h's erfc_nonneg (absolute error <= 1.5e-7, no
// cancellation for x << 0), the tanh form's 1 + tanh(u) as 2 sigmoid(2u); x = +inf gives +inf,
// -inf and NaN give NaN, GeluGrad NaN at both infinities (inf * 0), as the reference. Other
// dtypes (mixed precision) keep oneDNN's eltwise, non-finite inputs fixed after it.
// float64 (oneDNN 3.2's eltwise has no f64): plain loops in double, each PyTorch's CPU formula
// (Tanh, Sigmoid, their gradients from y, Neg, Scale, Sqrt, Abs, Gelu and GeluGrad).
// simdlen(16): g++ -march=native picks 32-byte vectors even on AVX-512; 16 lanes took the
// (512, 512) erf-form Gelu from 163 to 115 us on one core, GeluGrad from 182 to 132 us
// (PyTorch: 101 and 195 us); without AVX-512 it is two 8-lane vectors per step.
// Where oneDNN's answer for NaN or +-inf differs from the numpy reference, the op is a loop
// instead: Relu, ReluGrad, LeakyReluGrad, Exp, EluGrad (math.cpp); Softmax and LogSoftmax fix
// non-finite rows after oneDNN (softmax.cpp); tests/codegen/test_op_kernels.py checks every
// kernel on NaN and inf.
#include <cmath>
#include <limits>
#include <string>

#include "../dnnl_kernel.h"
#include "../loops.h"
#include "../vmath.h"
#include "integer.h"
#include "norms_f64.h"

namespace planner {
namespace {

using alg = dnnl::algorithm;
using prop = dnnl::prop_kind;

KernelPtr eltwise_fwd(const Node& n, alg a, float alpha, float beta) {
  auto md = plain_md(n.in[0].shape, n.in[0].dtype);
  dnnl::eltwise_forward::primitive_desc pd(n.engine, prop::forward_training, a, md, md, alpha,
                                           beta, user_scratchpad());
  auto k = std::make_unique<DnnlKernel>();
  k->add(dnnl::eltwise_forward(pd), pd, {{DNNL_ARG_SRC, n.in[0].id}, {DNNL_ARG_DST, n.out[0].id}});
  return k;
}

// [dy, v] -> dx where v is the forward's dst (use_dst algorithms) or src.
KernelPtr eltwise_bwd(const Node& n, alg a, float alpha, bool uses_dst) {
  auto md = plain_md(n.in[0].shape, n.in[0].dtype);
  dnnl::eltwise_forward::primitive_desc hint(n.engine, prop::forward_training, a, md, md, alpha,
                                             0.f, user_scratchpad());
  dnnl::eltwise_backward::primitive_desc pd(n.engine, a, md, md, md, alpha, 0.f, hint,
                                            user_scratchpad());
  auto k = std::make_unique<DnnlKernel>();
  k->add(dnnl::eltwise_backward(pd), pd,
         {{DNNL_ARG_DIFF_DST, n.in[0].id}, {uses_dst ? DNNL_ARG_DST : DNNL_ARG_SRC, n.in[1].id},
          {DNNL_ARG_DIFF_SRC, n.out[0].id}});
  return k;
}

// PyTorch's float64 Gelu and GeluGrad (aten's GeluKernel): x Phi(x) by erf, or the tanh form.
constexpr double kSqrtHalf64 = 0.70710678118654752440;
constexpr double kGeluBeta64 = 0.79788456080286535588;  // sqrt(2 / pi)
constexpr double kGeluPdf64 = 0.39894228040143267794;   // 1 / sqrt(2 pi)
constexpr double kGeluKappa64 = 0.044715;

KernelPtr gelu_f64(const Node& n, bool tanh_form) {
  if (tanh_form)
    return map1_f64(n, [](double x) {
      return 0.5 * x * (1.0 + std::tanh(kGeluBeta64 * (x + kGeluKappa64 * x * x * x)));
    });
  return map1_f64(n, [](double x) { return x * 0.5 * (1.0 + std::erf(x * kSqrtHalf64)); });
}

KernelPtr gelu_grad_f64(const Node& n, bool tanh_form) {
  if (tanh_form)
    return map2_f64(n, [](double dy, double x) {
      const double t = std::tanh(kGeluBeta64 * (x + kGeluKappa64 * x * x * x));
      const double left = 0.5 * x, right = 1.0 + t;
      const double inner = kGeluBeta64 * (1.0 + 3.0 * kGeluKappa64 * x * x);
      return dy * (0.5 * right + left * (1.0 - t * t) * inner);
    });
  return map2_f64(n, [](double dy, double x) {
    const double cdf = 0.5 * (1.0 + std::erf(x * kSqrtHalf64));
    return dy * (cdf + x * std::exp(-0.5 * x * x) * kGeluPdf64);
  });
}

KernelPtr leaky_relu(const Node& n) {
  return eltwise_fwd(n, alg::eltwise_relu, static_cast<float>(n.attrs.f("alpha")), 0.f);
}
KernelPtr tanh_(const Node& n) {
  if (all_f64(n)) return map1_f64(n, [](double x) { return std::tanh(x); });
  return eltwise_fwd(n, alg::eltwise_tanh, 0.f, 0.f);
}
KernelPtr sigmoid(const Node& n) {
  if (all_f64(n)) return map1_f64(n, [](double x) { return 1.0 / (1.0 + std::exp(-x)); });
  return eltwise_fwd(n, alg::eltwise_logistic, 0.f, 0.f);
}
KernelPtr neg(const Node& n) {
  if (is_integer(n.in[0].dtype)) return int_elementwise(n, IntOp::Neg);
  if (all_f64(n)) return map1_f64(n, [](double x) { return -x; });
  return eltwise_fwd(n, alg::eltwise_linear, -1.f, 0.f);
}
KernelPtr scale(const Node& n) {
  const double factor = n.attrs.f("factor");
  if (all_f64(n)) return map1_f64(n, [factor](double x) { return factor * x; });
  return eltwise_fwd(n, alg::eltwise_linear, static_cast<float>(factor), 0.f);
}

// [dy, y]: torch's tanh_backward dy (1 - y^2) and sigmoid_backward dy (1 - y) y in float64.
KernelPtr tanh_grad(const Node& n) {
  if (all_f64(n)) return map2_f64(n, [](double dy, double y) { return dy * (1.0 - y * y); });
  return eltwise_bwd(n, alg::eltwise_tanh_use_dst_for_bwd, 0.f, true);
}
KernelPtr sigmoid_grad(const Node& n) {
  if (all_f64(n)) return map2_f64(n, [](double dy, double y) { return dy * (1.0 - y) * y; });
  return eltwise_bwd(n, alg::eltwise_logistic_use_dst_for_bwd, 0.f, true);
}

KernelPtr sqrt_(const Node& n) {
  if (all_f64(n)) return map1_f64(n, [](double x) { return std::sqrt(x); });
  return eltwise_fwd(n, alg::eltwise_sqrt, 0.f, 0.f);
}
KernelPtr abs_(const Node& n) {
  if (is_integer(n.in[0].dtype)) return int_elementwise(n, IntOp::Abs);
  if (all_f64(n)) return map1_f64(n, [](double x) { return std::fabs(x); });
  return eltwise_fwd(n, alg::eltwise_abs, 0.f, 0.f);
}
// float64: the reference's max(x, 0) + log1p(exp(-|x|)), which never overflows (a weighted
// binary_cross_entropy_with_logits's softplus(-z)).
KernelPtr softplus(const Node& n) {
  if (all_f64(n))
    return map1_f64(n, [](double x) {
      return std::max(x, 0.0) + std::log1p(std::exp(-std::fabs(x)));
    });
  return eltwise_fwd(n, alg::eltwise_soft_relu, 1.f, 0.f);
}
KernelPtr elu(const Node& n) {
  return eltwise_fwd(n, alg::eltwise_elu, static_cast<float>(n.attrs.f("alpha")), 0.f);
}

alg gelu_alg(const Node& n) {
  const std::string form = n.attrs.s("approximate");
  if (form == "none") return alg::eltwise_gelu_erf;
  if (form == "tanh") return alg::eltwise_gelu_tanh;
  throw std::runtime_error("Gelu: approximate must be none or tanh, got " + form);
}

// oneDNN's Gelu, then the reference's value where x is not finite: NaN stays NaN, +inf gives
// +inf (x * 1), -inf gives NaN (-inf * 0).
class DnnlGelu : public DnnlKernel {
 public:
  explicit DnnlGelu(const Node& n) : x_(n.in[0].id), y_(n.out[0].id), size_(n.in[0].size()) {
    auto md = plain_md(n.in[0].shape, n.in[0].dtype);
    dnnl::eltwise_forward::primitive_desc pd(n.engine, prop::forward_training, gelu_alg(n), md,
                                             md, 0.f, 0.f, user_scratchpad());
    add(dnnl::eltwise_forward(pd), pd, {{DNNL_ARG_SRC, x_}, {DNNL_ARG_DST, y_}});
  }
  void run(const Run& r) override {
    run_all(r);
    const float* x = r.at<float>(x_);
    float* y = r.at<float>(y_);
    const int64_t size = size_;
#pragma omp parallel for
    for (int64_t i = 0; i < size; ++i)
      if (!std::isfinite(x[i])) y[i] = x[i] > 0.f ? x[i] : std::numeric_limits<float>::quiet_NaN();
  }

 private:
  int x_, y_;
  int64_t size_;
};

constexpr float kSqrtHalf = 0.70710678118654752f;
constexpr float kInvSqrt2Pi = 0.39894228040143268f;
constexpr float kSqrt2OverPi = 0.79788456080286536f;
constexpr float kGeluCubic = 0.044715f;

// What a non-finite x gives where the formula's value `v` would not: +inf -> `at_inf`, -inf and
// NaN -> NaN (branch-free, so the loop stays vectorized).
inline float finite_or(float x, float v, float at_inf) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  return select(std::fabs(x) <= std::numeric_limits<float>::max(), v,
                select(x > 0.f, at_inf, nan));
}

// (Phi(x), phi(x)) of the erf form: erfc of |x| / sqrt 2 from e = exp(-x^2 / 2), which is also
// sqrt(2 pi) phi(x).
inline float gelu_cdf(float x, float* pdf) {
  const float z = std::fabs(x) * kSqrtHalf;
  const float e = exp_nonpositive(-z * z);
  const float q = 0.5f * erfc_nonneg(z, e);
  *pdf = e * kInvSqrt2Pi;
  return select(x >= 0.f, 1.f - q, q);
}

// sigmoid(2u) = (1 + tanh(u)) / 2 for the tanh form, 0 below 2u = -55 ln 2, where the
// reference's float64 tanh(u) rounds to -1 (the true value, under 3e-17, would turn an infinite
// dy into inf where the reference has inf * 0 = NaN).
inline float gelu_tanh_sigmoid(float x) {
  const float two_u = 2.f * kSqrt2OverPi * (x + kGeluCubic * x * x * x);
  return select(two_u < -38.1231f, 0.f, sigmoid_f(two_u));
}

class Gelu : public Kernel {
 public:
  explicit Gelu(const Node& n)
      : x_(n.in[0].id), y_(n.out[0].id), size_(n.in[0].size()),
        tanh_(gelu_alg(n) == alg::eltwise_gelu_tanh) {}
  void run(const Run& r) override {
    const float* x = r.at<float>(x_);
    float* y = r.at<float>(y_);
    const int64_t size = size_;
    if (tanh_) {
#pragma omp parallel for simd simdlen(16)
      for (int64_t i = 0; i < size; ++i)
        y[i] = finite_or(x[i], x[i] * gelu_tanh_sigmoid(x[i]), x[i]);
    } else {
#pragma omp parallel for simd simdlen(16)
      for (int64_t i = 0; i < size; ++i) {
        float pdf;
        y[i] = finite_or(x[i], x[i] * gelu_cdf(x[i], &pdf), x[i]);
      }
    }
  }

 private:
  int x_, y_;
  int64_t size_;
  bool tanh_;
};

// dx = dy * (Phi(x) + x phi(x)) (erf form) or dy * (s + 2 x s (1 - s) u') with s = sigmoid(2u)
// (tanh form: 0.5 (1 + t) = s, 1 - t^2 = 4 s (1 - s)).
class GeluGrad : public Kernel {
 public:
  explicit GeluGrad(const Node& n)
      : dy_(n.in[0].id), x_(n.in[1].id), dx_(n.out[0].id), size_(n.in[0].size()),
        tanh_(gelu_alg(n) == alg::eltwise_gelu_tanh) {}
  void run(const Run& r) override {
    const float* dy = r.at<float>(dy_);
    const float* x = r.at<float>(x_);
    float* dx = r.at<float>(dx_);
    const int64_t size = size_;
    const float nan = std::numeric_limits<float>::quiet_NaN();
    if (tanh_) {
#pragma omp parallel for simd simdlen(16)
      for (int64_t i = 0; i < size; ++i) {
        const float v = x[i], s = gelu_tanh_sigmoid(v);
        const float du = kSqrt2OverPi * (1.f + 3.f * kGeluCubic * v * v);
        dx[i] = dy[i] * finite_or(v, s + 2.f * v * s * (1.f - s) * du, nan);
      }
    } else {
#pragma omp parallel for simd simdlen(16)
      for (int64_t i = 0; i < size; ++i) {
        float pdf;
        const float cdf = gelu_cdf(x[i], &pdf);
        dx[i] = dy[i] * finite_or(x[i], cdf + x[i] * pdf, nan);
      }
    }
  }

 private:
  int dy_, x_, dx_;
  int64_t size_;
  bool tanh_;
};

bool all_f32(const Node& n) {
  for (const TensorRef& t : n.in)
    if (t.dtype != F32) return false;
  return n.out[0].dtype == F32;
}

KernelPtr gelu(const Node& n) {
  if (all_f64(n)) return gelu_f64(n, gelu_alg(n) == alg::eltwise_gelu_tanh);
  if (all_f32(n)) return std::make_unique<Gelu>(n);
  return std::make_unique<DnnlGelu>(n);
}
KernelPtr gelu_grad(const Node& n) {
  if (all_f64(n)) return gelu_grad_f64(n, gelu_alg(n) == alg::eltwise_gelu_tanh);
  if (all_f32(n)) return std::make_unique<GeluGrad>(n);
  return eltwise_bwd(n, gelu_alg(n), 0.f, false);
}

// SoftmaxGrad [dy, y] -> dx = y (dy - sum(dy y)) along the axis, as torch's CPU kernel, the sum
// in double: oneDNN's float sum was 3-4x torch's float32 error over 1000 classes.
class SoftmaxGrad : public Kernel {
 public:
  explicit SoftmaxGrad(const Node& n) : dy_(n.in[0].id), y_(n.in[1].id), dx_(n.out[0].id) {
    const AxisSplit a = axis_split(n.attrs, n.in[0].shape);
    outer_ = a.outer;
    len_ = a.extent;
    inner_ = a.inner;
  }
  std::string impl() const override { return "sum of dy y in double"; }
  void run(const Run& r) override {
    const float* dy = r.at<float>(dy_);
    const float* y = r.at<float>(y_);
    float* dx = r.at<float>(dx_);
    const int64_t len = len_, inner = inner_, rows = outer_ * inner_;
#pragma omp parallel for
    for (int64_t row = 0; row < rows; ++row) {
      const int64_t base = (row / inner) * len * inner + row % inner;
      const float *dyr = dy + base, *yr = y + base;
      double dot = 0.0;
#pragma omp simd reduction(+ : dot)
      for (int64_t j = 0; j < len; ++j)
        dot += static_cast<double>(dyr[j * inner]) * yr[j * inner];
      const float s = static_cast<float>(dot);
      float* dxr = dx + base;
#pragma omp simd
      for (int64_t j = 0; j < len; ++j) dxr[j * inner] = yr[j * inner] * (dyr[j * inner] - s);
    }
  }

 private:
  int dy_, y_, dx_;
  int64_t outer_ = 1, inner_ = 1, len_ = 1;
};

KernelPtr softmax_grad(const Node& n) {
  if (n.in[0].dtype == F64) return softmax_grad_f64(n);  // norms_f64.cpp
  if (all_f32(n)) return std::make_unique<SoftmaxGrad>(n);
  auto md = plain_md(n.in[0].shape, n.in[0].dtype);
  int axis = norm_axis(n.attrs.i("axis"), n.in[0].shape.size());
  dnnl::softmax_forward::primitive_desc hint(n.engine, prop::forward_training,
                                             alg::softmax_accurate, md, md, axis, user_scratchpad());
  dnnl::softmax_backward::primitive_desc pd(n.engine, alg::softmax_accurate, md, md, md, axis,
                                            hint, user_scratchpad());
  auto k = std::make_unique<DnnlKernel>();
  k->add(dnnl::softmax_backward(pd), pd, {{DNNL_ARG_DIFF_DST, n.in[0].id}, {DNNL_ARG_DST, n.in[1].id},
                                          {DNNL_ARG_DIFF_SRC, n.out[0].id}});
  return k;
}

}  // namespace

PLANNER_REGISTER_KERNELS(eltwise) {
  r["LeakyRelu"] = leaky_relu;
  r["Tanh"] = {tanh_, "float32|float64"};
  r["Sigmoid"] = {sigmoid, "float32|float64"};
  r["Neg"] = {neg, "float32|float64|int64|int32|int16|int8|uint8"};
  r["Scale"] = {scale, "float32|float64"};
  r["TanhGrad"] = {tanh_grad, "float32|float64"};
  r["SigmoidGrad"] = {sigmoid_grad, "float32|float64"};
  r["SoftmaxGrad"] = {softmax_grad, "float32|float64"};
  r["Sqrt"] = {sqrt_, "float32|float64"};
  r["Abs"] = {abs_, "float32|float64|int64|int32|int16|int8|uint8"};
  r["Softplus"] = {softplus, "float32|float64"};
  r["Elu"] = elu;
  r["Gelu"] = {gelu, "float32|float64"};
  r["GeluGrad"] = {gelu_grad, "float32|float64"};
}

}  // namespace planner
