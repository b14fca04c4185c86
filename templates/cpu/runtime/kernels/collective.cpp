// The all-reduce of a bucket of gradients (planner/ops/collective.py), on the comm lane:
//   AllReduce [g_1..g_k] -> [r_j..r_k]   r_j = (sum over the process group's ranks of g_j) / ranks
// The executor's collective (common/collective.h; the Python bindings hand it to
// torch.distributed's all_reduce on the process group) sums one float buffer in place: with
// `in_place`, the gradients themselves, which the plan laid out side by side in the arena
// (each at the previous one's end rounded up to the arena's 64-byte alignment; the padding is
// summed too, and read by nothing); else a copy of them side by side in the op's scratch
// area. Then each r_j is written as the sum scaled by 1/ranks.
//
// ZeRO-1 (planner plan --shard-optimizer) splits a bucket, laid out alike (at the op's
// `alignment`, 64 bytes here) and padded to `ranks` shards of `shard` floats
// (planner/ops/collective.py, common/collective.h ShardedBucket), among the ranks; rank r owns
// floats [r shard, (r + 1) shard). Every rank runs the same plan: its shard is the first
// one's place plus rank x shard.
//   ReduceScatter [g_1..g_k] -> [s]   a sum reduce-scatter in place on the gradients'
//                                     bucket; s = this rank's shard of it / ranks
//   ShardedUpdate [p_1..p_k, s, state shards, (t), lr, wd] -> [p_1'..p_k', state shards']
//                                     the optimizer update on the parameters' floats in this
//                                     rank's shard (the padding left alone), then an
//                                     all-gather of the parameters' bucket in place
//   AllGather [s] -> [p_1..p_k]       (ZeRO-3) s copied to this rank's place in the gathered
//                                     copies' bucket, then an all-gather of it in place
//                                     (with skip_on_overflow, found_inf last: a step it
//                                     marks updates and gathers nothing)
//   ShardedClipGradNorm [s_1..s_k] -> [s_1 c..s_k c, total_norm]
//                                     clip_grad_norm_ over this rank's gradient shards: their
//                                     squares summed (double, in a fixed order), the float
//                                     sum all-reduced over the ranks in the op's scratch,
//                                     total_norm its root, c as ClipGradNorm's
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

#include "../loops.h"
#include "clip_grad_norm.h"
#include "update_math.h"

namespace planner {
namespace {

constexpr int64_t kAlign = 64;  // the arena's alignment (planner.memory.options)

class AllReduce : public Kernel {
 public:
  explicit AllReduce(const Node& n)
      : scale_(1.0f / static_cast<float>(n.attrs.i("ranks"))),
        in_place_(n.attrs.has("in_place") && n.attrs.b("in_place")) {
    require_f32(n);
    if (n.attrs.i("ranks") < 1 || n.in.size() != n.out.size() || n.in.empty())
      throw std::runtime_error("an all-reduce needs ranks >= 1 and one output per input");
    for (size_t j = 0; j < n.in.size(); ++j) {
      in_.push_back(n.in[j].id);
      out_.push_back(n.out[j].id);
      count_.push_back(n.in[j].size());
      total_ += n.in[j].size();
    }
    at_.resize(in_.size());
  }
  size_t scratch_bytes() const override {
    return in_place_ ? 0 : static_cast<size_t>(total_) * sizeof(float);
  }
  std::string impl() const override { return in_place_ ? "in place" : "copied to scratch"; }
  void run(const Run& r) override {
    const Collective& c = process_group(r.collective);
    float* bucket = in_place_ ? r.at<float>(in_[0]) : reinterpret_cast<float*>(r.scratch);
    std::vector<int64_t>& at = at_;  // each gradient's first float in the bucket
    int64_t end = 0;
    for (size_t j = 0; j < in_.size(); ++j) {
      if (in_place_) {
        // Where the plan put it: right after the previous gradient, rounded up; else the
        // plan does not hold what it promised, and summing the span would clobber others.
        const char* want = reinterpret_cast<const char*>(bucket) +
                           (end * static_cast<int64_t>(sizeof(float)) + kAlign - 1) / kAlign *
                               kAlign;
        if (r.at<char>(in_[j]) != want)
          throw std::runtime_error("the bucket's gradients do not lie side by side in the "
                                   "arena, as its in-place plan says");
        at[j] = (want - reinterpret_cast<const char*>(bucket)) / sizeof(float);
      } else {
        at[j] = end;
        std::memcpy(bucket + at[j], r.at<float>(in_[j]), count_[j] * sizeof(float));
      }
      end = at[j] + count_[j];
    }
    c.run(kAllReduce, bucket, end, nullptr);
    for (size_t j = 0; j < out_.size(); ++j) {
      float* o = r.at<float>(out_[j]);
      const float* s = bucket + at[j];
      for (int64_t i = 0; i < count_[j]; ++i) o[i] = s[i] * scale_;
    }
  }

