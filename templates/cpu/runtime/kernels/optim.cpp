// Training-step ops as plain loops, each computing in float32 as the numpy reference does:
//   SGD [p, g]                 p' = p - lr (g + wd p)
//   ApplyMomentum [p, g, v]    g' = g + wd p; v' = m v + g'; p' = p - lr (nesterov ? g' + m v' : v')
//   ApplyAdam [p, g, m, v, t]  torch.optim.Adam with bias correction by t
//   Increment [x]              x + by (float32 or int64)
//   Fill [] / Zeros []         constant tensors
// Updates run in place: the plan gives p' the bytes of p (and v' of v, ...).
#include <omp.h>

#include <cmath>

#include "../loops.h"

namespace planner {
namespace {

class Sgd : public Kernel {
 public:
  explicit Sgd(const Node& n)
      : size_(n.in[0].size()), p_(n.in[0].id), g_(n.in[1].id), out_(n.out[0].id),
        lr_(static_cast<float>(n.attrs.f("lr"))), wd_(static_cast<float>(n.attrs.f("weight_decay"))) {
    require_f32(n);
  }
  void run(const Run& r) override {
    const float* p = r.at<float>(p_);
    const float* g = r.at<float>(g_);
    float* o = r.at<float>(out_);
    const float lr = lr_, wd = wd_;
    const int64_t size = size_;
    if (wd != 0.f) {
#pragma omp parallel for
      for (int64_t i = 0; i < size; ++i) o[i] = p[i] - lr * (g[i] + wd * p[i]);
    } else {
#pragma omp parallel for
      for (int64_t i = 0; i < size; ++i) o[i] = p[i] - lr * g[i];
    }
  }

 private:
  int64_t size_;
  int p_, g_, out_;
  float lr_, wd_;
};

class Momentum : public Kernel {
 public:
  explicit Momentum(const Node& n)
      : size_(n.in[0].size()), p_(n.in[0].id), g_(n.in[1].id), v_(n.in[2].id),
        p_out_(n.out[0].id), v_out_(n.out[1].id), lr_(static_cast<float>(n.attrs.f("lr"))),
        m_(static_cast<float>(n.attrs.f("momentum"))),
        wd_(static_cast<float>(n.attrs.f("weight_decay"))), nesterov_(n.attrs.b("nesterov")) {
    require_f32(n);
  }
  void run(const Run& r) override {
    const float* p = r.at<float>(p_);
    const float* g = r.at<float>(g_);
    const float* v = r.at<float>(v_);
    float* po = r.at<float>(p_out_);
    float* vo = r.at<float>(v_out_);
    const float lr = lr_, m = m_, wd = wd_;
    const bool nesterov = nesterov_;
    const int64_t size = size_;
#pragma omp parallel for
    for (int64_t i = 0; i < size; ++i) {
      float gi = wd != 0.f ? g[i] + wd * p[i] : g[i];
      float vn = m * v[i] + gi;
      float step = nesterov ? gi + m * vn : vn;
      vo[i] = vn;
      po[i] = p[i] - lr * step;
    }
  }

 private:
  int64_t size_;
  int p_, g_, v_, p_out_, v_out_;
  float lr_, m_, wd_;
  bool nesterov_;
};

class Adam : public Kernel {
 public:
  explicit Adam(const Node& n)
      : size_(n.in[0].size()), p_(n.in[0].id), g_(n.in[1].id), m_(n.in[2].id), v_(n.in[3].id),
        t_(n.in[4].id), p_out_(n.out[0].id), m_out_(n.out[1].id), v_out_(n.out[2].id),
        lr_(static_cast<float>(n.attrs.f("lr"))), b1_(static_cast<float>(n.attrs.f("beta1"))),
        b2_(static_cast<float>(n.attrs.f("beta2"))), eps_(static_cast<float>(n.attrs.f("epsilon"))),
        wd_(static_cast<float>(n.attrs.f("weight_decay"))) {
    require_f32(n);
  }
  void run(const Run& r) override {
    const float* p = r.at<float>(p_);
    const float* g = r.at<float>(g_);
    const float* m = r.at<float>(m_);
    const float* v = r.at<float>(v_);
    float t = *r.at<float>(t_);
    float* po = r.at<float>(p_out_);
    float* mo = r.at<float>(m_out_);
    float* vo = r.at<float>(v_out_);
    const float b1 = b1_, b2 = b2_, eps = eps_, wd = wd_;
    const float step_size = lr_ / (1.f - std::pow(b1, t));
    const float root = std::sqrt(1.f - std::pow(b2, t));
    const int64_t size = size_;
#pragma omp parallel for
    for (int64_t i = 0; i < size; ++i) {
      float gi = wd != 0.f ? g[i] + wd * p[i] : g[i];
      float mn = b1 * m[i] + (1.f - b1) * gi;
      float vn = b2 * v[i] + (1.f - b2) * gi * gi;
      float denom = std::sqrt(vn) / root + eps;
      mo[i] = mn;
      vo[i] = vn;
      po[i] = p[i] - step_size * (mn / denom);
    }
  }

