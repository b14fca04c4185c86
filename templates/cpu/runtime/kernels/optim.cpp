// Training-step ops as plain loops, each computing in float32 as the numpy reference does:
//   SGD [p, g, lr, wd]               p' = p - lr (g + wd p)
//   ApplyMomentum [p, g, v, lr, wd]  g' = g + wd p; v' = m v + g'; p' = p - lr (nesterov ?
//                                    g' + m v' : v'); with dampening d [p, g, v, t, lr, wd]:
//                                    v' = g' at t = 1, else m v + (1 - d) g'
//   ApplyAdam [p, g, m, v, t, lr, wd]  torch.optim.Adam (AdamW: decoupled) with bias correction
//                                    by t; amsgrad [p, g, m, v, vmax, t, lr, wd] -> [.., vmax']
// lr and wd are float32 scalars in the arena (a parameter group's), read each step; with
// momentum_input the momentum (ApplyMomentum) or beta1 (ApplyAdam) is one too, just before lr.
//   Increment [x]              x + by (float32 or int64)
//   Fill [] / Zeros []         constant tensors
//   AccumulateGrad [s, g, k]   g / K on an optimizer step's first micro-batch, else s + g / K
//   ScheduledLR [lr, t]        lr * factor(t): a recorded learning-rate schedule
// Updates run in place: the plan gives p' the bytes of p (and v' of v, ...).
// float64 parameters (SGD, ApplyMomentum, ApplyAdam: UpdateF64) update in double, each as
// torch.optim's single-tensor loop computes it (Adam's bias corrections from the step count
// in double; its m as the reference's sum, not torch's lerp), the hyperparameter attrs read as doubles; lr, wd, t and a read
// momentum stay the step's float32 scalars (docs/executor.md, "dtypes").
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "../loops.h"
#include "lr_schedule.h"
#include "update_math.h"

namespace planner {
namespace {

class Sgd : public Kernel {
 public:
  explicit Sgd(const Node& n)
      : size_(n.in[0].size()), p_(n.in[0].id), g_(n.in[1].id), lr_(n.in[2].id),
        wd_(n.in[3].id), out_(n.out[0].id), a_(update_attrs(n)) {
    require_f32(n);
  }
  void run(const Run& r) override {
    sgd_update(r.at<float>(p_), r.at<float>(g_), r.at<float>(out_), size_,
               with_hyperparameters(a_, r.at<float>(lr_), r.at<float>(wd_)));
  }

 private:
  int64_t size_;
  int p_, g_, lr_, wd_, out_;
  UpdateAttrs a_;
};

// The inputs an update node must have: the op's (planner/ops/optim.py) for its attributes.
void require_inputs(const Node& n, size_t want, const char* op) {
  if (n.in.size() != want || n.out.size() < 2)
    throw std::runtime_error(std::string(op) + ": wrong number of inputs for its attributes");
}

// Whether node n reads its momentum (or beta1) as an input (the optional attr).
bool momentum_input(const Node& n) {
  return n.attrs.has("momentum_input") && n.attrs.b("momentum_input");
}

class Momentum : public Kernel {
 public:
  explicit Momentum(const Node& n)
      : a_(update_attrs(n)), dampened_(a_.dampening != 0.f), read_(momentum_input(n)),
        size_(n.in[0].size()), p_(n.in[0].id), g_(n.in[1].id), v_(n.in[2].id),
        t_(dampened_ ? n.in[3].id : -1), m_(read_ ? n.in[n.in.size() - 3].id : -1),
        lr_(n.in[n.in.size() - 2].id), wd_(n.in[n.in.size() - 1].id), p_out_(n.out[0].id),
        v_out_(n.out[1].id) {
    require_f32(n);
    require_inputs(n, 5 + (dampened_ ? 1 : 0) + (read_ ? 1 : 0), "ApplyMomentum");
  }
  void run(const Run& r) override {
    UpdateAttrs a = with_hyperparameters(a_, r.at<float>(lr_), r.at<float>(wd_));
    if (read_) a.momentum = *r.at<float>(m_);
    if (dampened_)
      dampened_momentum_update(r.at<float>(p_), r.at<float>(g_), r.at<float>(v_),
                               *r.at<float>(t_), r.at<float>(p_out_), r.at<float>(v_out_),
                               size_, a);
    else
      momentum_update(r.at<float>(p_), r.at<float>(g_), r.at<float>(v_), r.at<float>(p_out_),
                      r.at<float>(v_out_), size_, a);
  }