 private:
  std::vector<int> in_, out_;
  std::vector<int64_t> count_;
  std::vector<int64_t> at_;  // per gradient: its first float in the bucket, this step
  int64_t total_ = 0;
  float scale_;
  bool in_place_;
};

// The alignment of a sharded bucket (its op's attr; absent: the CPU arena's).
int64_t bucket_alignment(const Node& n) {
  return n.attrs.has("alignment") ? n.attrs.i("alignment") : kAlign;
}

// With `in_place` 0 (accumulation: the gradients are the sums' new values, state the bucket
// layout does not move) the bucket is a copy of them laid out alike in the op's scratch area,
// its padding zeros, and each rank's sums stay its own.
class ReduceScatter : public Kernel {
 public:
  explicit ReduceScatter(const Node& n)
      : bucket_(n.in, n.attrs.i("ranks"), bucket_alignment(n)), out_(n.out[0].id),
        scale_(1.0f / static_cast<float>(n.attrs.i("ranks"))),
        in_place_(!n.attrs.has("in_place") || n.attrs.i("in_place") != 0) {
    require_f32(n);
    if (n.out.size() != 1 || n.out[0].size() != bucket_.shard())
      throw std::runtime_error("a reduce-scatter writes one shard of its bucket");
  }
  size_t scratch_bytes() const override {
    return in_place_ ? 0 : static_cast<size_t>(bucket_.padded()) * sizeof(float);
  }
  std::string impl() const override { return in_place_ ? "in place" : "copied to scratch"; }
  void run(const Run& r) override {
    const Collective& c = process_group(r.collective);
    float* bucket = in_place_ ? bucket_.base(r, "gradients") : copied(r);
    c.run(kReduceScatter, bucket, bucket_.padded(), nullptr);
    const int64_t lo = c.rank * bucket_.shard();
    const float* mine = bucket + lo;
    float* o = r.at<float>(out_);
    // The padding's floats are zeros (as the op's reference has them), not the sum of
    // whatever bytes lay there: ZeRO-3 updates the whole shard, padding included.
    std::fill(o, o + bucket_.shard(), 0.0f);
    for (size_t j = 0; j < bucket_.size(); ++j) {
      const auto [a, b] = bucket_.in_shard(j, c.rank);
      for (int64_t i = a; i < b; ++i) o[i - lo] = mine[i - lo] * scale_;
    }
  }

 private:
  float* copied(const Run& r) const {
    float* b = reinterpret_cast<float*>(r.scratch);
    std::fill(b, b + bucket_.padded(), 0.0f);
    for (size_t j = 0; j < bucket_.size(); ++j)
      std::memcpy(b + bucket_.at(j), r.at<float>(bucket_.id(j)),
                  static_cast<size_t>(bucket_.count(j)) * sizeof(float));
    return b;
  }
  ShardedBucket bucket_;
  int out_;
  float scale_;
  bool in_place_;
};

// The operands and which floats are this rank's: common/sharded_update.h, as on CUDA.
class ShardedUpdate : public Kernel {
 public:
  explicit ShardedUpdate(const Node& n) : u_(n, bucket_alignment(n)) {
    static_cast<UpdateHyper&>(a_) = u_.hyper;
  }
  std::string impl() const override { return "shard, all-gather in place"; }
  void run(const Run& r) override {
    const Collective& c = process_group(r.collective);
    float* base = u_.params.base(r, "parameters");
    if (u_.found_inf >= 0 && *r.at<float>(u_.found_inf) != 0.f) {
      // An overflowing fp16 step (the flag every rank reduced alike): no update and no
      // all-gather on any rank; the parameters are their own bytes, a state shard's next
      // value holds the old one.
      for (int j = 0; j < u_.slots; ++j) {
        const float* old = r.at<float>(u_.state[j]);
        float* next = r.at<float>(u_.state_out[j]);
        if (next != old) std::copy(old, old + u_.params.shard(), next);
      }
      return;
    }
    const float t = u_.step_count >= 0 ? *r.at<float>(u_.step_count) : 0.f;
    const UpdateAttrs hyper = with_hyperparameters(a_, r.at<float>(u_.lr), r.at<float>(u_.wd));
    u_.each_piece(c.rank, [&](size_t j, int64_t a, int64_t e, int64_t i, int64_t n) {
      const float* p = base + a;
      float* po = r.at<float>(u_.out[j]) + e;
      const float* g = r.at<float>(u_.grad) + i;
      if (u_.slots == 0) {
        sgd_update(p, g, po, n, hyper);
      } else if (u_.slots == 1) {
        momentum_update(p, g, r.at<float>(u_.state[0]) + i, po,
                        r.at<float>(u_.state_out[0]) + i, n, hyper);
      } else {
        adam_update(p, g, r.at<float>(u_.state[0]) + i, r.at<float>(u_.state[1]) + i, t, po,
                    r.at<float>(u_.state_out[0]) + i, r.at<float>(u_.state_out[1]) + i, n,
                    hyper);
      }
    });
    c.run(kAllGather, base, u_.params.padded(), nullptr);
  }

