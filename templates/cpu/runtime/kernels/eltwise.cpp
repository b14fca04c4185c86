// Activations and their gradients, Neg, Scale and unary math with oneDNN eltwise forward /
// backward (Log, Sqrt, Abs, Softplus = soft_relu with alpha 1, Elu), SoftmaxGrad with oneDNN's
// softmax backward. Gradients that take the forward output y use oneDNN's *_use_dst_for_bwd
// algorithms, which read exactly what the graph keeps.
// Gelu and GeluGrad (erf or tanh form) read x; Gelu's non-finite inputs are then given the
// reference's answer (oneDNN's gelu(+inf) is NaN).
// Where oneDNN's answer for NaN or +-inf differs from the numpy reference, the op is a loop
// instead: Relu, ReluGrad, LeakyReluGrad, Exp, EluGrad (math.cpp); Softmax and LogSoftmax fix
// non-finite rows after oneDNN (softmax.cpp); tests/codegen/test_op_kernels.py checks every
// kernel on NaN and inf.
#include <cmath>
#include <limits>
#include <string>

#include "../dnnl_kernel.h"
#include "../loops.h"

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

KernelPtr leaky_relu(const Node& n) {
  return eltwise_fwd(n, alg::eltwise_relu, static_cast<float>(n.attrs.f("alpha")), 0.f);
}
KernelPtr tanh_(const Node& n) { return eltwise_fwd(n, alg::eltwise_tanh, 0.f, 0.f); }
KernelPtr sigmoid(const Node& n) { return eltwise_fwd(n, alg::eltwise_logistic, 0.f, 0.f); }
KernelPtr neg(const Node& n) { return eltwise_fwd(n, alg::eltwise_linear, -1.f, 0.f); }
KernelPtr scale(const Node& n) {
  return eltwise_fwd(n, alg::eltwise_linear, static_cast<float>(n.attrs.f("factor")), 0.f);
}

KernelPtr tanh_grad(const Node& n) { return eltwise_bwd(n, alg::eltwise_tanh_use_dst_for_bwd, 0.f, true); }
KernelPtr sigmoid_grad(const Node& n) {
  return eltwise_bwd(n, alg::eltwise_logistic_use_dst_for_bwd, 0.f, true);
}

KernelPtr log_(const Node& n) { return eltwise_fwd(n, alg::eltwise_log, 0.f, 0.f); }
KernelPtr sqrt_(const Node& n) { return eltwise_fwd(n, alg::eltwise_sqrt, 0.f, 0.f); }
KernelPtr abs_(const Node& n) { return eltwise_fwd(n, alg::eltwise_abs, 0.f, 0.f); }
KernelPtr softplus(const Node& n) { return eltwise_fwd(n, alg::eltwise_soft_relu, 1.f, 0.f); }
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
class Gelu : public DnnlKernel {
 public:
  explicit Gelu(const Node& n) : x_(n.in[0].id), y_(n.out[0].id), size_(n.in[0].size()) {
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

KernelPtr gelu(const Node& n) { return std::make_unique<Gelu>(n); }
KernelPtr gelu_grad(const Node& n) { return eltwise_bwd(n, gelu_alg(n), 0.f, false); }

KernelPtr softmax_grad(const Node& n) {
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
  r["Tanh"] = tanh_;
  r["Sigmoid"] = sigmoid;
  r["Neg"] = neg;
  r["Scale"] = scale;
  r["TanhGrad"] = tanh_grad;
  r["SigmoidGrad"] = sigmoid_grad;
  r["SoftmaxGrad"] = softmax_grad;
  r["Log"] = log_;
  r["Sqrt"] = sqrt_;
  r["Abs"] = abs_;
  r["Softplus"] = softplus;
  r["Elu"] = elu;
  r["Gelu"] = gelu;
  r["GeluGrad"] = gelu_grad;
}

}  // namespace planner