 private:
  UpdateAttrs a_;
  bool dampened_, read_;
  int64_t size_;
  int p_, g_, v_, t_, m_, lr_, wd_, p_out_, v_out_;
};

class Adam : public Kernel {
 public:
  explicit Adam(const Node& n)
      : a_(update_attrs(n)), k_(a_.amsgrad ? 1 : 0), read_(momentum_input(n) ? 1 : 0),
        size_(n.in[0].size()), p_(n.in[0].id), g_(n.in[1].id), m_(n.in[2].id),
        v_(n.in[3].id), vmax_(k_ ? n.in[4].id : -1), t_(n.in[4 + k_].id),
        b1_(read_ ? n.in[5 + k_].id : -1), lr_(n.in[5 + k_ + read_].id),
        wd_(n.in[6 + k_ + read_].id), p_out_(n.out[0].id), m_out_(n.out[1].id),
        v_out_(n.out[2].id), vmax_out_(k_ ? n.out[3].id : -1) {
    require_f32(n);
    require_inputs(n, 7 + k_ + read_, "ApplyAdam");
    if (n.out.size() != static_cast<size_t>(3 + k_))
      throw std::runtime_error("ApplyAdam: wrong number of outputs for its attributes");
  }
  void run(const Run& r) override {
    UpdateAttrs a = with_hyperparameters(a_, r.at<float>(lr_), r.at<float>(wd_));
    if (read_) a.beta1 = *r.at<float>(b1_);  // this step's, bias correction included
    if (k_)
      amsgrad_update(r.at<float>(p_), r.at<float>(g_), r.at<float>(m_), r.at<float>(v_),
                     r.at<float>(vmax_), *r.at<float>(t_), r.at<float>(p_out_),
                     r.at<float>(m_out_), r.at<float>(v_out_), r.at<float>(vmax_out_), size_, a);
    else
      adam_update(r.at<float>(p_), r.at<float>(g_), r.at<float>(m_), r.at<float>(v_),
                  *r.at<float>(t_), r.at<float>(p_out_), r.at<float>(m_out_),
                  r.at<float>(v_out_), size_, a);
  }

 private:
  UpdateAttrs a_;
  int k_, read_;
  int64_t size_;
  int p_, g_, m_, v_, vmax_, t_, b1_, lr_, wd_, p_out_, m_out_, v_out_, vmax_out_;
};

// SGD, ApplyMomentum or ApplyAdam of a float64 parameter (its gradient and state float64 too).
class UpdateF64 : public Kernel {
 public:
  UpdateF64(const Node& n, char kind) : kind_(kind), size_(n.in[0].size()) {
    const auto f = [&n](const char* key, double otherwise) {
      return n.attrs.has(key) ? n.attrs.f(key) : otherwise;
    };
    const auto b = [&n](const char* key) { return n.attrs.has(key) && n.attrs.b(key); };
    momentum_ = f("momentum", 0.9);
    dampening_ = f("dampening", 0.0);
    beta1_ = f("beta1", 0.9);
    beta2_ = f("beta2", 0.999);
    epsilon_ = f("epsilon", 1e-8);
    nesterov_ = b("nesterov");
    decoupled_ = b("decoupled");
    amsgrad_ = b("amsgrad");
    const bool read = momentum_input(n), counted = kind == 'a' || dampening_ != 0.0;
    const size_t slots = kind == 's' ? 0 : kind == 'm' ? 1 : amsgrad_ ? 3 : 2;
    if (n.in.size() != 4 + slots + (counted ? 1 : 0) + (read ? 1 : 0) || n.out.size() != 1 + slots)
      throw std::runtime_error(std::string(kind == 's' ? "SGD" : kind == 'm' ? "ApplyMomentum"
                                                                            : "ApplyAdam") +
                               ": wrong number of inputs or outputs for its attributes");
    for (size_t k = 0; k < 2 + slots; ++k) in_.push_back(n.in[k].id);
    for (size_t k = 0; k < 1 + slots; ++k) out_.push_back(n.out[k].id);
    for (size_t k = 0; k < 2 + slots; ++k)
      if (n.in[k].dtype != F64) throw std::runtime_error("float64 update: float64 p, g and state");
    step_ = counted ? n.in[2 + slots].id : -1;
    read_ = read ? n.in[n.in.size() - 3].id : -1;
    lr_ = n.in[n.in.size() - 2].id;
    wd_ = n.in[n.in.size() - 1].id;
  }
  void run(const Run& r) override {
    const double lr = *r.at<float>(lr_), wd = *r.at<float>(wd_);
    const double t = step_ >= 0 ? *r.at<float>(step_) : 0.0;
    const double m = read_ >= 0 ? *r.at<float>(read_) : kind_ == 'a' ? beta1_ : momentum_;
    const double* p = r.at<double>(in_[0]);
    const double* g = r.at<double>(in_[1]);
    double* po = r.at<double>(out_[0]);
    if (kind_ == 's') return sgd(p, g, po, lr, wd);
    if (kind_ == 'm') return sgd_momentum(p, g, r.at<double>(in_[2]), po, r.at<double>(out_[1]),
                                          lr, wd, m, t == 1.0);
    adam(r, p, g, po, lr, wd, m, t);
  }

