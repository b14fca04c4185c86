// The collectives of data-parallel training (planner/ops/collective.py), on the comm stream:
//   AllReduce [g_1..g_k] -> [r_1..r_k]   r_j = (sum over the process group's ranks of g_j) / ranks
// As on the CPU (templates/cpu/runtime/kernels/collective.cpp), the executor's collective
// (common/collective.h) sums one float buffer of device memory in place: with `in_place`, the gradients themselves, which
// the plan laid out side by side in the arena (each at the previous one's end rounded up to
// the device alignment, 256 bytes; the padding is summed too, and read by nothing); else a
// copy of them side by side in the op's scratch area. The bindings hand it to
// torch.distributed's all_reduce (NCCL) on a torch CUDA view of that buffer, ordered with the
// op's stream (planner/runtime/distributed.py): the call enqueues work and returns; nothing here waits
// for the GPU. Then each r_j is written as the sum scaled by 1/ranks, on the same stream.
//
// ZeRO-1 (planner plan --shard-optimizer), as on the CPU, with the bucket at the device
// arena's 256 bytes (the ops' `alignment` attr; common/collective.h ShardedBucket):
//   ReduceScatter [g_1..g_k] -> [s]   a sum reduce-scatter in place on the gradients' bucket,
//                                     then s = this rank's shard of it / ranks
//   ShardedUpdate [p_1..p_k, s, state shards, (t), lr, wd] -> [p_1'..p_k', state shards']
//                                     the optimizer update (planner/ops/optim.py's formulas,
//                                     as the CPU's update_math.h) on the parameters' floats in
//                                     this rank's shard, one launch per parameter there (the
//                                     padding left alone), then an all-gather of the
//                                     parameters' bucket in place
// Every launch and collective is enqueued on the op's stream: the plan's events order the
// gradients' writers before a reduce-scatter and the parameters' readers before an update.
#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "../kernel.h"
#include "sharded_update.h"

