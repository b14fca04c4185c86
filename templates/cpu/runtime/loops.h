// Small pieces shared by the plain-loop kernels.
#pragma once
#include <cstring>

#include "kernel.h"

namespace planner {

// Copies `bytes` from one tensor to another; nothing when they share bytes (an alias).
class Copy : public Kernel {
 public:
  Copy(int from, int to, int64_t bytes) : from_(from), to_(to), bytes_(bytes) {}
  void run(const Run& r) override {
    if (r.ptr[from_] != r.ptr[to_]) std::memcpy(r.ptr[to_], r.ptr[from_], bytes_);
  }

 private:
  int from_, to_;
  int64_t bytes_;
};

inline void require_f32(const Node& n) {
  for (const TensorRef& t : n.in)
    if (t.dtype != F32 && t.dtype != I64)
      throw std::runtime_error("this kernel takes float32 (and int64 index) tensors");
  for (const TensorRef& t : n.out)
    if (t.dtype != F32) throw std::runtime_error("this kernel writes float32 tensors");
}

inline int norm_axis(int64_t axis, size_t rank) {
  int r = static_cast<int>(rank == 0 ? 1 : rank);
  return static_cast<int>((axis % r + r) % r);
}

}  // namespace planner