 private:
  void sgd(const double* p, const double* g, double* po, double lr, double wd) const {
    const int64_t size = size_;
#pragma omp parallel for if(size >= kGrain)
    for (int64_t i = 0; i < size; ++i) po[i] = p[i] - lr * (wd != 0.0 ? g[i] + wd * p[i] : g[i]);
  }
  void sgd_momentum(const double* p, const double* g, const double* v, double* po, double* vo,
                    double lr, double wd, double m, bool first) const {
    const int64_t size = size_;
    const double d = dampening_;
    const bool nesterov = nesterov_, dampened = d != 0.0;
#pragma omp parallel for if(size >= kGrain)
    for (int64_t i = 0; i < size; ++i) {
      const double gi = wd != 0.0 ? g[i] + wd * p[i] : g[i];
      const double vn = dampened ? (first ? gi : m * v[i] + (1.0 - d) * gi) : m * v[i] + gi;
      vo[i] = vn;
      po[i] = p[i] - lr * (nesterov ? gi + m * vn : vn);
    }
  }
  void adam(const Run& r, const double* p, const double* g, double* po, double lr, double wd,
            double b1, double t) const {
    const double* m = r.at<double>(in_[2]);
    const double* v = r.at<double>(in_[3]);
    const double* vmax = amsgrad_ ? r.at<double>(in_[4]) : nullptr;
    double* mo = r.at<double>(out_[1]);
    double* vo = r.at<double>(out_[2]);
    double* vmaxo = amsgrad_ ? r.at<double>(out_[3]) : nullptr;
    const double b2 = beta2_, eps = epsilon_, w = 1.0 - b1;
    const double step_size = lr / (1.0 - std::pow(b1, t));
    const double root = std::sqrt(1.0 - std::pow(b2, t));
    const double shrink = decoupled_ ? 1.0 - lr * wd : 1.0, gwd = decoupled_ ? 0.0 : wd;
    const int64_t size = size_;
#pragma omp parallel for if(size >= kGrain)
    for (int64_t i = 0; i < size; ++i) {
      const double gi = gwd != 0.0 ? g[i] + gwd * p[i] : g[i];
      // beta1 m + (1 - beta1) g, the reference's (and the float32 kernel's) rather than
      // torch's lerp, m + (1 - beta1)(g - m): an ulp apart, but lerp makes an infinite m NaN
      const double mn = b1 * m[i] + w * gi;
      const double vn = v[i] * b2 + (1.0 - b2) * gi * gi;
      double vd = vn;
      if (vmax) {
        vd = (vmax[i] > vn || vmax[i] != vmax[i]) ? vmax[i] : vn;
        vmaxo[i] = vd;
      }
      mo[i] = mn;
      vo[i] = vn;
      po[i] = p[i] * shrink + (-step_size * mn) / (std::sqrt(vd) / root + eps);
    }
  }

  char kind_;  // 's' SGD, 'm' ApplyMomentum, 'a' ApplyAdam
  int64_t size_;
  double momentum_, dampening_, beta1_, beta2_, epsilon_;
  bool nesterov_, decoupled_, amsgrad_;
  std::vector<int> in_, out_;
  int step_ = -1, read_ = -1, lr_ = -1, wd_ = -1;
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

// The sum of a gradient over K micro-batches (planner/ir/accumulation.py), written over
// the sum's bytes. Division by K, not a product with 1/K: the reference's rounding.
class AccumulateGrad : public Kernel {
 public:
  explicit AccumulateGrad(const Node& n)
      : size_(n.in[0].size()), sum_(n.in[0].id), g_(n.in[1].id), step_(n.in[2].id),
        out_(n.out[0].id), k_(n.attrs.i("micro_batches")) {
    require_f32(n);
    if (n.in[0].dtype != F32 || n.in[1].dtype != F32 || n.in[2].dtype != I64 ||
        n.in[2].size() != 1)
      throw std::runtime_error("AccumulateGrad: takes float32 sum and gradient and an int64 "
                               "micro-step count");
    if (k_ < 2) throw std::runtime_error("AccumulateGrad: micro_batches must be >= 2");
  }
  void run(const Run& r) override {
    const float* s = r.at<float>(sum_);
    const float* g = r.at<float>(g_);
    float* o = r.at<float>(out_);
    const float k = static_cast<float>(k_);
    if (*r.at<int64_t>(step_) % k_ == 0) {
#pragma omp parallel for if(size_ >= kGrain)
      for (int64_t i = 0; i < size_; ++i) o[i] = g[i] / k;
    } else {
#pragma omp parallel for if(size_ >= kGrain)
      for (int64_t i = 0; i < size_; ++i) o[i] = s[i] + g[i] / k;
    }
  }

