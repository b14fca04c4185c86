// The all-reduce of a bucket of gradients (planner/ops/collective.py), on the comm lane:
//   AllReduce [g_1..g_k] -> [r_1..r_k]   r_j = (sum over the process group's ranks of g_j) / ranks
// The bucket is copied side by side into the op's scratch area (planned in the arena), summed
// in place there by the executor's collective (the Python bindings hand it to
// torch.distributed's all_reduce on the process group), then copied out scaled by 1/ranks.
#include <cstring>

#include "../loops.h"

namespace planner {
namespace {

class AllReduce : public Kernel {
 public:
  explicit AllReduce(const Node& n) : scale_(1.0f / static_cast<float>(n.attrs.i("ranks"))) {
    require_f32(n);
    if (n.attrs.i("ranks") < 1 || n.in.size() != n.out.size())
      throw std::runtime_error("an all-reduce needs ranks >= 1 and one output per input");
    for (size_t j = 0; j < n.in.size(); ++j) {
      in_.push_back(n.in[j].id);
      out_.push_back(n.out[j].id);
      count_.push_back(n.in[j].size());
      total_ += n.in[j].size();
    }
  }
  size_t scratch_bytes() const override { return static_cast<size_t>(total_) * sizeof(float); }
  void run(const Run& r) override {
    if (r.collective == nullptr || !*r.collective)
      throw std::runtime_error("no process group to all-reduce on (data-parallel plan)");
    float* bucket = reinterpret_cast<float*>(r.scratch);
    int64_t at = 0;
    for (size_t j = 0; j < in_.size(); ++j) {
      std::memcpy(bucket + at, r.at<float>(in_[j]), count_[j] * sizeof(float));
      at += count_[j];
    }
    (*r.collective)(bucket, total_);
    at = 0;
    for (size_t j = 0; j < out_.size(); ++j) {
      float* o = r.at<float>(out_[j]);
      for (int64_t i = 0; i < count_[j]; ++i) o[i] = bucket[at + i] * scale_;
      at += count_[j];
    }
  }

 private:
  std::vector<int> in_, out_;
  std::vector<int64_t> count_;
  int64_t total_ = 0;
  float scale_;
};

KernelPtr make_all_reduce(const Node& n) { return std::make_unique<AllReduce>(n); }

}  // namespace

PLANNER_REGISTER_KERNELS(collective) {
  r["AllReduce"] = make_all_reduce;
}

}  // namespace planner
