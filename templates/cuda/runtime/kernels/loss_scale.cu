// Dynamic loss scaling of fp16-mixed training on the GPU (planner/ops/loss_scale.py), the
// CPU kernels' rule with nothing read back to the host: the scale, the clean-step count and
// found_inf stay in device memory, so a step keeps no synchronization and can be captured in a
// CUDA graph.
//   UnscaleGrads [g1 .. gn, scale] -> [g1 * (1/scale) .. gn * (1/scale), found_inf]
//     found_inf is zeroed, then every kernel that meets an inf or NaN writes 1 (the same
//     value from any thread: no atomics needed, the result is deterministic); memory
//     planning may put gk / scale in gk's bytes (OpDef.in_place), so g is not __restrict__
//   UpdateLossScale [scale, clean, found_inf] -> [scale', clean']   torch._amp_update_scale_
//   SkipOnOverflow [found_inf, next, old] -> found_inf ? old : next  (written over old)
//   ShardedUnscaleGrads [s1 .. sn, scale] -> [s1 * (1/scale) .. sn * (1/scale), found_inf]
//     (fp16-mixed under sharding) UnscaleGrads over this rank's gradient shards, its flag
//     summed over the ranks in the op's scratch (the executor's collective, on the op's
//     stream) and written as 0 or 1; compiled, not yet run on a GPU, and refused at planning
//     for GPU targets until it is (planner.target.backends)
#include <string>
#include <vector>

#include "../kernel.h"
#include "loss_scale.h"

namespace planner {
namespace {

__global__ void unscale(const float* g, float* y, const float* __restrict__ scale,
                        float* found, int64_t n) {
  // GradScaler: the reciprocal in double, rounded to float once.
  const float inv = static_cast<float>(1.0 / static_cast<double>(*scale));
  bool bad = false;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float v = g[i];  // read before y[i] is written: y may be g
    bad |= !isfinite(v);
    y[i] = v * inv;
  }
  if (bad) *found = 1.f;
}

__global__ void update_scale(const float* scale, const float* clean, const float* found,
                             float* scale_out, float* clean_out, float growth, float backoff,
                             float interval) {
  const float s = *scale, c = *clean;
  float next_scale = s, next_clean = 0.f;
  if (*found != 0.f) {
    next_scale = s * backoff;
  } else if (c + 1.f == interval) {
    const float grown = s * growth;
    if (isfinite(grown)) next_scale = grown;
  } else {
    next_clean = c + 1.f;
  }
  *scale_out = next_scale;
  *clean_out = next_clean;
}

__global__ void skip_on_overflow(const float* found, const float* next, const float* old,
                                 float* y, int64_t n) {
  const bool skip = *found != 0.f;
  const float* from = skip ? old : next;
  if (from == y) return;  // y holds old's bytes and the step is skipped: nothing to write
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    y[i] = from[i];
}

class UnscaleGrads : public Kernel {
 public:
  explicit UnscaleGrads(const Node& n)
      : scale_(n.in.back().id), found_(n.out.back().id), threads_(block_threads(n)) {
    require_f32(n);
    for (size_t k = 0; k + 1 < n.in.size(); ++k) {
      sizes_.push_back(n.in[k].size());
      in_.push_back(n.in[k].id);
      out_.push_back(n.out[k].id);
    }
  }
  void run(const Run& r) override { unscale_into(r, r.at<float>(found_)); }

 protected:
  // Every g / scale; *found = 1 where any g is an inf or NaN, else 0.
  void unscale_into(const Run& r, float* found) const {
    PLANNER_CUDA(cudaMemsetAsync(found, 0, sizeof(float), r.stream));
    for (size_t k = 0; k < in_.size(); ++k) {
      if (sizes_[k] == 0) continue;
      unscale<<<blocks_for(sizes_[k], threads_), threads_, 0, r.stream>>>(
          r.at<float>(in_[k]), r.at<float>(out_[k]), r.at<float>(scale_), found, sizes_[k]);
      PLANNER_LAUNCHED("unscale");
    }
  }
  int found() const { return found_; }

 private:
  std::vector<int64_t> sizes_;
  std::vector<int> in_, out_;
  int scale_, found_, threads_;
};

__global__ void any_rank(const float* summed, float* found) {
  *found = *summed != 0.f ? 1.f : 0.f;
}

// FSDP's ShardedGradScaler: each rank's flag all-reduced, so every rank skips alike.
class ShardedUnscaleGrads : public UnscaleGrads {
 public:
  using UnscaleGrads::UnscaleGrads;
  size_t scratch_bytes() const override { return 256; }  // the float the ranks sum
  std::string detail() const override { return "all-reduce of the flag"; }
  void run(const Run& r) override {
    float* summed = reinterpret_cast<float*>(r.scratch);
    unscale_into(r, summed);
    process_group(r.collective).run(kAllReduce, summed, 1, r.stream);
    any_rank<<<1, 1, 0, r.stream>>>(summed, r.at<float>(found()));
    PLANNER_LAUNCHED("any_rank");
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
    update_scale<<<1, 1, 0, r.stream>>>(r.at<float>(scale_), r.at<float>(clean_),
                                        r.at<float>(found_), r.at<float>(scale_out_),
                                        r.at<float>(clean_out_), rule_.growth, rule_.backoff,
                                        rule_.interval);
    PLANNER_LAUNCHED("update_scale");
  }

 private:
  int scale_, clean_, found_, scale_out_, clean_out_;
  LossScaleRule rule_;  // common/loss_scale.h
};

class SkipOnOverflow : public Kernel {
 public:
  explicit SkipOnOverflow(const Node& n)
      : size_(n.in[1].size()), found_(n.in[0].id), next_(n.in[1].id), old_(n.in[2].id),
        y_(n.out[0].id), threads_(block_threads(n)) {
    require_f32(n);
  }
  void run(const Run& r) override {
    if (size_ == 0) return;
    skip_on_overflow<<<blocks_for(size_, threads_), threads_, 0, r.stream>>>(
        r.at<float>(found_), r.at<float>(next_), r.at<float>(old_), r.at<float>(y_), size_);
    PLANNER_LAUNCHED("skip_on_overflow");
  }

 private:
  int64_t size_;
  int found_, next_, old_, y_, threads_;
};

KernelPtr unscale_grads(const Node& n) { return std::make_unique<UnscaleGrads>(n); }
KernelPtr update_loss_scale(const Node& n) { return std::make_unique<UpdateLossScale>(n); }
KernelPtr skip_on_overflow_op(const Node& n) { return std::make_unique<SkipOnOverflow>(n); }
KernelPtr sharded_unscale_grads(const Node& n) {
  return std::make_unique<ShardedUnscaleGrads>(n);
}

}  // namespace

PLANNER_REGISTER_KERNELS(loss_scale) {
  r["UnscaleGrads"] = unscale_grads;
  r["UpdateLossScale"] = update_loss_scale;
  r["SkipOnOverflow"] = skip_on_overflow_op;
  r["ShardedUnscaleGrads"] = sharded_unscale_grads;
}

}  // namespace planner