 private:
  int64_t size_;
  int sum_, g_, step_, out_;
  int64_t k_;
};

class ScheduledLR : public Kernel {
 public:
  explicit ScheduledLR(const Node& n) : o_(scheduled_lr_operands(n)) {}
  void run(const Run& r) override {
    const double lr = *r.at<float>(o_.lr);
    *r.at<float>(o_.out) =
        static_cast<float>(lr * lr_factor(o_.schedule, *r.at<int64_t>(o_.step)));
  }

 private:
  ScheduledLROperands o_;  // common/lr_schedule.h
};

// Fill (value) and Zeros: a constant of any dtype, written every step (cheap, and the bytes
// may be shared with other tensors between steps).
class Constant : public Kernel {
 public:
  Constant(const Node& n, double value) : size_(n.out[0].size()), dtype_(n.out[0].dtype),
                                          y_(n.out[0].id), value_(value) {}
  void run(const Run& r) override {
    // One fill per dtype (a switch per element ran 6 GB/s: MAE's 512 KB of zeros, 85 us).
    char* y = r.ptr[y_];
    switch (dtype_) {
      case F32: fill_with<float>(y, static_cast<float>(value_)); break;
      case F64: fill_with<double>(y, value_); break;
      case I64: fill_with<int64_t>(y, static_cast<int64_t>(value_)); break;
      case I32: fill_with<int32_t>(y, static_cast<int32_t>(value_)); break;
      case I16: fill_with<int16_t>(y, static_cast<int16_t>(value_)); break;
      case I8: fill_with<int8_t>(y, static_cast<int8_t>(value_)); break;
      case U8: fill_with<uint8_t>(y, static_cast<uint8_t>(value_)); break;
      case BOOL: fill_with<bool>(y, value_ != 0); break;
      default: throw std::runtime_error("constant of an unsupported dtype");
    }
  }

 private:
  template <typename T>
  void fill_with(char* y, T value) const {
    std::fill_n(reinterpret_cast<T*>(y), size_, value);
  }

  int64_t size_;
  int dtype_, y_;
  double value_;
};

bool f64_update(const Node& n) { return n.in[0].dtype == F64; }
KernelPtr sgd(const Node& n) {
  if (f64_update(n)) return std::make_unique<UpdateF64>(n, 's');
  return std::make_unique<Sgd>(n);
}
KernelPtr momentum(const Node& n) {
  if (f64_update(n)) return std::make_unique<UpdateF64>(n, 'm');
  return std::make_unique<Momentum>(n);
}
KernelPtr adam(const Node& n) {
  if (f64_update(n)) return std::make_unique<UpdateF64>(n, 'a');
  return std::make_unique<Adam>(n);
}
KernelPtr increment(const Node& n) { return std::make_unique<Increment>(n); }
KernelPtr accumulate_grad(const Node& n) { return std::make_unique<AccumulateGrad>(n); }
KernelPtr scheduled_lr(const Node& n) { return std::make_unique<ScheduledLR>(n); }
KernelPtr fill(const Node& n) { return std::make_unique<Constant>(n, n.attrs.f("value")); }
KernelPtr zeros(const Node& n) { return std::make_unique<Constant>(n, 0.0); }

}  // namespace

PLANNER_REGISTER_KERNELS(optim) {
  r["SGD"] = {sgd, "float32|float32,float64"};
  r["ApplyMomentum"] = {momentum, "float32|float32,float64"};
  r["ApplyAdam"] = {adam, "float32|float32,float64"};
  r["Increment"] = {increment, "float32|int64"};
  r["AccumulateGrad"] = accumulate_grad;
  r["ScheduledLR"] = scheduled_lr;
  r["Fill"] = {fill, "*"};
  r["Zeros"] = {zeros, "*"};
}

}  // namespace planner
