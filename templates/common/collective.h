// The process group of a data-parallel plan as every backend's executor holds it, and the
// layout of a sharded bucket that ZeRO-1's kernels share (planner/ops/collective.py).
//
// The bindings set it between steps (`Executor.set_collective(fn, rank)`, the same on every
// backend: common/bindings.h define_collective; planner/runtime/distributed.py supplies fn).
// `run(what, data, count, stream)` runs one collective in place on data[0, count) over every
// rank's own buffer:
//   kAllReduce      every rank's floats become their sum over the ranks
//   kReduceScatter  rank r's shard, count / ranks floats at data + r * count / ranks, becomes
//                   the sum over the ranks of that shard (the rest is left as it is)
//   kAllGather      every rank's shard is copied to its place in every rank's buffer
// `stream` is the backend's queue the collective is ordered on: the op's cudaStream_t on
// CUDA (the call enqueues the collective and returns; nothing waits for the GPU), null on the
// CPU (the call returns when the collective is done). `rank` is this process's place in the
// group (which shard is its own).
#pragma once
#include <algorithm>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "runtime.h"

namespace planner {

enum CollectiveKind { kAllReduce = 0, kReduceScatter = 1, kAllGather = 2 };

struct Collective {
  std::function<void(int what, float* data, int64_t count, void* stream)> run;
  int rank = 0;
  explicit operator bool() const { return static_cast<bool>(run); }
};

// The executor's collective, for a collective op: a clear error where none was set (a
// data-parallel plan run without its process group).
inline const Collective& process_group(const Collective* c) {
  if (c == nullptr || !*c)
    throw std::runtime_error("no process group to run the collective on (data-parallel plan)");
  return *c;
}

// A sharded bucket's members as the plan laid them out: each at the previous one's end
// rounded up to `alignment` bytes (the op's attr: the arena's, 64 on the CPU, 256 on a GPU),
// the whole padded to `ranks` shards of a multiple of that. In floats throughout.
class ShardedBucket {
 public:
  ShardedBucket(const std::vector<TensorRef>& members, int64_t ranks, int64_t alignment)
      : ranks_(ranks) {
    if (ranks < 1 || members.empty())
      throw std::runtime_error("a sharded bucket needs ranks >= 1 and members");
    if (alignment < 4 || alignment % 4)
      throw std::runtime_error("a sharded bucket's alignment is a whole number of floats");
    const int64_t floats = alignment / 4;
    int64_t end = 0;
    for (const TensorRef& t : members) {
      ids_.push_back(t.id);
      count_.push_back(t.size());
      at_.push_back(at_.empty() ? 0 : (end + floats - 1) / floats * floats);
      end = at_.back() + t.size();
    }
    shard_ = ((end + ranks - 1) / ranks + floats - 1) / floats * floats;
  }
  int64_t shard() const { return shard_; }
  int64_t padded() const { return shard_ * ranks_; }
  size_t size() const { return ids_.size(); }
  int64_t at(size_t j) const { return at_[j]; }
  int64_t count(size_t j) const { return count_[j]; }
  int id(size_t j) const { return ids_[j]; }
  // The floats of member j in rank `rank`'s shard: [lo, hi) of the bucket (lo >= hi: none).
  std::pair<int64_t, int64_t> in_shard(size_t j, int rank) const {
    const int64_t lo = rank * shard_, hi = lo + shard_;
    return {std::max(lo, at_[j]), std::min(hi, at_[j] + count_[j])};
  }
  // The bucket's first float, after checking that the members lie where the plan says
  // (else the collective on the padded span would clobber other tensors). R: the backend's
  // Run (per tensor id, its current address).
  template <class R>
  float* base(const R& r, const char* what) const {
    float* b = r.template at<float>(ids_[0]);
    for (size_t j = 0; j < ids_.size(); ++j)
      if (r.template at<float>(ids_[j]) != b + at_[j])
        throw std::runtime_error(std::string("the bucket's ") + what +
                                 " do not lie side by side in the arena, as the plan says");
    return b;
  }

 private:
  int64_t ranks_, shard_ = 0;
  std::vector<int> ids_;
  std::vector<int64_t> count_, at_;
};

}  // namespace planner
