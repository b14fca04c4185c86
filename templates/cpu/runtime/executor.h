// The CPU executor: loads a schedule (common/loader.h), creates every op's kernel once at load
// (on the lane that runs it, with the op's planned thread count), places every tensor and
// every op's scratch area in one arena, and runs the step on the plan's lanes (lanes.h): ops
// co-run on their planned CPUs as the plan placed them. `concurrent=false` runs the ops one
// at a time in plan order on the calling thread instead (the reference the concurrent run
// must match). A step allocates nothing.
#pragma once
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "kernel.h"
#include "lanes.h"
#include "loader.h"

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
  // jitter_us > 0 makes every lane sleep up to that long before each op (tests: adversarial
  // interleavings); a step that makes no progress for watchdog_seconds throws.
  explicit Executor(const std::string& schedule_path, bool concurrent = true,
                    int jitter_us = 0, double watchdog_seconds = 600.0);
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  const Schedule& schedule() const { return loaded_.get(); }
  int tensor_index(const std::string& name) const { return loaded_.tensor_index(name); }
  const TensorSpec& tensor(int id) const { return schedule().tensors[id]; }
  char* data(int id) const { return ptr_[id]; }
  Shape shape(int id) const;

  // Point an input's bytes at caller memory for the next step (nullptr: back to its arena slot).
  void bind(int id, char* p);
  // Run every op; per-op times go to stats. Throws naming the op on failure.
  void step();
  // Asynchronous steps (seed 004): start_async runs step() on a worker thread and returns at
  // once; join_async waits for it and rethrows its error. One step is in flight at a time:
  // step() or start_async() while one is throws, naming wait().
  void start_async();
  void join_async();
  bool in_flight() const { return in_flight_; }
  // The tensors the step in flight returns (set by the bindings with start_async).
  std::vector<int> pending_outputs;
  ~Executor();
  bool concurrent() const { return static_cast<bool>(lanes_); }
  int lanes() const { return schedule().num_lanes; }

  // Parameters and state (roles param, state) must be loaded before the first step; optimizer
  // state may be left out: it starts at zero (every optimizer's initial value), like the arena.
  static bool required(const TensorSpec& t) {
    return (t.role == PARAM || t.role == STATE) && t.updates < 0;
  }
  void mark_loaded(int id) { written_[id] = 1; }
  // Names of required tensors not loaded yet, in schedule order.
  std::vector<std::string> missing(const std::vector<int>& also_given = {}) const;
  // Throws naming them (step and step_async call it before running anything).
  void check_loaded() const;

  const std::vector<OpStats>& op_stats() const { return stats_; }
  // Per op: the scratch bytes its kernel needs, and whether the plan's area held them (else it
  // got a block of its own at load: the plan under-estimated the library's scratchpad).
  size_t scratch_needed(int op) const { return kernels_[op]->scratch_bytes(); }
  bool scratch_planned(int op) const { return overflow_[op] == nullptr; }
  int64_t steps() const { return steps_; }
  int64_t arena_bytes() const { return arena_.bytes(); }
  int64_t unplanned_scratch_bytes() const { return unplanned_; }
  void reset_stats();

 private:
  LoadedSchedule loaded_;
  dnnl::engine engine_;
  dnnl::stream stream_;
  std::vector<dnnl::stream> lane_streams_;  // one per lane: lanes never share a stream
  std::vector<KernelPtr> kernels_;
  Arena arena_;
  std::vector<char*> scratch_;                 // each op's scratch area
  std::vector<std::unique_ptr<Arena>> overflow_;
  int64_t unplanned_ = 0;
  std::vector<char*> ptr_;                     // current address of every tensor
  std::vector<OpStats> stats_;
  std::vector<char> written_;       // per tensor: written by load_params
  int64_t steps_ = 0;
  double watchdog_seconds_;
  std::unique_ptr<Lanes> lanes_;  // its threads stop before the rest is destroyed
  std::thread async_;
  std::exception_ptr async_error_;
  bool in_flight_ = false;
  void run_step();

  void create(int k);
  void run(int k);
};

}  // namespace planner
