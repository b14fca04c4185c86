// A Conv2D's or MatMul's folded Relu (fused_activation.h), or a Conv2D's LeakyRelu where
// oneDNN's post-op does not apply (kernels/conv.cpp): the op's own kernel, then one pass over
// its float32 y as the Relu kernel makes (relu_value), while y is still in cache. Not
// oneDNN's Relu post-op: its JIT form is max(v, 0), which turns a NaN output into 0; after a
// NaN weight that would hide the NaN from the loss and from every gradient (ReluGrad passes
// nothing through a 0), so a diverged run would go on silently. Every element is stored, the
// kept ones unchanged: GCC may not invent a store, so `if (v < 0) v = 0` stays a branch per
// element (212 us over a 512x512 y on the 2-core EPYC, 85 us as a select).
#pragma once
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>

#include "fused_activation.h"
#include "kernel.h"

namespace planner {

// Relu's rule on one float32, the Relu kernel's (kernels/math.cpp) and every folded Relu's:
// np.maximum(v, 0) as the reference computes it, NaN kept, -0 to +0 (a kernel of its own kept
// -0, a bit the Relu op apart would not give).
inline float relu_value(float v) { return v > 0.f || v != v ? v : 0.f; }

// ReluGrad's rule on one float32, the ReluGrad kernel's and every folded ReluGrad's (a
// BatchNorm's, a sum's): np.where(r <= 0, 0, dy) from the Relu's output r, PyTorch's
// threshold_backward: a NaN r (a NaN input) passes dy, as it passes the NaN forward.
inline float relu_grad_value(float dy, float r) { return r <= 0.f ? 0.f : dy; }

// An op's folded activation (the `activation` attr): fused_activation.h's none or relu, or
// leaky_relu with its slope (attr alpha): LeakyRelu's rule as its oneDNN kernel computes it
// (x > 0 ? x : x * alpha) and LeakyReluGrad's (math.cpp: x > 0 ? dy : dy * alpha), x the value
// before it. A BatchNorm's loops apply it as they write y (kernels/batch_norm.cpp), the rest
// one pass over y after the op (FusedActivation).
struct FoldedActivation {
  enum Kind { kNone, kRelu, kLeaky } kind = kNone;
  float alpha = 0.f;
  FoldedActivation(const Attrs& attrs, const std::string& op) {
    const Activation act = fused_activation(attrs, op);
    if (act == kActLeakyRelu) {
      kind = kLeaky;
      alpha = static_cast<float>(attrs.f("alpha"));
    } else if (act == kActRelu) {
      kind = kRelu;
    }
  }
  // `then(act)`, act(v) the activation's rule (a lambda: the loops inline it). The leaky
  // product is taken whatever v's sign: as the select's arm, GCC left the loops scalar (a
  // 3x slower BatchNorm in DCGAN's step).
  template <class Then>
  void with_rule(Then then) const {
    const float a = alpha;
    if (kind == kRelu) return then([](float v) { return relu_value(v); });
    if (kind == kLeaky)
      return then([a](float v) {
        const float scaled = v * a;
        return v > 0.f ? v : scaled;
      });
    then([](float v) { return v; });
  }
  const char* name() const { return kind == kLeaky ? "leaky_relu" : "relu"; }
};

class FusedActivation : public Kernel {
 public:
  FusedActivation(KernelPtr op, int y, int64_t size, FoldedActivation act)
      : op_(std::move(op)), y_(y), size_(size), act_(act) {}
  size_t scratch_bytes() const override { return op_->scratch_bytes(); }
  std::string impl() const override { return op_->impl() + " + " + act_.name(); }
  void run(const Run& r) override {
    op_->run(r);
    float* y = r.at<float>(y_);
    const int64_t size = size_;
    act_.with_rule([&](auto act) {
#pragma omp parallel for num_threads(r.threads) schedule(static)
      for (int64_t i = 0; i < size; ++i) y[i] = act(y[i]);
    });
  }

 private:
  KernelPtr op_;
  int y_;
  int64_t size_;
  FoldedActivation act_;
};

// Op n's kernel `op` with n's folded activation after it (none: `op` itself).
inline KernelPtr with_fused_activation(KernelPtr op, const Node& n, const std::string& name) {
  const FoldedActivation act(n.attrs, name);
  if (act.kind == FoldedActivation::kNone) return op;
  const TensorRef& y = n.out[0];
  if (y.dtype != F32) throw std::runtime_error(name + ": a folded activation needs float32 y");
  return std::make_unique<FusedActivation>(std::move(op), y.id, y.size(), act);
}

}  // namespace planner
