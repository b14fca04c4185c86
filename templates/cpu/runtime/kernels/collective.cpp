// The all-reduce of a bucket of gradients (planner/ops/collective.py), on the comm lane:
//   AllReduce [g_1..g_k] -> [r_j..r_k]   r_j = (sum over the process group's ranks of g_j) / ranks
// The executor's collective (the Python bindings hand it to torch.distributed's all_reduce on
// the process group) sums one float buffer in place: with `in_place`, the gradients
// themselves, which the plan laid out side by side in the arena (each at the previous one's
// end rounded up to the arena's 64-byte alignment; the padding is summed too, and read by
// nothing); else a copy of them side by side in the op's scratch area. Then each r_j is
// written as the sum scaled by 1/ranks.
#include <cstdint>
#include <cstring>

#include "../loops.h"

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
    if (r.collective == nullptr || !*r.collective)
      throw std::runtime_error("no process group to all-reduce on (data-parallel plan)");
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
    (*r.collective)(bucket, end);
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

KernelPtr make_all_reduce(const Node& n) { return std::make_unique<AllReduce>(n); }

}  // namespace

PLANNER_REGISTER_KERNELS(collective) {
  r["AllReduce"] = make_all_reduce;
}

}  // namespace planner