 private:
  ShardedUpdateOperands u_;
  UpdateAttrs a_;
};

// ZeRO-3 (planner plan --shard-parameters): AllGather [s] -> [p_1..p_k] writes this rank's
// shard s of the parameters' bucket at its place in the bucket the gathered copies form (laid
// out as a sharded bucket, planner.memory.layout), then all-gathers the bucket in place.
class AllGather : public Kernel {
 public:
  explicit AllGather(const Node& n)
      : bucket_(n.out, n.attrs.i("ranks"), bucket_alignment(n)), in_(n.in.at(0).id) {
    require_f32(n);
    if (n.in.size() != 1 || n.in[0].size() != bucket_.shard())
      throw std::runtime_error("an all-gather reads one shard of its bucket");
  }
  std::string impl() const override { return "in place"; }
  void run(const Run& r) override {
    const Collective& c = process_group(r.collective);
    float* base = bucket_.base(r, "gathered parameters");
    std::memcpy(base + c.rank * bucket_.shard(), r.at<float>(in_),
                static_cast<size_t>(bucket_.shard()) * sizeof(float));
    c.run(kAllGather, base, bucket_.padded(), nullptr);
  }

 private:
  ShardedBucket bucket_;
  int in_;
};

class ShardedClipGradNorm : public Kernel {
 public:
  explicit ShardedClipGradNorm(const Node& n) : c_(grad_clip(n)) {}  // common/clip_grad_norm.h
  size_t scratch_bytes() const override { return kAlign; }  // the float the ranks sum
  std::string impl() const override { return "all-reduce of the squares"; }
  void run(const Run& r) override {
    const Collective& c = process_group(r.collective);
    // The shards' squares in one fixed order (a serial loop: the same bits every step, so a
    // resumed run repeats exactly; a shard is 1/N of the gradients).
    double squares = 0;
    for (size_t k = 0; k < c_.in.size(); ++k) {
      const float* g = r.at<float>(c_.in[k]);
      for (int64_t i = 0; i < c_.sizes[k]; ++i) squares += static_cast<double>(g[i]) * g[i];
    }
    float* sum = reinterpret_cast<float*>(r.scratch);
    *sum = static_cast<float>(squares);
    c.run(kAllReduce, sum, 1, nullptr);
    const float total = std::sqrt(*sum);
    const float coef = clip_factor(c_.max_norm, total);
    for (size_t k = 0; k < c_.in.size(); ++k) {
      const float* g = r.at<float>(c_.in[k]);
      float* y = r.at<float>(c_.out[k]);
      for (int64_t i = 0; i < c_.sizes[k]; ++i) y[i] = g[i] * coef;
    }
    *r.at<float>(c_.total) = total;
  }

 private:
  GradClip c_;
};

KernelPtr make_all_gather(const Node& n) { return std::make_unique<AllGather>(n); }
KernelPtr make_sharded_clip(const Node& n) { return std::make_unique<ShardedClipGradNorm>(n); }
KernelPtr make_all_reduce(const Node& n) { return std::make_unique<AllReduce>(n); }
KernelPtr make_reduce_scatter(const Node& n) { return std::make_unique<ReduceScatter>(n); }
KernelPtr make_sharded_update(const Node& n) { return std::make_unique<ShardedUpdate>(n); }

}  // namespace

PLANNER_REGISTER_KERNELS(collective) {
  r["AllReduce"] = make_all_reduce;
  r["ReduceScatter"] = make_reduce_scatter;
  r["ShardedUpdate"] = make_sharded_update;
  r["AllGather"] = make_all_gather;
  r["ShardedClipGradNorm"] = make_sharded_clip;
}

}  // namespace planner
