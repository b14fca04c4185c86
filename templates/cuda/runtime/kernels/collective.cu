// The all-reduce of a bucket of gradients (planner/ops/collective.py), on the comm stream:
//   AllReduce [g_1..g_k] -> [r_1..r_k]   r_j = (sum over the process group's ranks of g_j) / ranks
// As on the CPU (templates/cpu/runtime/kernels/collective.cpp), the executor's collective sums
// one float buffer of device memory in place: with `in_place`, the gradients themselves, which
// the plan laid out side by side in the arena (each at the previous one's end rounded up to
// the device alignment, 256 bytes; the padding is summed too, and read by nothing); else a
// copy of them side by side in the op's scratch area. The bindings hand it to
// torch.distributed's all_reduce (NCCL) on a torch CUDA view of that buffer, ordered with the
// op's stream (planner/distributed.py): the call enqueues work and returns; nothing here waits
// for the GPU. Then each r_j is written as the sum scaled by 1/ranks, on the same stream.
#include <stdexcept>
#include <string>
#include <vector>

#include "../kernel.h"

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
    if (r.collective == nullptr || !*r.collective)
      throw std::runtime_error("no process group to all-reduce on (data-parallel plan)");
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
    (*r.collective)(bucket, end, r.stream);
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

KernelPtr make_all_reduce(const Node& n) { return std::make_unique<AllReduce>(n); }

}  // namespace

PLANNER_REGISTER_KERNELS(collective) {
  r["AllReduce"] = make_all_reduce;
}

}  // namespace planner
