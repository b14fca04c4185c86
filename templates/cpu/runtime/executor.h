// The executor: creates every op's kernel once at load (with the op's planned thread count set
// on the creating thread), allocates one arena for every tensor and every kernel's scratch area,
// and runs the step in plan order. A step allocates nothing.
#pragma once
#include <chrono>
#include <string>
#include <unordered_map>
#include <vector>

#include "kernel.h"

namespace planner {

struct OpStats {
  double seconds = 0;  // summed over calls
  int64_t calls = 0;
};

// "'a', 'b', ... (n in all)": names for an error message.
std::string name_list(const std::vector<std::string>& names);

class Executor {
 public:
  // Loads the schedule library at `path` (a shared library exporting planner_schedule).
  explicit Executor(const std::string& schedule_path);
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  const Schedule& schedule() const { return *s_; }
  int tensor_index(const std::string& name) const;  // -1 when absent
  const TensorSpec& tensor(int id) const { return s_->tensors[id]; }
  char* data(int id) const { return ptr_[id]; }
  Shape shape(int id) const;

  // Point an input's bytes at caller memory for the next step (nullptr: back to its arena slot).
  void bind(int id, char* p);
  // Run every op in plan order; per-op times go to stats. Throws naming the op on failure.
  void step();

  // Parameters and state (roles param, state) must be loaded before the first step; optimizer
  // state may be left out: it starts at zero (every optimizer's initial value), like the arena.
  static bool required(const TensorSpec& t) {
    return (t.role == PARAM || t.role == STATE) && t.updates < 0;
  }
  void mark_loaded(int id) { loaded_[id] = 1; }
  // Names of required tensors not loaded yet, in schedule order.
  std::vector<std::string> missing(const std::vector<int>& also_given = {}) const;

  const std::vector<OpStats>& op_stats() const { return stats_; }
  int64_t steps() const { return steps_; }
  int64_t arena_bytes() const { return arena_bytes_; }
  int64_t scratch_bytes() const { return scratch_bytes_; }
  void reset_stats();

 private:
  void* lib_ = nullptr;
  const Schedule* s_ = nullptr;
  dnnl::engine engine_;
  dnnl::stream stream_;
  std::vector<KernelPtr> kernels_;
  std::vector<char*> ptr_;          // current address of every tensor
  std::vector<int> root_;           // the tensor whose bytes each one shares
  std::unordered_map<std::string, int> index_;
  char* arena_ = nullptr;
  int64_t arena_bytes_ = 0;         // tensors + scratch
  int64_t scratch_bytes_ = 0;
  std::vector<OpStats> stats_;
  std::vector<char> loaded_;        // per tensor: written by load_params
  int64_t steps_ = 0;
};

}  // namespace planner
