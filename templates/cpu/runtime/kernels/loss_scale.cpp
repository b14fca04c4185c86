// Dynamic loss scaling of fp16-mixed training (planner/ops/loss_scale.py), float32 loops:
//   UnscaleGrads [g1 .. gn, scale] -> [g1 * (1/scale) .. gn * (1/scale), found_inf]
//   UpdateLossScale [scale, clean, found_inf] -> [scale', clean']   torch._amp_update_scale_
//   SkipOnOverflow [found_inf, next, old] -> found_inf ? old : next  (written over old)
//   ShardedUnscaleGrads [s1 .. sn, scale] -> [s1 * (1/scale) .. sn * (1/scale), found_inf]
//       (fp16-mixed under sharding, on the comm lane) UnscaleGrads over this rank's gradient
//       shards, its flag summed over the ranks in the op's scratch: 1 where any rank overflowed
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "../loops.h"
#include "collective.h"
#include "loss_scale.h"

namespace planner {
namespace {

class UnscaleGrads : public Kernel {
 public:
  explicit UnscaleGrads(const Node& n) : scale_(n.in.back().id), found_(n.out.back().id) {
    require_f32(n);
    for (size_t k = 0; k + 1 < n.in.size(); ++k) {
      sizes_.push_back(n.in[k].size());
      in_.push_back(n.in[k].id);
      out_.push_back(n.out[k].id);
    }
  }
  void run(const Run& r) override { *r.at<float>(found_) = unscale(r) ? 1.f : 0.f; }

 protected:
  // Writes every g / scale; whether any g is an inf or NaN.
  bool unscale(const Run& r) const {
    // A scale of zero (left unloaded: optimizer state starts at zero) or not finite would
    // make every gradient 0 * inf = NaN, which the overflow check below does not see.
    const float scale = *r.at<float>(scale_);
    if (!(std::isfinite(scale) && scale > 0.f))
      throw std::runtime_error("the fp16 loss scale is " + std::to_string(scale) +
                               "; load 'optim/loss_scale' (init_params gives 2^16)");
    // GradScaler: the reciprocal in double, rounded to float once.
    const float inv = static_cast<float>(1.0 / static_cast<double>(scale));
    int bad = 0;
    for (size_t k = 0; k < in_.size(); ++k) {
      // y may be g (memory planning writes gk / scale over gk: OpDef.in_place): each
      // element is read before it is written, by the same thread.
      const float* g = r.at<float>(in_[k]);
      float* y = r.at<float>(out_[k]);
      const int64_t size = sizes_[k];
#pragma omp parallel for reduction(| : bad)
      for (int64_t i = 0; i < size; ++i) {
        bad |= !std::isfinite(g[i]);
        y[i] = g[i] * inv;
      }
    }
    return bad != 0;
  }
  int found() const { return found_; }

 private:
  std::vector<int64_t> sizes_;
  std::vector<int> in_, out_;
  int scale_, found_;
};

// FSDP's ShardedGradScaler: each rank's found_inf all-reduced, so every rank skips alike.
class ShardedUnscaleGrads : public UnscaleGrads {
 public:
  using UnscaleGrads::UnscaleGrads;
  size_t scratch_bytes() const override { return 64; }  // the float the ranks sum
  std::string impl() const override { return "all-reduce of the flag"; }
  void run(const Run& r) override {
    const Collective& c = process_group(r.collective);
    float* flag = reinterpret_cast<float*>(r.scratch);
    *flag = unscale(r) ? 1.f : 0.f;
    c.run(kAllReduce, flag, 1, nullptr);
    *r.at<float>(found()) = *flag != 0.f ? 1.f : 0.f;
  }
};

class UpdateLossScale : public Kernel {
 public:
  explicit UpdateLossScale(const Node& n)
      : scale_(n.in[0].id), clean_(n.in[1].id), found_(n.in[2].id), scale_out_(n.out[0].id),
        clean_out_(n.out[1].id), rule_(loss_scale_rule(n.attrs)) {
    require_f32(n);
  }
  void run(const Run& r) override {
    const float scale = *r.at<float>(scale_);
    const float clean = *r.at<float>(clean_);
    const bool found = *r.at<float>(found_) != 0.f;
    float next_scale = scale, next_clean = 0.f;
    if (found) {
      next_scale = scale * rule_.backoff;
    } else if (clean + 1.f == rule_.interval) {
      const float grown = scale * rule_.growth;
      if (std::isfinite(grown)) next_scale = grown;
    } else {
      next_clean = clean + 1.f;
    }
    *r.at<float>(scale_out_) = next_scale;
    *r.at<float>(clean_out_) = next_clean;
  }

 private:
  int scale_, clean_, found_, scale_out_, clean_out_;
  LossScaleRule rule_;  // common/loss_scale.h
};

class SkipOnOverflow : public Kernel {
 public:
  explicit SkipOnOverflow(const Node& n)
      : size_(n.in[1].size()), found_(n.in[0].id), next_(n.in[1].id), old_(n.in[2].id),
        y_(n.out[0].id) {
    require_f32(n);
  }
  void run(const Run& r) override {
    if (*r.at<float>(found_) != 0.f) {
      // y holds old's bytes (an in-place update) or is another buffer: copy unless the same
      float* y = r.at<float>(y_);
      const float* old = r.at<float>(old_);
      if (y != old) std::copy(old, old + size_, y);
      return;
    }
    const float* next = r.at<float>(next_);
    float* y = r.at<float>(y_);
    const int64_t size = size_;
#pragma omp parallel for
    for (int64_t i = 0; i < size; ++i) y[i] = next[i];
  }

 private:
  int64_t size_;
  int found_, next_, old_, y_;
};

KernelPtr unscale_grads(const Node& n) { return std::make_unique<UnscaleGrads>(n); }
KernelPtr update_loss_scale(const Node& n) { return std::make_unique<UpdateLossScale>(n); }
KernelPtr skip_on_overflow(const Node& n) { return std::make_unique<SkipOnOverflow>(n); }
KernelPtr sharded_unscale_grads(const Node& n) {
  return std::make_unique<ShardedUnscaleGrads>(n);
}

}  // namespace

PLANNER_REGISTER_KERNELS(loss_scale) {
  r["UnscaleGrads"] = unscale_grads;
  r["UpdateLossScale"] = update_loss_scale;
  r["SkipOnOverflow"] = skip_on_overflow;
  r["ShardedUnscaleGrads"] = sharded_unscale_grads;
}

}  // namespace planner