namespace planner {
namespace {

constexpr int64_t kBucketAlign = 256;  // the device arena's alignment (planner.memory.gpu)

__global__ void scale_into(float* out, const float* in, int64_t n, float scale) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = in[i] * scale;
}

class AllReduce : public Kernel {
 public:
  explicit AllReduce(const Node& n)
      : scale_(1.0f / static_cast<float>(n.attrs.i("ranks"))),
        in_place_(n.attrs.has("in_place") && n.attrs.b("in_place")) {
    if (n.attrs.i("ranks") < 1 || n.in.size() != n.out.size() || n.in.empty())
      throw std::runtime_error("an all-reduce needs ranks >= 1 and one output per input");
    for (size_t j = 0; j < n.in.size(); ++j) {
      if (n.in[j].dtype != F32 || n.out[j].dtype != F32 || n.in[j].size() != n.out[j].size())
        throw std::runtime_error("an all-reduce sums float32 gradients into outputs of their "
                                 "size");
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
  std::string detail() const override { return in_place_ ? "in place" : "copied to scratch"; }
  void run(const Run& r) override {
    const Collective& c = process_group(r.collective);
    float* bucket = in_place_ ? r.at<float>(in_[0]) : reinterpret_cast<float*>(r.scratch);
    int64_t end = 0;
    for (size_t j = 0; j < in_.size(); ++j) {
      if (in_place_) {
        // Where the plan put it: right after the previous gradient, rounded up; else the
        // plan does not hold what it promised, and summing the span would clobber others.
        const char* want = reinterpret_cast<const char*>(bucket) +
                           (end * static_cast<int64_t>(sizeof(float)) + kBucketAlign - 1) /
                               kBucketAlign * kBucketAlign;
        if (r.at<char>(in_[j]) != want)
          throw std::runtime_error("the bucket's gradients do not lie side by side in the "
                                   "arena, as its in-place plan says");
        at_[j] = (want - reinterpret_cast<const char*>(bucket)) / sizeof(float);
      } else {
        at_[j] = end;
        check_cuda(cudaMemcpyAsync(bucket + at_[j], r.at<float>(in_[j]),
                                   count_[j] * sizeof(float), cudaMemcpyDeviceToDevice,
                                   r.stream),
                   "cudaMemcpyAsync (bucket)");
      }
      end = at_[j] + count_[j];
    }
    c.run(kAllReduce, bucket, end, r.stream);
    for (size_t j = 0; j < out_.size(); ++j) {
      scale_into<<<blocks_for(count_[j], 256), 256, 0, r.stream>>>(
          r.at<float>(out_[j]), bucket + at_[j], count_[j], scale_);
      PLANNER_LAUNCHED("scale_into (all-reduce)");
    }
  }

 private:
  std::vector<int> in_, out_;
  std::vector<int64_t> count_;
  std::vector<int64_t> at_;  // per gradient: its first float in the bucket
  int64_t total_ = 0;
  float scale_;
  bool in_place_;
};

int64_t bucket_alignment(const Node& n) {
  return n.attrs.has("alignment") ? n.attrs.i("alignment") : kBucketAlign;
}

void require_f32(const Node& n, const char* op) {
  for (const auto* ts : {&n.in, &n.out})
    for (const TensorRef& t : *ts)
      if (t.dtype != F32) throw std::runtime_error(std::string(op) + " runs on float32 tensors");
}

// With `in_place` 0 (accumulation: the gradients are the sums' new values, state the bucket
// layout does not move) the bucket is a copy of them laid out alike in the op's scratch, its
// padding zeros, as on the CPU; compiled, not yet run on a GPU (the CUDA executor does not
// run accumulation yet: refused at planning).
class ReduceScatter : public Kernel {
 public:
  explicit ReduceScatter(const Node& n)
      : bucket_(n.in, n.attrs.i("ranks"), bucket_alignment(n)), out_(n.out[0].id),
        scale_(1.0f / static_cast<float>(n.attrs.i("ranks"))),
        in_place_(!n.attrs.has("in_place") || n.attrs.i("in_place") != 0) {
    require_f32(n, "a reduce-scatter");
    if (bucket_alignment(n) % kBucketAlign)
      throw std::runtime_error("a sharded bucket on the GPU is aligned to 256 bytes");
    if (n.out.size() != 1 || n.out[0].size() != bucket_.shard())
      throw std::runtime_error("a reduce-scatter writes one shard of its bucket");
  }
  size_t scratch_bytes() const override {
    return in_place_ ? 0 : static_cast<size_t>(bucket_.padded()) * sizeof(float);
  }
  std::string detail() const override { return in_place_ ? "in place" : "copied to scratch"; }
  void run(const Run& r) override {
    const Collective& c = process_group(r.collective);
    float* bucket = in_place_ ? bucket_.base(r, "gradients") : copied(r);
    c.run(kReduceScatter, bucket, bucket_.padded(), r.stream);
    const int64_t n = bucket_.shard();
    scale_into<<<blocks_for(n, 256), 256, 0, r.stream>>>(
        r.at<float>(out_), bucket + c.rank * n, n, scale_);
    PLANNER_LAUNCHED("scale_into (reduce-scatter)");
  }

 private:
  float* copied(const Run& r) const {
    float* b = reinterpret_cast<float*>(r.scratch);
    check_cuda(cudaMemsetAsync(b, 0, bucket_.padded() * sizeof(float), r.stream),
               "cudaMemsetAsync (bucket)");
    for (size_t j = 0; j < bucket_.size(); ++j)
      check_cuda(cudaMemcpyAsync(b + bucket_.at(j), r.at<float>(bucket_.id(j)),
                                 bucket_.count(j) * sizeof(float), cudaMemcpyDeviceToDevice,
                                 r.stream),
                 "cudaMemcpyAsync (bucket)");
    return b;
  }
  ShardedBucket bucket_;
  int out_;
  float scale_;
  bool in_place_;
};

// The updates of planner/ops/optim.py on n floats, element by element with
// common/sharded_update.h's formulas (the CPU's too). Outputs may be the inputs' bytes. The
// learning rate and weight decay are read on the device (a parameter group's scalars in the
// arena, set between steps), as the step count and, with `skip_on_overflow`, the overflow
// flag (`found`, else null): on a step it marks, the parameters are left (their outputs are
// their bytes) and each state shard's next value is its old one.
__device__ inline bool skipped(const float* found) { return found != nullptr && *found != 0.f; }

__device__ inline void keep(const float* old, float* next, int64_t n) {
  if (next == old) return;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    next[i] = old[i];
}

__global__ void sgd_shard(const float* p, const float* g, float* po, int64_t n,
                          const float* lr_at, const float* wd_at, const float* found) {
  if (skipped(found)) return;
  const float lr = *lr_at, wd = *wd_at;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    po[i] = sgd_element(p[i], g[i], lr, wd);
}

__global__ void momentum_shard(const float* p, const float* g, const float* v, float* po,
                               float* vo, int64_t n, const float* lr_at, const float* wd_at,
                               UpdateHyper a, const float* found) {
  if (skipped(found)) return keep(v, vo, n);
  const float lr = *lr_at, wd = *wd_at;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    momentum_element(p[i], g[i], v[i], po[i], vo[i], lr, wd, a.momentum, a.nesterov);
}

__global__ void adam_shard(const float* p, const float* g, const float* m, const float* v,
                           const float* t, float* po, float* mo, float* vo, int64_t n,
                           const float* lr_at, const float* wd_at, UpdateHyper a,
                           const float* found) {
  if (skipped(found)) {
    keep(m, mo, n);
    return keep(v, vo, n);
  }
  const AdamStep s = adam_step(a, *lr_at, *wd_at, *t);
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    adam_element(p[i], g[i], m[i], v[i], po[i], mo[i], vo[i], a, s);
}

// The operands and which floats are this rank's: common/sharded_update.h, as on the CPU.
class ShardedUpdate : public Kernel {
 public:
  explicit ShardedUpdate(const Node& n) : u_(n, bucket_alignment(n)) {
    if (bucket_alignment(n) % kBucketAlign)
      throw std::runtime_error("a sharded bucket on the GPU is aligned to 256 bytes");
  }
  std::string detail() const override { return "shard, all-gather in place"; }
  void run(const Run& r) override {
    const Collective& c = process_group(r.collective);
    float* base = u_.params.base(r, "parameters");
    const float* lr = r.at<float>(u_.lr);
    const float* wd = r.at<float>(u_.wd);
    // every rank reads the same flag: all skip, and all-gather their unchanged parameters
    const float* found = u_.found_inf >= 0 ? r.at<float>(u_.found_inf) : nullptr;
    u_.each_piece(c.rank, [&](size_t j, int64_t a, int64_t e, int64_t i, int64_t n) {
      const float* p = base + a;
      float* po = r.at<float>(u_.out[j]) + e;
      const float* g = r.at<float>(u_.grad) + i;
      const unsigned blocks = blocks_for(n, 256);
      if (u_.slots == 0) {
        sgd_shard<<<blocks, 256, 0, r.stream>>>(p, g, po, n, lr, wd, found);
      } else if (u_.slots == 1) {
        momentum_shard<<<blocks, 256, 0, r.stream>>>(
            p, g, r.at<float>(u_.state[0]) + i, po, r.at<float>(u_.state_out[0]) + i, n, lr,
            wd, u_.hyper, found);
      } else {
        adam_shard<<<blocks, 256, 0, r.stream>>>(
            p, g, r.at<float>(u_.state[0]) + i, r.at<float>(u_.state[1]) + i,
            r.at<float>(u_.step_count), po, r.at<float>(u_.state_out[0]) + i,
            r.at<float>(u_.state_out[1]) + i, n, lr, wd, u_.hyper, found);
      }
      PLANNER_LAUNCHED("sharded update");
    });
    c.run(kAllGather, base, u_.params.padded(), r.stream);
  }

 private:
  ShardedUpdateOperands u_;
};

KernelPtr make_all_reduce(const Node& n) { return std::make_unique<AllReduce>(n); }
KernelPtr make_reduce_scatter(const Node& n) { return std::make_unique<ReduceScatter>(n); }
KernelPtr make_sharded_update(const Node& n) { return std::make_unique<ShardedUpdate>(n); }

}  // namespace

PLANNER_REGISTER_KERNELS(collective) {
  r["AllReduce"] = make_all_reduce;
  r["ReduceScatter"] = make_reduce_scatter;
  r["ShardedUpdate"] = make_sharded_update;
}

}  // namespace planner