 private:
  int64_t size_;
  int p_, g_, m_, v_, t_, p_out_, m_out_, v_out_;
  float lr_, b1_, b2_, eps_, wd_;
};

// Adam's float32 step count or the int64 dropout step.
class Increment : public Kernel {
 public:
  explicit Increment(const Node& n)
      : size_(n.in[0].size()), x_(n.in[0].id), y_(n.out[0].id), int64_(n.in[0].dtype == I64),
        by_(n.attrs.f("by")) {
    if (!int64_) require_f32(n);
  }
  void run(const Run& r) override {
    if (int64_) {
      const int64_t* x = r.at<int64_t>(x_);
      int64_t* y = r.at<int64_t>(y_);
      for (int64_t i = 0; i < size_; ++i) y[i] = x[i] + static_cast<int64_t>(by_);
      return;
    }
    const float* x = r.at<float>(x_);
    float* y = r.at<float>(y_);
    for (int64_t i = 0; i < size_; ++i) y[i] = x[i] + static_cast<float>(by_);
  }

 private:
  int64_t size_;
  int x_, y_;
  bool int64_;
  double by_;
};

// Fill (value) and Zeros: a constant of any dtype, written every step (cheap, and the bytes
// may be shared with other tensors between steps).
class Constant : public Kernel {
 public:
  Constant(const Node& n, double value) : size_(n.out[0].size()), dtype_(n.out[0].dtype),
                                          y_(n.out[0].id), value_(value) {}
  void run(const Run& r) override {
    char* y = r.ptr[y_];
    for (int64_t i = 0; i < size_; ++i) {
      switch (dtype_) {
        case F32: reinterpret_cast<float*>(y)[i] = static_cast<float>(value_); break;
        case F64: reinterpret_cast<double*>(y)[i] = value_; break;
        case I64: reinterpret_cast<int64_t*>(y)[i] = static_cast<int64_t>(value_); break;
        case I32: reinterpret_cast<int32_t*>(y)[i] = static_cast<int32_t>(value_); break;
        case BOOL: reinterpret_cast<bool*>(y)[i] = value_ != 0; break;
        default: throw std::runtime_error("constant of an unsupported dtype");
      }
    }
  }

 private:
  int64_t size_;
  int dtype_, y_;
  double value_;
};

KernelPtr sgd(const Node& n) { return std::make_unique<Sgd>(n); }
KernelPtr momentum(const Node& n) { return std::make_unique<Momentum>(n); }
KernelPtr adam(const Node& n) { return std::make_unique<Adam>(n); }
KernelPtr increment(const Node& n) { return std::make_unique<Increment>(n); }
KernelPtr fill(const Node& n) { return std::make_unique<Constant>(n, n.attrs.f("value")); }
KernelPtr zeros(const Node& n) { return std::make_unique<Constant>(n, 0.0); }

}  // namespace

PLANNER_REGISTER_KERNELS(optim) {
  r["SGD"] = sgd;
  r["ApplyMomentum"] = momentum;
  r["ApplyAdam"] = adam;
  r["Increment"] = increment;
  r["Fill"] = fill;
  r["Zeros"] = zeros;
}

}  // namespace planner
